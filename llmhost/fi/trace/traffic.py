"""The load the live trace watches: closed-loop chat clients sharing a few long system prompts (so the prefix cache
shares their KV pages), streamed so every request yields its TTFT and time per output token.

`run_phases` first warms the prefix cache (tracer paused, not measured), then runs the overhead schedule of
llmhost.fi.trace.overhead — off, on, on, off — switching the tracer through `set_tracing` between phases, and
returns the traffic summary stored in trace.json (requests, cache hits, phases, tracer overhead).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmhost import config
from llmhost.fi.trace import overhead

WORDS = ("cache kernel page prefix decode tensor memory request batch token latency throughput scheduler graph "
         "attention head layer model server queue radix tree block chunk prefill stream warp shared").split()
WARMUP_S = 5.0  # one round of every prompt: the prefix cache holds them before the first measured phase


@dataclasses.dataclass(frozen=True, slots=True)
class CaptureOptions:
    trace_dir: Path
    out_dir: Path
    duration_s: float  # measured seconds, split over the overhead schedule's phases
    concurrency: int
    prefixes: int
    prefix_words: int
    max_tokens: int
    every: int
    hook_timeout_s: float


def prefix_text(group: int, words: int) -> str:
    """A deterministic system prompt; requests of the same group share it, so their KV prefix is cached."""
    body = " ".join(WORDS[(group * 7919 + i * 31 + i // 7) % len(WORDS)] for i in range(words))
    return f"Reference document {group}. {body}"


def one_request(client: Any, cfg: config.Config, opts: CaptureOptions, number: int) -> dict[str, Any]:
    """One streamed chat request through the openai SDK; failure is recorded as data."""
    start = time.monotonic()
    first = last = None
    usage = None
    try:
        stream = client.chat.completions.create(
            model=cfg.served_model_name, max_tokens=opts.max_tokens, temperature=0.0, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "system", "content": prefix_text(number % opts.prefixes, opts.prefix_words)},
                      {"role": "user", "content": f"Question {number}: summarise part {number % 97}."}],
            # fixed-length answers (random weights stop anywhere); no <think> block to parse
            extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.monotonic()
                first = first or last
            usage = chunk.usage or usage
    except Exception as exc:  # the SDK raises many types; all are a failed request here
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200], "start": start, "end": time.monotonic()}
    if usage is None:
        return {"ok": False, "error": "no usage in the stream", "start": start, "end": time.monotonic()}
    tokens = usage.completion_tokens
    details = getattr(usage, "prompt_tokens_details", None)
    return {"ok": True, "start": start, "end": time.monotonic(), "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": tokens, "cached_tokens": getattr(details, "cached_tokens", None) or 0,
            "ttft_s": first - start if first else None,
            "tpot_s": (last - first) / (tokens - 1) if first and last and tokens > 1 else None}


def run_clients(client: Any, cfg: config.Config, opts: CaptureOptions, seconds: float, label: str,
                counter: Any) -> list[dict[str, Any]]:
    """`concurrency` closed-loop clients start requests for `seconds`, then finish the ones in flight."""
    deadline = time.monotonic() + seconds
    results: list[dict[str, Any]] = []

    def loop() -> None:
        while time.monotonic() < deadline:
            results.append(one_request(client, cfg, opts, next(counter)))

    with concurrent.futures.ThreadPoolExecutor(opts.concurrency) as pool:
        futures = [pool.submit(loop) for _ in range(opts.concurrency)]
        while not all(f.done() for f in futures):
            time.sleep(min(5.0, max(0.5, seconds / 4)))
            ok = sum(r["ok"] for r in results)
            left = max(0.0, deadline - time.monotonic())
            print(f"[trace] {label}: {ok} ok, {len(results) - ok} failed, ~{left:.0f}s left", flush=True)
    return results


def run_phases(cfg: config.Config, opts: CaptureOptions, set_tracing: Callable[[bool], None]) -> dict[str, Any]:
    """Warm-up, then the overhead schedule; returns the traffic summary (failures recorded, never raised)."""
    import openai

    client = openai.OpenAI(base_url=f"{cfg.base_url}/v1", api_key=cfg.api_key() or "none", timeout=120,
                           max_retries=0)
    counter = iter(range(10**9))
    set_tracing(False)
    everything = run_clients(client, cfg, opts, WARMUP_S, "warm-up (tracer paused)", counter)
    phases = []
    seconds = opts.duration_s / len(overhead.SCHEDULE)
    for number, arm in enumerate(overhead.SCHEDULE, 1):
        set_tracing(arm == "on")
        start = time.monotonic()
        records = run_clients(client, cfg, opts, seconds, f"phase {number}/{len(overhead.SCHEDULE)} tracer {arm}",
                              counter)
        phases.append(overhead.phase_metrics(arm, start, records))
        everything += records
    return summarize(everything, phases, opts)


def summarize(records: list[dict[str, Any]], phases: list[dict], opts: CaptureOptions) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["cached_tokens"] for r in ok)
    return {"requests": len(records), "ok": len(ok), "failed": len(records) - len(ok),
            "errors": sorted({r["error"] for r in records if not r["ok"]})[:5],
            "prompt_tokens": prompt, "cached_tokens": cached, "cache_hit_ratio": cached / prompt if prompt else None,
            "phases": phases, "overhead": overhead.compare(phases),
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(opts).items()}}
