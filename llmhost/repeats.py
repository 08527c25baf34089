"""Statistics whose unit of evidence is a repeat: CIs across repeats, paired arm differences, percentile CIs that
respect the time correlation of requests, verdicts and SLO calls. Pure (numpy), like llmhost.stats which it builds on.

Why repeats, not requests: requests of one run share server state and arrive in lockstep waves, so n requests carry
far less than n independent draws; pooling the requests of all repeats and bootstrapping them as independent called
11-69% of equal arms different (simulated). Here:

* A point's metric (throughput, a window's TTFT p50, ...) is computed per repeat, then averaged across repeats with
  a Student-t 95% CI: mean ± t(0.975, R-1) s / sqrt(R) (stats.mean_ci_over_repeats).
* Arms are compared *paired*: repeat r of every arm ran with the same seed (base seed + r), so the same prompts and
  arrival times; d_r = metric_b,r - metric_a,r, CI mean(d) ± t(0.975, R-1) sd(d) / sqrt(R). The workload's
  run-to-run variation cancels in d_r, which Welch's unpaired test would count as noise. Relative change and CI are
  that CI over mean(a), as in stats.welch_diff.
* A percentile of a point pools its repeats' steady windows. Its CI resamples repeats and, inside a repeat,
  contiguous time blocks, never single requests:
  - between repeats: B resamples of R repeats drawn with replacement, the pooled percentile of each; its standard
    deviation times sqrt(R / (R - 1)) (the bootstrap's variance across R clusters is (R - 1)/R of the unbiased one)
    is the between-repeat standard error;
  - within repeats: each repeat's window cut into BLOCKS contiguous time blocks, blocks drawn with replacement,
    repeats kept: the standard error from the noise inside the runs, wave correlation included;
  - CI = pooled percentile ± max(t(0.975, R-1) × between-repeat error, 1.96 × within-run error). The between-repeat
    error already holds the within-run noise, so the two are not added (adding them covered the truth 97-100% of
    the time, simulated); the within-run half-width is a floor for the few repeats that agree by chance. A plain
    percentile interval of the two-stage bootstrap covered only 82-89% with a run-level effect and 3-5 repeats.
    This rule, simulated with lockstep waves and a run-level effect (300 trials each): p50 and p99, 2 repeats
    95-99%, 3 repeats 95-97%, 5 repeats 93-96% — except p99 from 5 × 192 samples with a run effect, 90% (below the
    1,000 samples stats.needed_samples asks of a p99). tests/unit/test_paired.py keeps 3 repeats in 93-97%.
    With one repeat there is no between-run spread to measure: the CI is the within-run one with z = 1.96 (`n` = 1).
* A goodput share (good / sent of a window) is a per-repeat value too: mean and Student-t CI across repeats, widened
  to hold the Wilson interval of the pooled counts, because repeats that were all 100% good have no spread and a
  t interval of [100, 100] would claim what 3 × 16 requests cannot show (Wilson: >= 92.6%).
* A verdict "better"/"worse" only when the difference's CI excludes 0; an SLO is "met" only when the CI's
  conservative bound meets it (the lower bound of a higher-is-better metric, the upper bound of a latency),
  "missed" when the other bound misses it, else "undecided".
"""
from __future__ import annotations

import math
from typing import Literal, Mapping, Sequence

import numpy as np

from llmhost import stats

Verdict = Literal["better", "worse", "within noise", "no CI", "no data"]
SloVerdict = Literal["met", "missed", "undecided", "no data"]
BLOCKS = 8  # contiguous time blocks per repeat: with waves of c requests, blocks of >= a few waves each
N_BOOT = 400
Z975 = 1.959964


def across_repeats(values: Mapping[int, float] | Sequence[float]) -> stats.Interval:
    """Mean of per-repeat values with the Student-t 95% CI (no CI for one repeat)."""
    return stats.mean_ci_over_repeats(list(values.values()) if isinstance(values, Mapping) else list(values))


def half_width_pct(ci: stats.Interval) -> float:
    """Half the CI's width as % of its value (the adaptive-repeat target: throughput within ±3%); nan without one."""
    if not ci.has_ci or not ci.value:
        return math.nan
    return 100.0 * (ci.hi - ci.lo) / 2.0 / abs(ci.value)


def paired_diff(a: Mapping[int, float], b: Mapping[int, float]) -> stats.Difference:
    """b - a over the repeat indices both arms have a finite value for, with the paired-t 95% CI."""
    common = sorted(r for r in set(a) & set(b) if math.isfinite(a[r]) and math.isfinite(b[r]))
    if not common:
        return stats.Difference(*([math.nan] * 6))
    xa = np.array([a[r] for r in common])
    d = np.array([b[r] for r in common]) - xa
    delta, base = float(d.mean()), float(xa.mean())
    rel = 100.0 * delta / base if base else math.nan
    if d.size < 2:
        return stats.Difference(delta, math.nan, math.nan, rel, math.nan, math.nan)
    half = stats.t975(d.size - 1) * float(d.std(ddof=1)) / math.sqrt(d.size)
    lo, hi = delta - half, delta + half
    rlo, rhi = (100.0 * lo / base, 100.0 * hi / base) if base else (math.nan, math.nan)
    return stats.Difference(delta, lo, hi, rel, rlo, rhi)


def verdict(d: stats.Difference, is_higher_better: bool) -> Verdict:
    """better/worse only when the CI of the difference excludes 0 — read on the absolute difference, which has a CI
    even where the baseline is 0 and the relative one has none."""
    if math.isnan(d.delta):
        return "no data"
    if math.isnan(d.lo) or math.isnan(d.hi):
        return "no CI"
    if d.lo <= 0.0 <= d.hi:
        return "within noise"
    return "better" if (d.delta > 0) == is_higher_better else "worse"


def slo_verdict(ci: stats.Interval, limit: float, is_higher_better: bool) -> SloVerdict:
    """'met' only when the CI's conservative bound meets `limit` (goodput: lower bound >= limit; a latency: upper
    bound <= limit), 'missed' when its optimistic bound misses it, else 'undecided'. No CI: 'no data'."""
    if not ci.has_ci:
        return "no data"
    worst, best = (ci.lo, ci.hi) if is_higher_better else (-ci.hi, -ci.lo)
    target = limit if is_higher_better else -limit
    if worst >= target - 1e-9:
        return "met"
    return "missed" if best < target - 1e-9 else "undecided"


def resample_blocks(values: np.ndarray, n_blocks: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """n_boot resamples of `values` (in time order) made of contiguous blocks drawn with replacement:
    (n_boot, k * block length). Blocks have equal length (the remainder at the end is dropped from the draw)."""
    k = max(1, min(n_blocks, values.size))
    size = values.size // k
    picks = rng.integers(0, k, size=(n_boot, k))
    idx = (picks[:, :, None] * size + np.arange(size)[None, None, :]).reshape(n_boot, -1)
    return values[idx]


def pooled_percentiles(reps: Sequence[np.ndarray], counts: np.ndarray, pct: float) -> np.ndarray:
    """For each row of `counts` (copies of each repeat in one resample), the pct-th percentile of the pool those
    copies make — what np.percentile of the concatenation gives, read off the sorted pool's cumulative counts
    instead of building every pool."""
    pool = np.concatenate(reps)
    owner = np.repeat(np.arange(len(reps)), [x.size for x in reps])
    order = np.argsort(pool, kind="stable")
    pool, owner = pool[order], owner[order]
    cum = np.cumsum(counts[:, owner], axis=1)  # (resamples, N): copies of pool[:i + 1] in each resample
    pos = pct / 100.0 * (cum[:, -1] - 1)  # 0-based linear-interpolation rank in the resampled pool

    def at(rank: np.ndarray) -> np.ndarray:  # the value of that rank: the first sorted value with more copies
        return pool[np.minimum((cum <= rank[:, None]).sum(axis=1), pool.size - 1)]
    lower = np.floor(pos)
    return at(lower) + (pos - lower) * (at(lower + 1) - at(lower))


def _between_se(reps: list[np.ndarray], pct: float, n_boot: int, rng: np.random.Generator) -> float:
    """Standard error of the pooled percentile from resampling whole repeats (see the module docstring)."""
    r = len(reps)
    counts = (rng.integers(0, r, size=(n_boot, r))[:, :, None] == np.arange(r)).sum(axis=1)  # copies per repeat
    return float(pooled_percentiles(reps, counts, pct).std()) * math.sqrt(r / (r - 1))


def _within_se(reps: list[np.ndarray], pct: float, n_boot: int, rng: np.random.Generator) -> float:
    pooled = np.concatenate([resample_blocks(x, BLOCKS, n_boot, rng) for x in reps if x.size], axis=1)
    return float(np.percentile(pooled, pct, axis=1).std())


def percentile_ci(repeats: Sequence[np.ndarray], pct: float, *, n_boot: int = N_BOOT, seed: int = 0) -> stats.Interval:
    """The pct-th percentile of the pooled repeats (each in time order) with the 95% CI of the module docstring;
    `n` of the result is the number of repeats with data."""
    reps = [stats.clean(x) for x in repeats]
    reps = [x for x in reps if x.size]
    if not reps:
        return stats.Interval(math.nan, math.nan, math.nan, 0)
    pool = np.concatenate(reps)
    value = float(np.percentile(pool, pct))
    floor = 0.0 if pool.min() >= 0 else -math.inf  # a latency's CI stops at 0 (t intervals of few repeats do not)
    if sum(x.size for x in reps) < 2:
        return stats.Interval(value, math.nan, math.nan, len(reps))
    rng = np.random.default_rng(seed)
    within = _within_se(reps, pct, n_boot, rng)
    if len(reps) == 1:
        return stats.Interval(value, max(floor, value - Z975 * within), value + Z975 * within, 1)
    half = max(stats.t975(len(reps) - 1) * _between_se(reps, pct, n_boot, rng), Z975 * within)
    return stats.Interval(value, max(floor, value - half), value + half, len(reps))


def goodput_ci(counts: Mapping[int, tuple[int, int]]) -> stats.Interval:
    """Share good (0..1) of (good, sent) per repeat: mean over repeats with sent > 0, its Student-t CI widened to
    the Wilson interval of the pooled counts (see the module docstring); `n` is the number of repeats."""
    used = {r: (g, n) for r, (g, n) in counts.items() if n > 0}
    if not used:
        return stats.Interval(math.nan, math.nan, math.nan, 0)
    t = stats.mean_ci_over_repeats([g / n for g, n in used.values()])
    wilson = stats.wilson_ci(sum(g for g, _ in used.values()), sum(n for _, n in used.values()))
    if not t.has_ci:
        return stats.Interval(t.value, wilson.lo, wilson.hi, t.n)
    return stats.Interval(t.value, max(0.0, min(t.lo, wilson.lo)), min(1.0, max(t.hi, wilson.hi)), t.n)
