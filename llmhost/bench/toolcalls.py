"""Tool-call quality check: ~40 prompts over the workload's three tools plus prompts that need no tool.

Each case is sent once through the OpenAI SDK (chat.completions, tools = llmhost.bench.workloads.TOOLS,
tool_choice "auto", thinking off so the answer comes within the token budget) and scored:
    ok = the right tool (or no tool when none is expected) and, for a call, arguments that parse as JSON and
         contain the expected values (case-insensitive substring per required key).
Random (dummy) weights never call a tool unless forced, so on LOAD_FORMAT=dummy each arm gets one ToolCallSkipped
record (with the reason) instead of 40 meaningless failures. Records go to toolcalls.jsonl.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import time
from typing import Any

from llmhost.bench.records import ToolCallCase, ToolCallSkipped
from llmhost.bench.workloads import TOOLS


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    case_id: str
    prompt: str
    expected_tool: str | None
    expected_args: tuple[tuple[str, str], ...] = ()


def _cases() -> list[Case]:  # pragma: no mutate block (prompt wording is data for the model, not a rule)
    weather = [("Paris", "celsius"), ("Tokyo", "fahrenheit"), ("Nairobi", "celsius"), ("Chicago", "fahrenheit"),
               ("Oslo", "celsius"), ("Lima", "celsius"), ("Mumbai", "celsius"), ("Denver", "fahrenheit"),
               ("Cairo", "celsius"), ("Seattle", "fahrenheit")]
    docs = ["rotating the API key", "KV cache page size", "SSH tunnel setup", "FlashInfer JIT cache",
            "tokenizer worker count", "prefix cache flush", "GPU memory fraction", "chunked prefill size",
            "tool call parser", "Prometheus metrics"]
    tickets = [("Server down after upgrade", "high"), ("Typo in the README", "low"),
               ("Dashboard chart is slow", "medium"), ("Login page returns 500", "high"),
               ("Add dark mode", "low"), ("Benchmark ETA is wrong", "medium"),
               ("Out of memory on startup", "high"), ("Rename a config key", "low")]
    no_tool = ["What is 17 times 23?", "Translate 'good morning' into Spanish.", "Write a haiku about GPUs.",
               "Explain what a prefix cache is in one sentence.", "What is the capital of Canada?",
               "Summarise: the quick brown fox jumps over the lazy dog.", "Name three prime numbers.",
               "Is Python dynamically typed? Answer yes or no.", "Give me a synonym for 'fast'.",
               "What does HTTP stand for?", "Convert 3 kilometres to metres.", "Say hello in French."]
    cases = [Case(f"weather-{i}", f"What's the weather in {city} right now? Use {unit}.", "get_weather",
                  (("city", city), ("unit", unit))) for i, (city, unit) in enumerate(weather)]
    cases += [Case(f"docs-{i}", f"Search the internal documentation for: {q}", "search_docs", (("query", q.split()[0]),))
              for i, q in enumerate(docs)]
    cases += [Case(f"ticket-{i}", f"Open a {prio} priority support ticket titled '{title}'.", "create_ticket",
                   (("title", title.split()[0]), ("priority", prio))) for i, (title, prio) in enumerate(tickets)]
    cases += [Case(f"none-{i}", prompt, None) for i, prompt in enumerate(no_tool)]
    return cases


CASES: list[Case] = _cases()


def score(case: Case, called_tool: str | None, arguments: str | None) -> tuple[bool, bool]:
    """(args_ok, ok) for one answer."""
    if case.expected_tool is None:
        return called_tool is None, called_tool is None
    try:
        args = json.loads(arguments or "")
    except json.JSONDecodeError:
        return False, False
    args_ok = isinstance(args, dict) and all(
        want.lower() in str(args.get(key, "")).lower() for key, want in case.expected_args)
    return args_ok, called_tool == case.expected_tool and args_ok


def run_case(client: Any, model: str, case: Case, arm: str) -> ToolCallCase:
    """Ask one case; failures (HTTP, timeouts) are recorded as a not-ok case."""
    start = time.perf_counter()
    called, arguments, error = None, None, ""
    try:
        resp = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": case.prompt}], tools=TOOLS, tool_choice="auto",
            temperature=0, max_tokens=256, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        calls = resp.choices[0].message.tool_calls or []
        if calls:
            called, arguments = calls[0].function.name, calls[0].function.arguments
    except Exception as exc:  # noqa: BLE001 - recorded as data
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
    args_ok, ok = score(case, called, arguments)
    return ToolCallCase(arm=arm, case_id=case.case_id, prompt=case.prompt, expected_tool=case.expected_tool,
                        called_tool=called, args_ok=args_ok, ok=ok and not error,
                        latency_ms=(time.perf_counter() - start) * 1000.0, error=error)


def check(arm: str, client: Any, model: str, load_format: str,
          workers: int = 8) -> list[ToolCallCase] | list[ToolCallSkipped]:
    """Records for toolcalls.jsonl: every case for this arm, or one skip note on dummy weights."""
    if load_format == "dummy":
        return [ToolCallSkipped(arm, "dummy weights (LOAD_FORMAT=dummy) never call tools unless forced — "
                                     "run with real weights to score tool calls")]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: run_case(client, model, c, arm), CASES))
