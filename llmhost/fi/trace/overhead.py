"""What the live trace costs the server: the same load with the tracer sampling ("on") and paused ("off"), in one
server boot, compared by output throughput and time per output token. Pure, unit-tested.

The phases run in the order off, on, on, off (ABBA): a slow drift of the server (prefix cache filling, clocks)
affects both arms equally to first order. Each phase's numbers come from the requests that started in it, drained
to completion: throughput = their output tokens / (last completion - phase start); TPOT = (last token - first token)
/ (tokens - 1) per request, the same definition run_bench uses. The noise floor is how far the two phases of one arm
differ from each other; an overhead smaller than that is reported as "within noise", not as a number to trust.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from llmhost.stats import percentile

SCHEDULE = ("off", "on", "on", "off")


def phase_metrics(arm: str, start: float, records: Sequence[dict]) -> dict:
    """One phase's load numbers from its request records (start/end monotonic seconds, tokens, ttft_s, tpot_s)."""
    ok = [r for r in records if r.get("ok")]
    span = max((r["end"] for r in records), default=start) - start
    tokens = sum(r["completion_tokens"] for r in ok)
    tpots = [r["tpot_s"] * 1e3 for r in ok if r.get("tpot_s")]
    ttfts = [r["ttft_s"] * 1e3 for r in ok if r.get("ttft_s") is not None]
    return {"arm": arm, "requests": len(records), "ok": len(ok), "duration_s": span, "output_tokens": tokens,
            "output_tok_s": tokens / span if span > 0 else None,
            "tpot_ms_median": statistics.median(tpots) if tpots else None,
            "tpot_ms_p90": percentile(tpots, 90) if tpots else None,
            "ttft_ms_median": statistics.median(ttfts) if ttfts else None}


def compare(phases: Sequence[dict]) -> dict:
    """on vs off: mean of each arm's phases, the change in percent, and the within-arm spread (noise floor)."""
    out: dict = {"schedule": [p["arm"] for p in phases]}
    for metric, better in (("output_tok_s", "higher"), ("tpot_ms_median", "lower")):
        arms = {arm: [p[metric] for p in phases if p["arm"] == arm and p.get(metric)] for arm in ("off", "on")}
        if not arms["off"] or not arms["on"]:
            out[metric] = None
            continue
        mean = {arm: statistics.fmean(values) for arm, values in arms.items()}
        change = 100 * (mean["on"] / mean["off"] - 1)
        noise = max(100 * (max(v) - min(v)) / statistics.fmean(v) for v in arms.values())
        costly = change < 0 if better == "higher" else change > 0
        out[metric] = {"off": mean["off"], "on": mean["on"], "change_pct": change, "noise_pct": noise,
                       "verdict": ("within noise" if abs(change) <= noise else
                                   "tracer costs" if costly else "tracer arm faster (noise or drift)")}
    return out
