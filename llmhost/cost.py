"""What serving costs: dollars per million output tokens from the GPU's hourly price and a measured throughput.

    usd_per_million_tokens(3.50, Interval(4847, 4700, 5000, 3))  -> Interval(0.2006, 0.1944, 0.2069, 3)

One hour at x output tok/s produces 3600·x tokens, so a million of them cost hourly_usd / (3600·x) · 1e6. The cost
falls as throughput rises, so a throughput CI [lo, hi] maps to the cost CI [cost(hi), cost(lo)]: the transform is
monotone, so the interval keeps its 95% coverage. The point estimate is the cost at the mean throughput (what the
GPU's hour buys at that rate), not the mean of per-repeat costs. The dashboard's cost card and the tuner's ranking
both go through this one function.
"""
from __future__ import annotations

import dataclasses
import math

from llmhost.stats import Interval

TOKENS_PER_MILLION = 1e6
SECONDS_PER_HOUR = 3600.0


def _cost(gpu_hourly_usd: float, tok_s: float) -> float:
    """Dollars per million tokens at tok_s; no throughput (or a CI bound at or below 0) buys no tokens: infinite."""
    if math.isnan(tok_s):
        return math.nan
    return gpu_hourly_usd / (tok_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION if tok_s > 0 else math.inf


def usd_per_million_tokens(gpu_hourly_usd: float | None, output_tok_s: Interval) -> Interval | None:
    """Cost of a million output tokens at `output_tok_s` (its CI inverted: the upper throughput bound gives the
    lower cost); None when no price is set, so callers show nothing. A Student-t CI over 2 repeats can reach below
    0 tok/s: the cost's upper bound is then infinite (the data cannot rule out any cost above the lower bound)."""
    if gpu_hourly_usd is None:
        return None
    value = _cost(gpu_hourly_usd, output_tok_s.value)
    if not output_tok_s.has_ci:
        return Interval(value, math.nan, math.nan, output_tok_s.n)
    return Interval(value, _cost(gpu_hourly_usd, output_tok_s.hi), _cost(gpu_hourly_usd, output_tok_s.lo),
                    output_tok_s.n)


@dataclasses.dataclass(frozen=True, slots=True)
class GpuPrice:
    """What an hour of the server's GPU costs, and where that number came from (shown beside every cost)."""

    usd_per_hour: float
    source: str  # "--gpu-hourly-usd", "GPU_HOURLY_USD, config.local.env:3", "GPU_HOURLY_USD, environment"
