"""Smoke checks of a running model API, each one asserting something real and recording what it saw.

Checks (registry CHECKS, run in this order; `smoke_test.py --only NAME` runs one):
  chat          a plain chat reply is non-empty (content, or reasoning_content: random weights only "think")
  model         /v1/models serves exactly one id, equal to the expected name (SGLang accepts and echoes any
                "model" in a request, so /v1/models is the only place a wrong name shows)
  tools         get_weather is called; with real weights its arguments are a JSON object naming Paris as "city".
                forced = tool_choice naming it with thinking off, streamed (passes on random weights, whose
                arguments are noise: there only the call's structure is required); natural = tool_choice auto
                (real weights only); auto = forced, plus natural with real weights. Real or random comes from
                the server's load_format (/server_info) unless --weights says it
  prefix_cache  ~4k-token prompts, each sent cold then again: every repeat reports cached_tokens >= 90% of
                prompt_tokens, and the median repeat is faster than the median cold send (3 pairs, after a
                warm-up request, so one latency spike on a tunnel neither fails nor passes it)
  stream        a streamed reply arrives in more than one chunk; time to first token is measured
Every model call goes through the `openai` SDK; failures are recorded as data (ok=False, error), never raised.
"""
from __future__ import annotations

import json
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from llmhost.client import Endpoint, describe_error

TOOL_MODES = ("auto", "forced", "natural")
CACHE_MIN_FRACTION = 0.9
GET_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}


@dataclass(frozen=True)
class Options:
    tool_mode: str = "auto"
    real_weights: bool = False
    max_tokens: int = 32


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    latency_s: float
    input: str
    output: str
    usage: dict | None = None
    detail: str = ""
    error: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Ctx:
    client: Any
    ep: Endpoint
    served_ids: list[str]
    opts: Options


def usage_dict(usage: Any) -> dict | None:
    """prompt/completion/cached/reasoning token counts from an SDK usage object (None-safe)."""
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    extra = getattr(usage, "model_extra", None) or {}
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "cached_tokens": getattr(details, "cached_tokens", None) if details is not None else None,
            "reasoning_tokens": extra.get("reasoning_tokens")}


def reply_text(message: Any) -> tuple[str, str]:
    """(content, reasoning_content) of a chat message; SGLang's reasoning_content is an SDK extra field."""
    return message.content or "", getattr(message, "reasoning_content", None) or ""


def _chat(ctx: Ctx, messages: list[dict], **kw: Any) -> tuple[Any, float]:
    kw.setdefault("max_tokens", ctx.opts.max_tokens)
    t0 = time.perf_counter()
    resp = ctx.client.chat.completions.create(model=ctx.ep.model, messages=messages, **kw)
    return resp, time.perf_counter() - t0


def check_chat(ctx: Ctx) -> CheckResult:
    prompt = "Say hello in five words."
    resp, latency = _chat(ctx, [{"role": "user", "content": prompt}])
    content, reasoning = reply_text(resp.choices[0].message)
    shown = content or (f"(reasoning) {reasoning}" if reasoning else "")
    ok = bool(content.strip() or reasoning.strip())
    return CheckResult("chat", ok, latency, prompt, shown, usage_dict(resp.usage),
                       "non-empty reply" if ok else "the reply had neither content nor reasoning_content")


def check_model(ctx: Ctx) -> CheckResult:
    resp, latency = _chat(ctx, [{"role": "user", "content": "Hi"}], max_tokens=1)
    problems = []
    if ctx.served_ids != [ctx.ep.model]:
        problems.append(f"/v1/models serves {ctx.served_ids} but we expect ['{ctx.ep.model}'] — pass --model "
                        "or fix SERVED_MODEL_NAME")
    # why no check of resp.model: SGLang echoes whatever name the request sent (captured: "nope" comes back)
    return CheckResult("model", not problems, latency, f"model={ctx.ep.model}",
                       f"served={ctx.served_ids} reply.model={resp.model}", usage_dict(resp.usage),
                       "; ".join(problems) or "served name matches")


def _streamed_calls(stream: Any) -> tuple[list[tuple[str, str]], Any]:
    """[(name, arguments)] assembled from streamed tool-call deltas, and the final usage."""
    calls: dict[int, list[str]] = {}
    use = None
    for chunk in stream:
        use = chunk.usage or use
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                name, args = calls.setdefault(delta.index or 0, ["", ""])
                fn = delta.function
                calls[delta.index or 0] = [name + ((fn and fn.name) or ""), args + ((fn and fn.arguments) or "")]
    return [(name, args) for _, (name, args) in sorted(calls.items())], use


def _tool_attempt(ctx: Ctx, forced: bool) -> tuple[bool, str, str, float, dict | None]:
    """(ok, what was seen, problem, latency, usage) of one tool-call request."""
    # why thinking off in both: forced needs it (random weights never leave <think>); natural gets a direct
    # answer from real Qwen3 instead of a long think block that could eat the token budget.
    kw: dict[str, Any] = {"tools": [GET_WEATHER], "max_tokens": 64 if forced else 512,
                          "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}} if forced
                          else "auto"}
    messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    if forced:
        # why streamed: SGLang 0.5.17 emits a named call's structure as the stream starts, while a non-streamed
        # reply parses the whole output as JSON, which random weights cut off at max_tokens (seen on an H200).
        t0 = time.perf_counter()
        stream = ctx.client.chat.completions.create(model=ctx.ep.model, messages=messages, stream=True,
                                                    stream_options={"include_usage": True}, **kw)
        calls, raw_usage = _streamed_calls(stream)
        latency, use = time.perf_counter() - t0, usage_dict(raw_usage)
    else:
        resp, latency = _chat(ctx, messages, **kw)
        calls = [(c.function.name, c.function.arguments) for c in resp.choices[0].message.tool_calls or []]
        use = usage_dict(resp.usage)
    seen = ", ".join(f"{name}({args})" for name, args in calls) or "no tool call"
    if not calls:
        return False, seen, "no tool call in the reply", latency, use
    name, raw_args = calls[0]
    try:
        args = json.loads(raw_args or "")
    except ValueError:
        args = None
    if name != "get_weather":
        return False, seen, f"called {name}, expected get_weather", latency, use
    if not ctx.opts.real_weights:
        # why: the named call's structure is SGLang's; its arguments are the model's, and random weights write
        # anything there (an H200 run streamed get_weather(-80292)). Real weights must fill them in.
        note = "" if isinstance(args, dict) else " (arguments not a JSON object: expected from random weights)"
        return True, seen + note, "", latency, use
    if not isinstance(args, dict):
        return False, seen, "arguments are not a JSON object", latency, use
    city = args.get("city")
    if not isinstance(city, str) or "paris" not in city.lower():
        return False, seen, f"arguments {raw_args} do not give Paris as the required 'city'", latency, use
    return True, seen, "", latency, use


def check_tools(ctx: Ctx) -> CheckResult:
    mode = ctx.opts.tool_mode
    attempts = {"forced": [True], "natural": [False], "auto": [True] + ([False] if ctx.opts.real_weights else [])}
    seen, problems, latency, use = [], [], 0.0, None
    for forced in attempts[mode]:
        ok, what, problem, lat, use = _tool_attempt(ctx, forced)
        label = "forced" if forced else "natural"
        seen.append(f"{label}: {what}")
        latency += lat
        if not ok:
            problems.append(f"{label}: {problem}")
            break  # why: natural calling is only meaningful once the forced structure works
    detail = "; ".join(problems) or ("get_weather(city=Paris) called" if ctx.opts.real_weights
                                     else "get_weather called (structure only: random weights write noise arguments)")
    return CheckResult("tools", not problems, latency, f"get_weather, tool mode {mode}", "; ".join(seen), use, detail)


def long_prompt(nonce: str, words: int = 2300) -> str:
    """~4k tokens of plain text; the nonce comes first so the first send cannot hit an earlier run's cache."""
    topics = ["cache", "kernel", "batch", "prefill", "decode", "token", "page", "tensor", "queue", "stream"]
    body = " ".join(f"{topics[i % 10]}{i % 7} moves data." if i % 5 == 0 else topics[(i * 3) % 10]
                    for i in range(words))
    return f"Run {nonce}. Read this text and reply with one word.\n{body}"


def check_prefix_cache(ctx: Ctx, pairs: int = 3) -> CheckResult:
    _chat(ctx, [{"role": "user", "content": "Hi"}], max_tokens=1)  # why: the first call of a client pays setup
    cold_s, warm_s, cold_use, warm_use, problems = [], [], [], [], []
    for _ in range(pairs):
        messages = [{"role": "user", "content": long_prompt(uuid.uuid4().hex[:12])}]
        first, t1 = _chat(ctx, messages, max_tokens=1)
        second, t2 = _chat(ctx, messages, max_tokens=1)
        cold_s.append(t1)
        warm_s.append(t2)
        cold_use.append(usage_dict(first.usage))
        warm_use.append(usage_dict(second.usage))
    for use in warm_use:
        prompt, cached = use["prompt_tokens"], use["cached_tokens"] or 0
        if cached < CACHE_MIN_FRACTION * prompt:
            problems.append(f"a repeat reused {cached}/{prompt} prompt tokens (< {CACHE_MIN_FRACTION:.0%}) — is the "
                            "radix cache disabled, or the server started without --enable-cache-report?")
            break
    cold, warm = statistics.median(cold_s), statistics.median(warm_s)
    if warm >= cold:
        problems.append(f"repeats took {warm:.3f}s (median), not faster than cold sends ({cold:.3f}s)")
    last = warm_use[-1]
    prompt, cached = last["prompt_tokens"], last["cached_tokens"] or 0
    out = (f"cold {', '.join(f'{t:.3f}' for t in cold_s)}s; repeat {', '.join(f'{t:.3f}' for t in warm_s)}s; "
           f"cached {', '.join(str(u['cached_tokens'] or 0) for u in warm_use)} of {prompt}")
    return CheckResult("prefix_cache", not problems, warm, f"{pairs} ~{prompt}-token prompts, each twice, max_tokens 1",
                       out, last, "; ".join(problems) or f"{cached / max(prompt, 1):.1%} of the prompt reused, "
                       f"repeats {cold / max(warm, 1e-9):.1f}x faster (medians)",
                       extra={"cold_latency_s": cold_s, "repeat_latency_s": warm_s, "cold_median_s": cold,
                              "repeat_median_s": warm, "first_usage": cold_use[-1]})


def check_stream(ctx: Ctx) -> CheckResult:
    prompt = "Count from one to ten."
    t0 = time.perf_counter()
    stream = ctx.client.chat.completions.create(model=ctx.ep.model, messages=[{"role": "user", "content": prompt}],
                                                max_tokens=ctx.opts.max_tokens, stream=True,
                                                stream_options={"include_usage": True})
    ttft, chunks, text, use = None, 0, [], None
    for chunk in stream:
        if chunk.usage is not None:
            use = usage_dict(chunk.usage)
        for choice in chunk.choices:
            piece = (choice.delta.content or "") + (getattr(choice.delta, "reasoning_content", None) or "")
            if piece:
                chunks += 1
                text.append(piece)
                ttft = ttft if ttft is not None else time.perf_counter() - t0
    total = time.perf_counter() - t0
    ok = chunks > 1 and ttft is not None
    detail = f"{chunks} text chunks, TTFT {ttft:.3f}s" if ttft is not None else "no text chunk arrived"
    return CheckResult("stream", ok, total, prompt, "".join(text), use,
                       detail if ok else f"expected more than one text chunk: {detail}",
                       extra={"ttft_s": ttft, "chunks": chunks})


CHECKS: dict[str, Callable[[Ctx], CheckResult]] = {
    "chat": check_chat, "model": check_model, "tools": check_tools,
    "prefix_cache": check_prefix_cache, "stream": check_stream,
}


def run_check(name: str, ctx: Ctx) -> CheckResult:
    t0 = time.perf_counter()
    try:
        return CHECKS[name](ctx)
    except Exception as exc:  # noqa: BLE001 - a failing call is a failed check, reported as data
        return CheckResult(name, False, time.perf_counter() - t0, "", "", error=describe_error(exc, ctx.ep),
                           detail="request failed")


def format_result(r: CheckResult, width: int = 160) -> str:
    """Human-readable block: verdict line, then input, output, usage."""
    def clip(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= width else text[: width - 1] + "…"

    lines = [f"[smoke] {r.name:<12} {'PASS' if r.ok else 'FAIL'}  {r.latency_s:.3f}s  {r.error or r.detail}"]
    if r.input:
        lines.append(f"    input : {clip(r.input)}")
    if r.output:
        lines.append(f"    output: {clip(r.output)}")
    if r.usage:
        lines.append("    usage : " + ", ".join(f"{k.replace('_tokens', '')} {v}" for k, v in r.usage.items()))
    return "\n".join(lines)


def summary(ep: Endpoint, results: list[CheckResult]) -> dict:
    """The one-line JSON document (--json): endpoint (no key), overall ok, each check."""
    return {"ok": bool(results) and all(r.ok for r in results), **ep.public(),
            "checks": [asdict(r) for r in results]}
