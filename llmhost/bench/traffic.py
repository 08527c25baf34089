"""In-process chat traffic through the toolkit's one model client (llmhost.client): closed-loop clients sharing a
few long system prompts (so the prefix cache shares their KV pages), streamed so every request yields its TTFT and
time per output token. For load that must run inside this process, around something it switches between phases
(the FlashInfer live trace); the stress test itself drives bench_serving (llmhost.bench.points).

    client = make_client(endpoint)
    records = run_clients(client, endpoint.model, ChatLoad(concurrency=32, prefixes=4, prefix_words=1500,
                                                           max_tokens=128), 10.0, "[trace] phase 1", count())

Each record: ok, start/end (monotonic s), prompt/completion/cached tokens, ttft_s, tpot_s, gaps_s (between
consecutive content chunks); a failure is a record with ok False and its error, never an exception.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

WORDS = ("cache kernel page prefix decode tensor memory request batch token latency throughput scheduler graph "
         "attention head layer model server queue radix tree block chunk prefill stream warp shared").split()


@dataclasses.dataclass(frozen=True, slots=True)
class ChatLoad:
    concurrency: int  # closed-loop clients
    prefixes: int  # distinct shared system prompts
    prefix_words: int  # words per system prompt (~1.3 tokens each)
    max_tokens: int  # tokens generated per request (fixed: ignore_eos)


def prefix_text(group: int, words: int) -> str:
    """A deterministic system prompt; requests of the same group share it, so their KV prefix is cached."""
    body = " ".join(WORDS[(group * 7919 + i * 31 + i // 7) % len(WORDS)] for i in range(words))
    return f"Reference document {group}. {body}"


def one_request(client: Any, model: str, load: ChatLoad, number: int) -> dict[str, Any]:
    """One streamed chat request through the openai SDK; failure is recorded as data."""
    start = time.monotonic()
    first = last = None
    usage = None
    gaps: list[float] = []
    try:
        stream = client.chat.completions.create(
            model=model, max_tokens=load.max_tokens, temperature=0.0, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "system", "content": prefix_text(number % load.prefixes, load.prefix_words)},
                      {"role": "user", "content": f"Question {number}: summarise part {number % 97}."}],
            # fixed-length answers (random weights stop anywhere); no <think> block to parse
            extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                now = time.monotonic()
                if last is not None:
                    gaps.append(now - last)
                last = now
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
            "tpot_s": (last - first) / (tokens - 1) if first and last and tokens > 1 else None, "gaps_s": gaps}


def run_clients(client: Any, model: str, load: ChatLoad, seconds: float, label: str,
                numbers: Iterator[int]) -> list[dict[str, Any]]:
    """`concurrency` closed-loop clients start requests for `seconds`, then finish the ones in flight; a progress
    line `<label>: N ok, M failed, ~S s left` every few seconds and once done. `numbers` numbers the requests across
    calls."""
    deadline = time.monotonic() + seconds
    results: list[dict[str, Any]] = []

    def loop() -> None:
        while time.monotonic() < deadline:
            results.append(one_request(client, model, load, next(numbers)))

    with concurrent.futures.ThreadPoolExecutor(load.concurrency) as pool:
        futures = [pool.submit(loop) for _ in range(load.concurrency)]
        finished = False
        while not finished:  # a line every few seconds, and one when the last client is done (at once, no sleep)
            finished = not concurrent.futures.wait(futures, timeout=min(5.0, max(0.5, seconds / 4))).not_done
            ok = sum(r["ok"] for r in results)
            left = max(0.0, deadline - time.monotonic())
            print(f"{label}: {ok} ok, {len(results) - ok} failed, ~{left:.0f}s left", flush=True)
    return results
