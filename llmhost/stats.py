"""Pure statistics for benchmark results: percentiles, bootstrap CIs, goodput, SLO capacity search, comparisons.

Definitions (the dashboard and its tests rely on exactly these):

* Percentile: linear interpolation between the closest ranks (numpy's default "linear", Hyndman & Fan type 7) —
  the definition SGLang's bench_serving uses for its own p99 lines, so our numbers agree with its logs.
* Sample sufficiency: a p-th percentile is trusted only when at least MIN_TAIL_SAMPLES samples are expected beyond
  it, i.e. n * (1 - p/100) >= MIN_TAIL_SAMPLES. With 10: p50 needs 20, p99 needs 1,000, p99.9 needs 10,000
  samples (run_bench.py flags low support with the same rule and sizes its long run to 10,000 requests). With
  fewer, the estimate is one of the few largest samples and its bootstrap CI collapses onto them.
* Bootstrap CI: percentile bootstrap, B resamples drawn with a seeded numpy Generator (same seed -> same CI),
  vectorised over resamples in chunks so memory stays ~16 MB whatever n is.
* Difference: statistic(b) - statistic(a) and 100 * (statistic(b) / statistic(a) - 1), with a and b resampled
  independently; "within noise" when the CI of the difference includes 0.
* Per-repeat values (a point's throughput: 1-5 numbers, not thousands of requests): Student-t, not bootstrap. A
  bootstrap over 2 repeats returns [min, max] and covered the truth ~half the time (simulated), calling ~1 in 3
  equal arms "better"/"worse". Mean +- t(0.975, n-1) s / sqrt(n); differences by Welch's t (unequal variances).
* Goodput CI: Wilson score interval of good / sent (a bootstrap of 0/1 values collapses to [100, 100] when every
  request was good; Wilson still says 16 of 16 only shows >= 80.6%). A load's SLO verdict is "decided" when that
  interval lies wholly on one side of slo.pct.
* Goodput: a request is good when it completed (ok), its TTFT <= slo.ttft_ms and its mean inter-token latency
  (TPOT: (e2e - TTFT) / (output tokens - 1), bench_serving's definition; a request with < 2 output tokens has no
  gap and passes) <= slo.itl_ms. The per-request TPOT is used rather than every gap because users perceive streaming speed, and one gap spiking
  while another request's prefill chunk runs would fail nearly every long answer. Goodput share = good / requests
  sent (failed requests count as not good). A load meets the SLO when goodput share >= slo.pct percent.
* Capacity: the highest tested load L such that every tested load <= L meets the SLO. A pass above a failure is not
  trusted (noise); the result says whether capacity was bracketed by a failing load or only bounded below.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

MIN_TAIL_SAMPLES = 10
DEFAULT_BOOT = 1000
DEFAULT_CONF = 0.95
_CHUNK_ELEMENTS = 2_000_000  # resample elements per vectorised chunk (2e6 float64 = 16 MB)

Stat = float | Literal["mean"]  # a percentile in [0, 100], or the mean


@dataclasses.dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objective: per-request TTFT and mean ITL limits, and the share of requests that must meet both."""

    ttft_ms: float
    itl_ms: float
    pct: float


@dataclasses.dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with a confidence interval (lo/hi are nan when there is no CI)."""

    value: float
    lo: float
    hi: float
    n: int

    @property
    def has_ci(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))


@dataclasses.dataclass(frozen=True, slots=True)
class Percentile:
    """One percentile of a sample, with its CI and whether the sample is large enough to trust it."""

    pct: float
    value: float
    lo: float
    hi: float
    n: int
    needed_n: int

    @property
    def is_sufficient(self) -> bool:
        return self.n >= self.needed_n


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """statistic(b) - statistic(a), absolute and relative (%), each with a CI."""

    delta: float
    lo: float
    hi: float
    rel_pct: float
    rel_lo: float
    rel_hi: float

    @property
    def has_ci(self) -> bool:
        return not (math.isnan(self.rel_lo) or math.isnan(self.rel_hi))

    @property
    def is_within_noise(self) -> bool:
        """True when the CI of the difference includes 0 (no CI -> not decidable -> treated as noise)."""
        return not self.has_ci or self.lo <= 0.0 <= self.hi


@dataclasses.dataclass(frozen=True, slots=True)
class Capacity:
    """Highest load within SLO. load None = even the lowest tested load misses the SLO."""

    load: float | None
    first_failing: float | None
    is_bracketed: bool  # a tested load above `load` failed, so capacity lies between the two
    is_monotonic: bool  # False when some load above the first failure passed again (noise or a bimodal server)


def clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Finite float64 values only (None / nan / inf dropped)."""
    arr = np.asarray(values, dtype=float).ravel()  # numpy maps None to nan for float dtype
    return arr[np.isfinite(arr)]


def needed_samples(pct: float, min_tail: int = MIN_TAIL_SAMPLES) -> int:
    """Samples needed for `min_tail` expected samples beyond the pct-th percentile: ceil(min_tail / (1 - pct/100))."""
    if not 0.0 <= pct < 100.0:
        raise ValueError(f"percentile {pct} outside [0, 100)")
    return math.ceil(round(min_tail / (1.0 - pct / 100.0), 6))  # round: 10 / (1 - 0.999) = 10000.0000000009


def is_sufficient(n: int, pct: float, min_tail: int = MIN_TAIL_SAMPLES) -> bool:
    """Whether n samples are enough to report the pct-th percentile (see the module docstring)."""
    return n >= needed_samples(pct, min_tail)


def percentile(values: Sequence[float] | np.ndarray, pct: float) -> float:
    """The pct-th percentile (linear interpolation); nan for an empty sample."""
    arr = clean(values)
    return float(np.percentile(arr, pct)) if arr.size else math.nan


def _statistics(stats_: Sequence[Stat]) -> Callable[[np.ndarray], np.ndarray]:
    """Row-wise statistics over a (resamples, n) matrix -> array (len(stats_), resamples); one partition pass."""
    pct_idx = [i for i, s in enumerate(stats_) if s != "mean"]
    mean_idx = [i for i, s in enumerate(stats_) if s == "mean"]
    qs = [float(stats_[i]) for i in pct_idx]

    def fn(m: np.ndarray) -> np.ndarray:
        out = np.empty((len(stats_), m.shape[0]))
        if pct_idx:
            out[pct_idx] = np.percentile(m, qs, axis=1)
        if mean_idx:
            out[mean_idx] = m.mean(axis=1)
        return out
    return fn


def _points(arr: np.ndarray, stats_: Sequence[Stat]) -> list[float]:
    return [float(v) for v in _statistics(stats_)(arr[None, :])[:, 0]]


def statistic(values: Sequence[float] | np.ndarray, stat: Stat) -> float:
    """The statistic (a percentile or "mean") of the finite values; nan for an empty sample."""
    arr = clean(values)
    return _points(arr, [stat])[0] if arr.size else math.nan


def bootstrap_distribution(values: np.ndarray, stats_: Sequence[Stat], n_boot: int,
                           rng: np.random.Generator) -> np.ndarray:
    """Each statistic over the same n_boot resamples of `values` -> (len(stats_), n_boot), vectorised in chunks."""
    n = values.size
    fn = _statistics(stats_)
    chunk = max(1, _CHUNK_ELEMENTS // max(n, 1))
    out = np.empty((len(stats_), n_boot))
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        out[:, start:start + size] = fn(values[rng.integers(0, n, size=(size, n))])
    return out


def bootstrap_cis(values: Sequence[float] | np.ndarray, stats_: Sequence[Stat], *, n_boot: int = DEFAULT_BOOT,
                  conf: float = DEFAULT_CONF, seed: int = 0) -> list[Interval]:
    """Each statistic of `values` with a percentile-bootstrap CI (shared resamples); no CI below 2 samples."""
    arr = clean(values)
    if arr.size == 0:
        return [Interval(math.nan, math.nan, math.nan, 0) for _ in stats_]
    values_ = _points(arr, stats_)
    if arr.size < 2:
        return [Interval(v, math.nan, math.nan, int(arr.size)) for v in values_]
    dist = bootstrap_distribution(arr, stats_, n_boot, np.random.default_rng(seed))
    alpha = (1.0 - conf) / 2.0
    bounds = np.quantile(dist, [alpha, 1.0 - alpha], axis=1)
    return [Interval(v, float(lo), float(hi), int(arr.size)) for v, lo, hi in zip(values_, *bounds)]


def bootstrap_ci(values: Sequence[float] | np.ndarray, stat: Stat, *, n_boot: int = DEFAULT_BOOT,
                 conf: float = DEFAULT_CONF, seed: int = 0) -> Interval:
    """Statistic of `values` with a percentile-bootstrap CI; no CI (nan) with fewer than 2 samples."""
    return bootstrap_cis(values, [stat], n_boot=n_boot, conf=conf, seed=seed)[0]


def percentile_summary(values: Sequence[float] | np.ndarray, pcts: Sequence[float] = (50.0, 99.0, 99.9), *,
                       n_boot: int = DEFAULT_BOOT, seed: int = 0) -> dict[float, Percentile]:
    """Each requested percentile with its CI, sample count and the count it needs."""
    cis = bootstrap_cis(values, list(pcts), n_boot=n_boot, seed=seed)
    return {p: Percentile(p, ci.value, ci.lo, ci.hi, ci.n, needed_samples(p)) for p, ci in zip(pcts, cis)}


def bootstrap_diffs(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, stats_: Sequence[Stat], *,
                    n_boot: int = DEFAULT_BOOT, conf: float = DEFAULT_CONF, seed: int = 0) -> list[Difference]:
    """How b differs from a in each statistic, with bootstrap CIs; no CI when a side has fewer than 2 samples."""
    xa, xb = clean(a), clean(b)
    if xa.size == 0 or xb.size == 0:
        return [Difference(*([math.nan] * 6)) for _ in stats_]
    va, vb = np.array(_points(xa, stats_)), np.array(_points(xb, stats_))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(va != 0, 100.0 * (vb / va - 1.0), math.nan)
    if xa.size < 2 or xb.size < 2:
        return [Difference(d, math.nan, math.nan, r, math.nan, math.nan) for d, r in zip(vb - va, rel)]
    rng = np.random.default_rng(seed)
    da = bootstrap_distribution(xa, stats_, n_boot, rng)
    db = bootstrap_distribution(xb, stats_, n_boot, rng)
    alpha = (1.0 - conf) / 2.0
    out = []
    for i in range(len(stats_)):
        lo, hi = np.quantile(db[i] - da[i], [alpha, 1.0 - alpha])
        with np.errstate(divide="ignore", invalid="ignore"):
            rels = 100.0 * (db[i] / da[i] - 1.0)
        rels = rels[np.isfinite(rels)]
        rlo, rhi = np.quantile(rels, [alpha, 1.0 - alpha]) if rels.size else (math.nan, math.nan)
        out.append(Difference(float(vb[i] - va[i]), float(lo), float(hi), float(rel[i]), float(rlo), float(rhi)))
    return out


def bootstrap_diff(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, stat: Stat, *,
                   n_boot: int = DEFAULT_BOOT, conf: float = DEFAULT_CONF, seed: int = 0) -> Difference:
    """How b differs from a in `stat` (see bootstrap_diffs)."""
    return bootstrap_diffs(a, b, [stat], n_boot=n_boot, conf=conf, seed=seed)[0]


def good_mask(ok: np.ndarray, ttft_ms: np.ndarray, itl_mean_ms: np.ndarray, slo: Slo) -> np.ndarray:
    """Per request: completed, TTFT within slo.ttft_ms and mean ITL within slo.itl_ms (no ITL gap passes)."""
    ok = np.asarray(ok, bool)
    ttft = np.asarray(ttft_ms, float)
    itl = np.asarray(itl_mean_ms, float)
    with np.errstate(invalid="ignore"):
        ttft_good = np.isfinite(ttft) & (ttft <= slo.ttft_ms)
        itl_good = np.isnan(itl) | (itl <= slo.itl_ms)
    return ok & ttft_good & itl_good


def goodput_share(ok: np.ndarray, ttft_ms: np.ndarray, itl_mean_ms: np.ndarray, slo: Slo) -> float:
    """Share (0..1) of requests sent that were good; nan when no request was sent."""
    mask = good_mask(ok, ttft_ms, itl_mean_ms, slo)
    return float(mask.mean()) if mask.size else math.nan


def meets_slo(share: float, slo: Slo) -> bool:
    """A load meets the SLO when at least slo.pct percent of its requests were good."""
    return not math.isnan(share) and 100.0 * share >= slo.pct - 1e-9


def max_load_within_slo(met_by_load: Mapping[float, bool]) -> Capacity:
    """Highest load such that it and every lower tested load meet the SLO (see the module docstring)."""
    loads = sorted(met_by_load)
    if not loads:
        return Capacity(None, None, False, True)
    best: float | None = None
    first_fail: float | None = None
    for load in loads:
        if not met_by_load[load]:
            first_fail = load
            break
        best = load
    monotonic = first_fail is None or not any(met_by_load[x] for x in loads if x > first_fail)
    return Capacity(best, first_fail, first_fail is not None, monotonic)


# Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..30; beyond, a Cornish-Fisher expansion (error < 1e-3).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: float) -> float:
    """t(0.975, df); a fractional df (Welch) rounds down, which widens the interval slightly (conservative)."""
    k = max(1, int(math.floor(df)))
    if k <= len(_T975):
        return _T975[k - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * k) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * k * k)


def mean_ci_over_repeats(values: Sequence[float]) -> Interval:
    """Mean of per-repeat values (e.g. throughput) with a 95% Student-t CI; no CI for a single repeat."""
    x = clean(values)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = t975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(mean, mean - half, mean + half, int(x.size))


def welch_diff(a: Sequence[float], b: Sequence[float]) -> Difference:
    """mean(b) - mean(a) of per-repeat values with Welch's 95% CI; relative CI = that CI over mean(a).
    No CI when a side has fewer than 2 values."""
    xa, xb = clean(a), clean(b)
    if xa.size == 0 or xb.size == 0:
        return Difference(*([math.nan] * 6))
    ma, mb = float(xa.mean()), float(xb.mean())
    delta = mb - ma
    rel = 100.0 * delta / ma if ma else math.nan
    if xa.size < 2 or xb.size < 2:
        return Difference(delta, math.nan, math.nan, rel, math.nan, math.nan)
    va, vb = float(xa.var(ddof=1)) / xa.size, float(xb.var(ddof=1)) / xb.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (xa.size - 1) + vb ** 2 / (xb.size - 1)) if se > 0 else xa.size + xb.size - 2
    lo, hi = delta - t975(df) * se, delta + t975(df) * se
    rlo, rhi = (100.0 * lo / ma, 100.0 * hi / ma) if ma else (math.nan, math.nan)
    return Difference(delta, lo, hi, rel, rlo, rhi)


def wilson_ci(good: int, n: int, z: float = 1.959964) -> Interval:
    """Share good/n (0..1) with its 95% Wilson score interval; nan without requests."""
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    p = good / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def slo_decided(ci: Interval, slo: Slo) -> bool:
    """True when the goodput interval (shares 0..1) lies wholly above or below slo.pct."""
    return ci.has_ci and (100.0 * ci.lo >= slo.pct - 1e-9 or 100.0 * ci.hi < slo.pct - 1e-9)
