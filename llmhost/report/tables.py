"""Pure table builders over a loaded run: point groups, the per-point summary, arm-vs-baseline and run-vs-run deltas,
tool-call quality and the methods listing. Rows are plain dicts (they become summary.csv / summary.json as they are).

A *group* is one benchmark point across its repeats (same arm, workload, pattern, concurrency, rate, prompt count);
latencies pool the requests of all its successful repeats, throughput is the mean over repeats (CI over repeats).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from llmhost import stats
from llmhost.bench.records import PATTERNS, PointRecord, ToolCallCase, ToolCallSkipped
from llmhost.report.load import Requests, Run

PCTS = (50.0, 99.0, 99.9)


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    arm: str
    workload: str
    pattern: str
    concurrency: int | None
    request_rate: float | None
    num_prompts: int
    points: tuple[PointRecord, ...]
    requests: Requests

    @property
    def key(self) -> tuple:
        return (self.arm, self.workload, self.pattern, self.concurrency, self.request_rate, self.num_prompts)

    @property
    def load(self) -> float | None:
        return self.points[0].load

    @property
    def ok_points(self) -> tuple[PointRecord, ...]:
        return tuple(p for p in self.points if p.status == "ok")

    @property
    def throughputs(self) -> list[float]:
        """Output tokens/s of each successful repeat."""
        return [p.summary.output_throughput for p in self.ok_points if p.summary is not None]


def load_label(pattern: str, concurrency: int | None, request_rate: float | None, num_prompts: int) -> str:
    """Human label of a load: 'c=16', '8 req/s', 'all 1000 at once'."""
    if pattern == "qps":
        return "all at once" if request_rate is None else f"{request_rate:g} req/s"
    if concurrency is None:
        return f"all {num_prompts} at once"
    return f"c={concurrency}"


def group_label(g: Group) -> str:
    return f"{g.workload} · {g.pattern} · {load_label(g.pattern, g.concurrency, g.request_rate, g.num_prompts)}"


def build_groups(run: Run) -> list[Group]:
    """Points grouped across repeats, ordered by manifest arm order, workload order, pattern, load."""
    buckets: dict[tuple, list[PointRecord]] = {}
    for point in run.points:
        buckets.setdefault(point.group_key, []).append(point)
    arm_rank = {a.name: i for i, a in enumerate(run.arms)}
    wl_rank = {w.name: i for i, w in enumerate(run.workloads)}

    def order(key: tuple) -> tuple:
        arm, wl, pattern, conc, rate, n = key
        load = rate if pattern == "qps" else conc
        return (arm_rank.get(arm, 99), wl_rank.get(wl, 99), PATTERNS.index(pattern) if pattern in PATTERNS else 99,
                math.inf if load is None else load, n)

    groups = []
    for key in sorted(buckets, key=order):
        pts = tuple(sorted(buckets[key], key=lambda p: p.repeat))
        reqs = Requests.concat([run.requests[p.point_id] for p in pts if p.point_id in run.requests])
        groups.append(Group(*key, points=pts, requests=reqs))
    return groups


@dataclasses.dataclass(frozen=True, slots=True)
class Metric:
    """A comparable per-group metric: which samples, which statistic, and which direction is better."""

    label: str
    unit: str
    is_higher_better: bool
    stat: stats.Stat
    samples: Callable[[Group, stats.Slo], np.ndarray]
    per_repeat: bool = False  # one value per repeat (few): Student-t/Welch instead of the bootstrap


def _ok_ttft(g: Group, slo: stats.Slo) -> np.ndarray:
    return g.requests.ttft_ms[g.requests.ok]


def _ok_tpot(g: Group, slo: stats.Slo) -> np.ndarray:
    return g.requests.itl_mean_ms[g.requests.ok]


def _good_pct(g: Group, slo: stats.Slo) -> np.ndarray:
    r = g.requests
    return 100.0 * stats.good_mask(r.ok, r.ttft_ms, r.itl_mean_ms, slo).astype(float)


METRICS: dict[str, Metric] = {
    "output_throughput": Metric("Output tok/s", "tok/s", True, "mean", lambda g, s: np.array(g.throughputs),
                                per_repeat=True),
    "ttft_p50": Metric("TTFT p50", "ms", False, 50.0, _ok_ttft),
    "ttft_p99": Metric("TTFT p99", "ms", False, 99.0, _ok_ttft),
    "tpot_p50": Metric("TPOT p50", "ms", False, 50.0, _ok_tpot),
    "goodput": Metric("Goodput", "%", True, "mean", _good_pct),
}


def _ci_fields(prefix: str, p: stats.Percentile) -> dict[str, Any]:
    return {f"{prefix}_ms": p.value, f"{prefix}_lo_ms": p.lo, f"{prefix}_hi_ms": p.hi,
            f"{prefix}_sufficient": p.is_sufficient}


def summary_row(g: Group, slo: stats.Slo, seed: int = 0) -> dict[str, Any]:
    """Headline numbers of one group with CIs (the rows of summary.csv / summary.json)."""
    r = g.requests
    ttft = stats.percentile_summary(r.ttft_ms[r.ok], PCTS, seed=seed)
    tpot = stats.percentile_summary(r.itl_mean_ms[r.ok], PCTS[:2], seed=seed)
    thr = stats.mean_ci_over_repeats(g.throughputs)
    good_share = stats.wilson_ci(int(stats.good_mask(r.ok, r.ttft_ms, r.itl_mean_ms, slo).sum()), r.n)
    good = stats.Interval(100 * good_share.value, 100 * good_share.lo, 100 * good_share.hi, good_share.n)
    summ = [p.summary for p in g.ok_points if p.summary is not None]
    row: dict[str, Any] = {
        "arm": g.arm, "workload": g.workload, "pattern": g.pattern, "concurrency": g.concurrency,
        "request_rate": g.request_rate, "num_prompts": g.num_prompts,
        "load": load_label(g.pattern, g.concurrency, g.request_rate, g.num_prompts),
        "repeats": len(g.points), "points_ok": len(g.ok_points), "points_failed": len(g.points) - len(g.ok_points),
        "point_errors": "; ".join(sorted({p.error or "failed" for p in g.points if p.status != "ok"})),
        "requests": r.n, "failed_requests": int((~r.ok).sum()),
        "output_throughput": thr.value, "output_throughput_lo": thr.lo, "output_throughput_hi": thr.hi,
        "request_throughput": _mean([s.request_throughput for s in summ]),
        "offered_rate": g.request_rate, "achieved_rate": _mean([s.achieved_rate for s in summ]),
        "client_bound": any(s.client_bound for s in summ),
        "ttft_n": ttft[50.0].n, **_ci_fields("ttft_p50", ttft[50.0]), **_ci_fields("ttft_p99", ttft[99.0]),
        **_ci_fields("ttft_p999", ttft[99.9]),
        "tpot_n": tpot[50.0].n, **_ci_fields("tpot_p50", tpot[50.0]), **_ci_fields("tpot_p99", tpot[99.0]),
        "itl_n": int(r.itl_all_ms.size), "itl_p50_ms": stats.percentile(r.itl_all_ms, 50),
        "itl_p99_ms": stats.percentile(r.itl_all_ms, 99), "itl_p999_ms": stats.percentile(r.itl_all_ms, 99.9),
        "itl_p999_sufficient": stats.is_sufficient(int(r.itl_all_ms.size), 99.9),
        "e2e_p50_ms": stats.percentile(r.e2e_ms[r.ok], 50),
        "goodput_pct": good.value, "goodput_lo_pct": good.lo, "goodput_hi_pct": good.hi,
        "meets_slo": stats.meets_slo(good.value / 100.0 if r.n else math.nan, slo),
        "slo_decided": stats.slo_decided(good_share, slo),
        "ttft_first_wave_p50_ms": _first_wave_ttft_p50(g),
    }
    return row


def _first_wave_ttft_p50(g: Group) -> float:
    """TTFT p50 of the first `concurrency` requests sent (by start time; of the first repeat when repeats are
    pooled): after a flush these find the prefix cache empty, later ones hit what the first wave filled."""
    r = g.requests
    order = np.argsort(r.start_s, kind="stable")[: max(1, int(g.concurrency or r.n))]
    first = order[r.ok[order]]
    return stats.percentile(r.ttft_ms[first], 50) if first.size else math.nan


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summary_rows(groups: list[Group], slo: stats.Slo, seed: int = 0) -> list[dict[str, Any]]:
    return [summary_row(g, slo, seed) for g in groups]


def diff_row(a: Group, b: Group, slo: stats.Slo, seed: int = 0) -> dict[str, Any]:
    """How group b differs from group a on every METRICS entry (delta %, CI, verdict)."""
    row: dict[str, Any] = {"workload": b.workload, "pattern": b.pattern, "concurrency": b.concurrency,
                           "request_rate": b.request_rate, "num_prompts": b.num_prompts,
                           "load": load_label(b.pattern, b.concurrency, b.request_rate, b.num_prompts)}
    by_samples: dict[Callable, list[str]] = {}
    for name, m in METRICS.items():  # metrics over the same samples share one set of resamples
        by_samples.setdefault(m.samples, []).append(name)
    for fn, names in by_samples.items():
        xa, xb = fn(a, slo), fn(b, slo)
        if METRICS[names[0]].per_repeat:
            diffs = [stats.welch_diff(xa, xb) for _ in names]
        else:
            diffs = stats.bootstrap_diffs(xa, xb, [METRICS[n].stat for n in names], seed=seed)
        for name, d in zip(names, diffs):
            row.update(_diff_fields(name, METRICS[name], d, xa, xb))
    return row


def _diff_fields(name: str, m: Metric, d: stats.Difference, xa: np.ndarray, xb: np.ndarray) -> dict[str, Any]:
    """The change and its CI: relative (%) for rates and latencies; for a share in % (goodput) the absolute change
    in percentage points ('_unit' says which), since a relative change is undefined from 0% and hides 0 -> 12.5."""
    better = (d.delta > 0) == m.is_higher_better
    no_ci = math.isnan(d.lo) or math.isnan(d.hi)
    verdict = "no data" if math.isnan(d.delta) else (
        "no CI" if no_ci else "within noise" if d.lo <= 0.0 <= d.hi else "better" if better else "worse")
    points = m.unit == "%"
    return {f"{name}_a": stats.statistic(xa, m.stat), f"{name}_b": stats.statistic(xb, m.stat),
            f"{name}_delta_pct": d.delta if points else d.rel_pct, f"{name}_lo_pct": d.lo if points else d.rel_lo,
            f"{name}_hi_pct": d.hi if points else d.rel_hi, f"{name}_unit": "pp" if points else "%",
            f"{name}_verdict": verdict}


def baseline_rows(run: Run, groups: list[Group], slo: stats.Slo, seed: int = 0) -> list[dict[str, Any]]:
    """Each non-baseline arm against the baseline arm at every matching point (same workload, pattern, load)."""
    base = next((a.name for a in run.arms if a.is_baseline), run.arms[0].name if run.arms else None)
    by_key = {g.key[1:]: g for g in groups if g.arm == base}
    rows = []
    for g in groups:
        if g.arm == base or g.key[1:] not in by_key:
            continue
        rows.append({"arm": g.arm, "baseline": base, **diff_row(by_key[g.key[1:]], g, slo, seed)})
    return rows


def match_key(g: Group) -> tuple:
    """What --compare matches on: arm, workload, pattern and load. The prompt count only sets the sample size, so
    a --quick run still matches a full one — except when everything is sent at once, where it is the load."""
    all_at_once = g.concurrency is None and g.request_rate is None
    return (g.arm, g.workload, g.pattern, g.concurrency, g.request_rate, g.num_prompts if all_at_once else None)


def compare_rows(current: list[Group], other: list[Group], slo: stats.Slo, seed: int = 0) -> list[dict[str, Any]]:
    """Run-vs-run regression view: every group present in both runs, current relative to other."""
    old = {match_key(g): g for g in other}
    return [{"arm": g.arm, **diff_row(old[match_key(g)], g, slo, seed)} for g in current if match_key(g) in old]


def toolcall_rows(run: Run) -> list[dict[str, Any]]:
    """Tool-call quality per arm (manifest order), or the reason the check was skipped."""
    rows = []
    for arm in run.arms:
        lines = [t for t in run.toolcalls if t.arm == arm.name]
        skipped = next((t.skipped for t in lines if isinstance(t, ToolCallSkipped)), None)
        cases = [t for t in lines if isinstance(t, ToolCallCase)]
        if skipped or not cases:
            rows.append({"arm": arm.name, "cases": 0, "skipped": skipped or "no tool-call cases recorded"})
            continue
        expect_tool = [c for c in cases if c.expected_tool]
        no_tool = [c for c in cases if not c.expected_tool]
        rows.append({
            "arm": arm.name, "cases": len(cases), "skipped": "",
            "ok_pct": 100.0 * sum(c.ok for c in cases) / len(cases),
            "right_tool_pct": _pct(sum(c.called_tool == c.expected_tool for c in expect_tool),
                                   len(expect_tool)),
            "args_ok_pct": _pct(sum(c.args_ok for c in expect_tool), len(expect_tool)),
            # answered without a tool call; a request that failed (HTTP error, timeout) answered nothing
            "no_tool_respected_pct": _pct(sum(not c.called_tool and not c.error for c in no_tool),
                                          len(no_tool)),
            "latency_p50_ms": stats.percentile([c.latency_ms for c in cases], 50),
        })
    return rows


def _pct(num: int, den: int) -> float:
    return 100.0 * num / den if den else math.nan


def methods_rows(run: Run) -> list[dict[str, Any]]:
    """Per arm: the exact launch command (as recorded, already redacted), readiness time and server facts."""
    rows = []
    for arm in run.arms:
        server = run.servers.get(arm.name)
        info = server.server_info if server else {}
        rows.append({"arm": arm.name, "label": arm.label, "flags": " ".join(arm.flags) or "(none)",
                     "launch_command": (server and server.launch_command) or
                     "(not recorded: servers/<arm>.json missing)",
                     "ready_s": server.ready_s if server else None,
                     "attention_backend": info.get("attention_backend"),
                     "decode": server.decode if server else "",
                     "server_version": info.get("version")})
    return rows
