"""The load the live trace watches: the benchmark package's shared-prefix chat traffic (llmhost.bench.traffic,
through the toolkit's one model client), in phases.

`run_phases` first warms the prefix cache (tracer paused, not measured), then runs the overhead schedule of
llmhost.fi.trace.overhead — off, on, on, off — switching the tracer through `set_tracing` between phases, and
returns the traffic summary stored in trace.json (requests, cache hits, phases, tracer overhead).
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmhost import config
from llmhost.bench.traffic import ChatLoad, run_clients
from llmhost.client import Endpoint, make_client
from llmhost.fi.trace import overhead

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

    @property
    def load(self) -> ChatLoad:
        """The traffic part of the options."""
        return ChatLoad(self.concurrency, self.prefixes, self.prefix_words, self.max_tokens)


def run_phases(cfg: config.Config, opts: CaptureOptions, set_tracing: Callable[[bool], None]) -> dict[str, Any]:
    """Warm-up, then the overhead schedule; returns the traffic summary (failures recorded, never raised)."""
    endpoint = Endpoint(f"{cfg.base_url}/v1", cfg.served_model_name, cfg.api_key())
    client = make_client(endpoint, timeout_s=120)
    numbers = itertools.count()

    def drive(seconds: float, label: str) -> list[dict[str, Any]]:
        return run_clients(client, endpoint.model, opts.load, seconds, f"[trace] {label}", numbers)

    set_tracing(False)
    everything = drive(WARMUP_S, "warm-up (tracer paused)")
    phases = []
    seconds = opts.duration_s / len(overhead.SCHEDULE)
    for number, arm in enumerate(overhead.SCHEDULE, 1):
        set_tracing(arm == "on")
        start = time.monotonic()
        records = drive(seconds, f"phase {number}/{len(overhead.SCHEDULE)} tracer {arm}")
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
