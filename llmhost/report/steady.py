"""Steady-state tables of a run: each repeat of each point split into warm-up / steady window / drain
(llmhost.bench.window), statistics per repeat, CIs across repeats and paired arm differences (llmhost.repeats).
Pure: stored results in, plain-dict rows out (the dashboard renders them; summary.json carries them).

A repeat that failed its steadiness check is listed as not steady and left out of every mean, CI and paired
difference here; its transients and numbers still appear in its own row of the not-steady list.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from llmhost import repeats, stats
from llmhost.bench import window
from llmhost.bench.records import PointRecord, TelemetrySample
from llmhost.report import client_overhead, rate_budget, waves
from llmhost.report.load import Requests, Run
from llmhost.report.tables import Group, load_label


@dataclasses.dataclass(frozen=True, slots=True)
class RepeatWindow:
    """One repeat of a point, windowed: its TTFT by phase (successful requests that have one, in send order)."""

    point: PointRecord
    window: window.Window
    steadiness: window.Steadiness
    ttft_ms: dict[str, np.ndarray]  # phase -> TTFT
    prefix: window.PrefixSplit  # of the steady window
    steady_sent: tuple[np.ndarray, np.ndarray, np.ndarray]  # ok, TTFT, TPOT of every request of the window
    # SGLang's own mean TTFT over the window, the client's over the same span, requests SGLang counted
    # (llmhost.report.server_ttft); nan, nan, 0 without telemetry
    server_ttft: tuple[float, float, int] = (math.nan, math.nan, 0)
    client_cpu_pct: float = math.nan  # the load generator's mean CPU over the window, % of one core
    arrivals: waves.Waves = waves.Waves(math.nan, math.nan, 0, math.nan)  # how the window's requests were sent
    itl: tuple[float, float] = (math.nan, math.nan)  # SGLang's mean time per output token over the window, client's
    # mean prompt, output and prefix-cached prompt tokens of its successful requests
    tokens: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    running: float = math.nan  # SGLang's mean running requests over the window (telemetry), nan without it
    client_headers_ms: float = math.nan  # the client's mean time to response headers over server_ttft's requests
    # the steady window's successful requests' times to response headers (finite ones; empty: not recorded)
    steady_headers_ms: np.ndarray = dataclasses.field(default_factory=lambda: np.array([]))
    headers_pace_ms: float = math.nan  # how far apart a steady wave's response headers came back (waves.py)
    # the load generator's CPU % in the ticks a wave was sent, in the others, and the extra ms a wave cost it
    # (client_overhead.client_cpu_at_waves)
    client_cpu_waves: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    # SGLang's mean ms of each part of its TTFT over the window (client_overhead.TTFT_PARTS); {} without telemetry
    ttft_parts: dict[str, float] = dataclasses.field(default_factory=dict)
    # where a closed loop's steady rate went (llmhost.report.rate_budget); None: not a closed loop, or no window
    rate_budget: rate_budget.Budget | None = None
    # requests a prefill batch took, prefill batches a second (client_overhead.prefill_batching); nans without the
    # counter in telemetry
    prefills: tuple[float, float] = (math.nan, math.nan)
    # the size of the wave each of steady_sent's requests was sent in (waves.sizes); empty: not computed
    steady_wave_sizes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=int))

    def good_sent(self, slo: stats.Slo) -> tuple[int, int]:
        """(good, sent) among the steady window's requests (failed ones count as sent, not good)."""
        return int(stats.good_mask(*self.steady_sent, slo).sum()), int(self.steady_sent[0].size)

    @property
    def repeat(self) -> int:
        return self.point.repeat

    @property
    def is_steady(self) -> bool:
        return self.steadiness.is_steady


def window_repeat(point: PointRecord, r: Requests, seed: int = 0,
                  telemetry: tuple[TelemetrySample, ...] = ()) -> RepeatWindow:
    """Window one repeat's requests and check its steadiness; SGLang's own TTFT over the window from `telemetry`."""
    order = np.argsort(r.start_s, kind="stable")
    start, ttft, ok = r.start_s[order], r.ttft_ms[order], r.ok[order]
    w, steady = window.window_and_check(point, start, r.e2e_ms[order], r.output_tokens[order], ttft, ok, seed)
    by_phase = {ph: ttft[w.mask(ph) & ok & np.isfinite(ttft)] for ph in window.PHASES}  # no token: no TTFT sample
    in_window = w.mask("steady")
    prefix = window.prefix_split(ttft[in_window], ok[in_window], r.prompt_tokens[order][in_window],
                                 r.cached_tokens[order][in_window])
    timed = ok & np.isfinite(ttft)
    first, end = start[timed] + ttft[timed] / 1000.0, start[timed] + r.e2e_ms[order][timed] / 1000.0
    server = client_overhead.window_means(telemetry, point.point_id, w.t_start, w.t_end, first, ttft[timed])
    headers = client_overhead.headers_mean(telemetry, point.point_id, w.t_start, w.t_end, first,
                                           r.headers_ms[order][timed])
    cpu = client_overhead.client_cpu_pct(telemetry, point.point_id, w.t_start, w.t_end)
    itl = client_overhead.itl_means(telemetry, point.point_id, w.t_start, w.t_end, first, end,
                                    r.output_tokens[order][timed])
    done = in_window & ok
    cached = r.cached_tokens[order][done]
    tokens = (_mean_of(r.prompt_tokens[order][done]), _mean_of(r.output_tokens[order][done]),
              _mean_of(cached[np.isfinite(cached)]))  # a request whose reply carried no cached_tokens: not counted
    steady_headers = r.headers_ms[order][done]
    pace = waves.headers_pace_ms(start[done], steady_headers)
    cpu_waves = client_overhead.client_cpu_at_waves(telemetry, point.point_id, w.t_start, w.t_end,
                                                    waves.starts(start[in_window]))
    return RepeatWindow(point, w, steady, by_phase, prefix, (ok[in_window], ttft[in_window],
                                                            r.itl_mean_ms[order][in_window]), server, cpu,
                        waves.find(start[in_window]), itl, tokens,
                        client_overhead.running_mean(telemetry, point.point_id, w.t_start, w.t_end), headers,
                        steady_headers[np.isfinite(steady_headers)], pace, cpu_waves,
                        client_overhead.ttft_parts(telemetry, point.point_id, w.t_start, w.t_end),
                        _rate_budget(point, w, r, order, end, timed),
                        client_overhead.prefill_batching(telemetry, point.point_id, w.t_start, w.t_end),
                        waves.sizes(start[in_window]))


def _rate_budget(point: PointRecord, w: window.Window, r: Requests, order: np.ndarray, end: np.ndarray,
                 timed: np.ndarray) -> rate_budget.Budget | None:
    """The budget of a closed loop's steady window from the requests that streamed and completed inside it. `order`:
    r's send order; `timed`: the requests (in it) that streamed a first token; `end`: unix s of their ends."""
    if point.request_rate is not None or point.concurrency is None or not w.has_window:
        return None  # Poisson arrivals have no slots; a transient pattern (all at once) has no window
    inside = (end > w.t_start) & (end <= w.t_end)  # the window's completions, as its throughput counts them
    picked = order[timed][inside]
    return rate_budget.budget(point.concurrency, w.duration_s, w.completed, r.output_tokens[picked],
                              r.ttft_ms[picked], r.e2e_ms[picked], r.gaps(picked))


def _mean_of(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else math.nan


def window_groups(run: Run, groups: list[Group], seed: int = 0) -> dict[tuple, list[RepeatWindow]]:
    """Group key -> its successful repeats, windowed (repeat order)."""
    return {g.key: [window_repeat(p, run.requests[p.point_id], seed, run.telemetry) for p in g.ok_points
                    if p.point_id in run.requests] for g in groups}


def _measuring_side_fields(steady: list[RepeatWindow]) -> dict[str, Any]:
    """The measuring side's share over the steady repeats' windows: client and SGLang mean TTFT (weighted by the
    requests SGLang counted), the load generator's CPU, and client and SGLang time per token after the first."""
    seen = [r.server_ttft for r in steady if r.server_ttft[2] and math.isfinite(r.server_ttft[1])]
    n = sum(c for _, _, c in seen)
    heads = [(r.client_headers_ms, r.server_ttft[2]) for r in steady
             if r.server_ttft[2] and math.isfinite(r.client_headers_ms)]
    n_heads = sum(c for _, c in heads)
    pooled = np.concatenate([r.steady_headers_ms for r in steady]) if steady else np.array([])
    return {"server_ttft_mean_ms": sum(s * c for s, _, c in seen) / n if n else math.nan,
            "client_ttft_mean_ms": sum(m * c for _, m, c in seen) / n if n else math.nan, "server_ttft_n": n,
            "client_headers_mean_ms": sum(h * c for h, c in heads) / n_heads if n_heads else math.nan,
            # pooled like the steady TTFT p99 it is set against (the way-in share of the tail, steady_page)
            "client_headers_p99_ms": float(np.percentile(pooled, 99)) if pooled.size else math.nan,
            "headers_pace_ms": _median([r.headers_pace_ms for r in steady]),
            "client_cpu_wave_pct": _mean([r.client_cpu_waves[0] for r in steady]),
            "client_cpu_between_pct": _mean([r.client_cpu_waves[1] for r in steady]),
            "client_wave_extra_ms": _mean([r.client_cpu_waves[2] for r in steady]),
            "client_cpu_pct": _mean([r.client_cpu_pct for r in steady]),
            "server_itl_mean_ms": _mean([r.itl[0] for r in steady]),
            "client_itl_mean_ms": _mean([r.itl[1] for r in steady]),
            **{f"server_{name}_ms": _mean([r.ttft_parts.get(name, math.nan) for r in steady])
               for name, _, _ in client_overhead.TTFT_PARTS}}


def _budget_fields(steady: list[RepeatWindow]) -> dict[str, float]:
    """The rate budget's pace and shares (%), means over the steady repeats that have one (nan: none has)."""
    have = [r.rate_budget for r in steady if r.rate_budget is not None]
    return {"budget_pace_ms": _mean([b.pace_ms for b in have]), "budget_pace_rate": _mean([b.pace_rate for b in have]),
            **{f"budget_{name}_pct": _mean([100 * b.shares[name] for b in have]) for name in rate_budget.PARTS},
            "budget_stalls_per_request": _mean([b.stalls_per_request for b in have]),
            "budget_stall_ms": _mean([b.stall_ms for b in have]),
            "prefill_requests_each": _mean([r.prefills[0] for r in steady if r.rate_budget is not None]),
            "prefills_per_s": _mean([r.prefills[1] for r in steady if r.rate_budget is not None])}


def _token_fields(steady: list[RepeatWindow]) -> dict[str, float]:
    """Mean prompt and output tokens of a successful request over the steady windows (what a decode step's KV reads
    scale with, llmhost.report.decode_bound)."""
    return {"prompt_tokens_mean": _mean([r.tokens[0] for r in steady]),
            "output_tokens_mean": _mean([r.tokens[1] for r in steady]),
            "cached_tokens_mean": _mean([r.tokens[2] for r in steady]),
            "running_reqs_mean": _mean([r.running for r in steady])}


def _wave_fields(g: Group, steady: list[RepeatWindow], slo: stats.Slo) -> dict[str, Any]:
    """How the steady windows' requests were sent: mean requests per wave, the wave a request was sent in and the
    wave period over the repeats, whether every steady repeat ran in lockstep waves (llmhost.report.waves), and of
    the steady first tokens over the TTFT SLO, how many were sent in a wave of a quarter of c."""
    sized = [r for r in steady if r.steady_wave_sizes.size == r.steady_sent[1].size]
    late = [(r.steady_sent[1] > slo.ttft_ms) & r.steady_sent[0] for r in sized]
    slow_n, slow_in_waves = waves.late_in_waves(np.concatenate([r.steady_wave_sizes for r in sized] or [[]]),
                                                np.concatenate(late or [[]]).astype(bool), g.concurrency)
    return {"wave_size": _mean([r.arrivals.mean_size for r in steady]),
            "wave_seen_size": _mean([r.arrivals.seen_size for r in steady]),
            "wave_period_s": _mean([r.arrivals.period_s for r in steady]),
            "in_waves": bool(steady) and all(r.arrivals.in_lockstep(g.concurrency) for r in steady),
            "slow_ttft_n": slow_n, "slow_ttft_in_waves_n": slow_in_waves}


def _phase_p50(reps: list[RepeatWindow], phase: str) -> tuple[float, int]:
    pooled = np.concatenate([r.ttft_ms[phase] for r in reps]) if reps else np.array([])
    return stats.percentile(pooled, 50), int(pooled.size)


def _ci_fields(prefix: str, ci: stats.Interval) -> dict[str, Any]:
    return {prefix: ci.value, f"{prefix}_lo": ci.lo, f"{prefix}_hi": ci.hi}


def steady_row(g: Group, reps: list[RepeatWindow], slo: stats.Slo, seed: int = 0) -> dict[str, Any]:
    """One point: steady-window statistics over its steady repeats, transients beside them, per-repeat values."""
    steady = [r for r in reps if r.is_steady]
    ttft = [r.ttft_ms["steady"] for r in steady]
    p50, p99, p999 = (repeats.percentile_ci(ttft, pct, seed=seed) for pct in (50, 99, 99.9))
    thr = repeats.across_repeats({r.repeat: r.window.output_throughput for r in steady})
    hits = np.concatenate([r.prefix.hit_ttft_ms for r in steady]) if steady else np.array([])
    misses = np.concatenate([r.prefix.miss_ttft_ms for r in steady]) if steady else np.array([])
    (warm_p50, warm_n), (drain_p50, drain_n) = _phase_p50(reps, "warmup"), _phase_p50(reps, "drain")
    share = repeats.goodput_ci({r.repeat: r.good_sent(slo) for r in steady})
    good = stats.Interval(100 * share.value, 100 * share.lo, 100 * share.hi, share.n)
    good_rps = repeats.across_repeats({r.repeat: goodput_rps(r, slo) for r in steady})
    return {
        "arm": g.arm, "workload": g.workload, "pattern": g.pattern, "concurrency": g.concurrency,
        "request_rate": g.request_rate, "num_prompts": g.num_prompts,
        "load": load_label(g.pattern, g.concurrency, g.request_rate, g.num_prompts),
        "repeats": len(reps), "repeats_steady": len(steady),
        "window_s": _mean([r.window.duration_s for r in steady]),
        **_ci_fields("steady_output_throughput", thr),
        "steady_ttft_n": int(sum(x.size for x in ttft)),
        **_ci_fields("steady_ttft_p50_ms", p50), **_ci_fields("steady_ttft_p99_ms", p99),
        "steady_ttft_p99_slo": repeats.slo_verdict(p99, slo.ttft_ms, is_higher_better=False),
        "steady_ttft_p99_sufficient": stats.is_sufficient(int(sum(x.size for x in ttft)), 99.0),
        **_ci_fields("steady_ttft_p999_ms", p999),
        "steady_ttft_p999_sufficient": stats.is_sufficient(int(sum(x.size for x in ttft)), 99.9),
        **_ci_fields("steady_goodput_pct", good), **_ci_fields("steady_goodput_rps", good_rps),
        "steady_slo": repeats.slo_verdict(good, slo.pct, is_higher_better=True),
        "warmup_ttft_p50_ms": warm_p50, "warmup_n": warm_n, "drain_ttft_p50_ms": drain_p50, "drain_n": drain_n,
        **_measuring_side_fields(steady), **_wave_fields(g, steady, slo), **_token_fields(steady),
        **_budget_fields(steady),
        "hit_ttft_p50_ms": stats.percentile(hits, 50), "hit_n": int(hits.size),
        "miss_ttft_p50_ms": stats.percentile(misses, 50), "miss_n": int(misses.size),
        "per_repeat": [{"repeat": r.repeat, "is_steady": r.is_steady,
                        "output_throughput": r.window.output_throughput,
                        "steady_ttft_p50_ms": stats.percentile(r.ttft_ms["steady"], 50),
                        "warmup_ttft_p50_ms": stats.percentile(r.ttft_ms["warmup"], 50)} for r in reps],
    }


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def steady_rows(groups: list[Group], windows: dict[tuple, list[RepeatWindow]], slo: stats.Slo,
                seed: int = 0) -> list[dict[str, Any]]:
    return [steady_row(g, windows[g.key], slo, seed) for g in groups if windows.get(g.key)]


def not_steady_rows(groups: list[Group], windows: dict[tuple, list[RepeatWindow]]) -> list[dict[str, Any]]:
    """Every repeat that failed its steadiness check, with the reasons (transient patterns are not meant to be
    steady: their requests are all warm-up, shown as such in the steady rows)."""
    return [{"point_id": r.point.point_id, "arm": g.arm, "workload": g.workload, "pattern": g.pattern,
             "load": load_label(g.pattern, g.concurrency, g.request_rate, g.num_prompts), "repeat": r.repeat,
             "requests": len(r.window.phase), "warmup_n": r.window.count("warmup"), "drain_n": r.window.count("drain"),
             "reasons": "; ".join(r.steadiness.reasons)}
            for g in groups for r in windows.get(g.key, [])
            if not r.is_steady and g.pattern not in window.TRANSIENT_PATTERNS]


def goodput_rps(r: RepeatWindow, slo: stats.Slo) -> float:
    """Requests per second that met the SLO (window.Window.goodput_rps: the steady requests' share times the rate)."""
    return r.window.goodput_rps(*r.good_sent(slo))


def decode_share_pct(r: RepeatWindow, _: stats.Slo) -> float:
    """How much of a closed loop's slot time went to decoding at the streams' pace (rate_budget), %; nan without."""
    return 100 * r.rate_budget.shares["decode"] if r.rate_budget is not None else math.nan


# Paired metrics: per steady repeat (and the SLO) -> one number; is a higher value better?
PAIRED: dict[str, tuple[str, bool, Callable[[RepeatWindow, stats.Slo], float]]] = {
    "output_throughput": ("Window output tok/s", True, lambda r, _: r.window.output_throughput),
    "ttft_p50": ("Steady TTFT p50", False, lambda r, _: stats.percentile(r.ttft_ms["steady"], 50)),
    "ttft_p99": ("Steady TTFT p99", False, lambda r, _: stats.percentile(r.ttft_ms["steady"], 99)),
    "goodput": ("Steady goodput req/s", True, goodput_rps),
    "decode_share": ("Decoding at the pace", True, decode_share_pct),
}


def paired_row(base: list[RepeatWindow], arm: list[RepeatWindow], slo: stats.Slo) -> dict[str, Any]:
    """Each PAIRED metric of `arm` minus `base`, paired by repeat index over repeats steady on both sides."""
    row: dict[str, Any] = {}
    for name, (_, higher_better, fn) in PAIRED.items():
        a = {r.repeat: v for r in base if r.is_steady and math.isfinite(v := fn(r, slo))}
        b = {r.repeat: v for r in arm if r.is_steady and math.isfinite(v := fn(r, slo))}
        d = repeats.paired_diff(a, b)
        row.update({f"{name}_delta_pct": d.rel_pct, f"{name}_lo_pct": d.rel_lo, f"{name}_hi_pct": d.rel_hi,
                    f"{name}_pairs": len(set(a) & set(b)), f"{name}_verdict": repeats.verdict(d, higher_better)})
    return row


def paired_rows(run: Run, groups: list[Group], windows: dict[tuple, list[RepeatWindow]],
                slo: stats.Slo) -> list[dict[str, Any]]:
    """Each non-baseline arm against the baseline at every point both ran (same workload, pattern, load)."""
    base = next((a.name for a in run.arms if a.is_baseline), run.arms[0].name if run.arms else None)
    by_key = {g.key[1:]: g for g in groups if g.arm == base}
    rows = []
    for g in groups:
        other = by_key.get(g.key[1:])
        if g.arm == base or other is None or not windows.get(g.key) or not windows.get(other.key):
            continue
        rows.append({"arm": g.arm, "baseline": base, "workload": g.workload, "pattern": g.pattern,
                     "load": load_label(g.pattern, g.concurrency, g.request_rate, g.num_prompts),
                     **paired_row(windows[other.key], windows[g.key], slo)})
    return rows
