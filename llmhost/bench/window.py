"""Where a point's steady state is: warm-up / steady window / drain, a steadiness check, TTFT by prefix hit/miss.

Pure functions over per-request arrays (start time, end-to-end latency, TTFT, ok, cached tokens), so the runner
can call them as a point finishes and the report can recompute them from the stored requests.

Closed loop (c requests in flight, each completion sends the next request):

* Warm-up ends at t_start = the time of the c-th completion. Until then the server works through the start-up
  burst: c prompts arrived at once and prefill together, and every refill so far was triggered by that lockstep
  wave. After c completions every slot has turned over once on average, so what is in flight was sent at staggered
  times. In a closed loop each completion sends exactly one request, so the warm-up is exactly the first 2c - 1
  requests sent (the first wave c, and the c - 1 refills its first c - 1 completions triggered). It is counted by
  send order, not by time: a client streaming c requests sends a refill some ms after the completion that triggered
  it, so refills of the first wave can be sent after t_start. On the H200 at agent c=128 (lockstep), 60 and 92 of
  the first wave's 128 refills were sent up to 79 ms after the c-th completion; counted by time, they were 87 of the
  window's 89 requests over 500 ms (the start-up burst again) and its steady TTFT p99 was 555 ms instead of 455.
* Drain starts at t_end = the time the last request was sent: after it no completion is replaced, so fewer than c
  requests are in flight and the survivors run faster than under the load being measured.
* The steady window is [t_start, t_end]. A request is steady when it was sent at or after t_start and finished by
  t_end, i.e. it ran its whole life at c in flight. Warm-up requests: sent before t_start, or among the first 2c - 1
  sends. Drain requests: sent in the window but still running at t_end (the c requests in flight when sending
  stopped). The drain group is length-biased (long requests are more likely to be in flight at any instant), so
  steady e2e latency is slightly optimistic; TTFT, decided early in a request's life, is not affected much.
* Window throughput counts what *completed* in the window (requests and output tokens) over its length: in a
  steady state that equals the rate of work done, with no edge effect from requests sent before it. It counts
  completions in (t_start, t_end]: the c-th completion opens the window and a closed loop's last send is itself
  triggered by one, so counting both edges would count one completion per window too many (a lockstep wave of c).

Open loop (Poisson arrivals at rate λ): arrivals do not wait for completions, so there is no wave to wait out,
only a queue to fill. Warm-up ends at t_start = first arrival + the p90 end-to-end latency of the point: in an
infinite-server queue (M/G/∞) the number in flight reaches its stationary distribution once one service time has
passed, and p90 covers most service times without letting one outlier use up the run. The drain starts at the last
arrival, as above. Whether the queue did settle is then checked, not assumed (`check_steady`): the window must be
long enough to say anything (a closed loop's window must see every one of its c slots turn over, >= c completions;
an open loop's at least MIN_OPEN_COMPLETED completions), the TTFT of the window's first and second half must agree
(a median drift both larger than the tolerance and outside its CI fails), and completions must keep up with
arrivals (completed/arrived in the window >= KEEP_UP). A point that fails is flagged "not steady" and stays out of
averages; its numbers are still reported. Without the length rule a closed loop of 2c requests (agent c=128, 256
requests, on the H200) had windows of 4-44 ms between the c-th completion and the last send, one completion each,
and "throughputs" up to 71,000 tok/s that made a paired arm difference of +619%.

The drift CI resamples contiguous blocks of each half, never single requests, and a block is the load's
independent unit. An open loop's halves are the window's two halves in time, each cut into DRIFT_BLOCKS blocks
(percentile interval). A closed loop's unit is a turnover of its c slots, c consecutive sends (turnover k: sends
kc .. kc + c - 1 of the point; in lockstep exactly one wave; for c = 1 one request). Its halves are the first and
second half of the window's whole turnovers; each needs MIN_HALF_TURNOVERS, and with so few blocks the CI is a
t interval on the resampled standard errors (`_turnover_ci`). Why: in lockstep (agent c=64 on the H200) TTFT
inside a wave follows admission order (the first 32 200-300 ms, the last 32 300-1,600 ms) and a wave's level moves
±50% from wave to wave. With one wave per half (the former 4c requests), 8 blocks per half cut that one wave, a CI
blind to the wave-to-wave noise: 2 of 3 flat repeats were called drifted (-51% [-54, -40], +139% [+5, +281]).
Simulated (tests/unit/test_window.py: that lockstep, no drift, 100 seeds), 6 and 2 of 100 are called drifted with 2
and 4 turnovers a half; the former rule called 27 and 21, and 75 at 4c. A doubled TTFT needs turnovers to show
through ±50% wave noise: caught in 11 of 40 seeds with 2 a half, 40 of 40 with 8.

Points that measure a transient by design have no steady state: every request is warm-up. A burst sends every
request at t0; a cold point measures the first requests after a cache flush.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

from llmhost import repeats, stats
from llmhost.bench.records import Point, RequestRecord

Phase = Literal["warmup", "steady", "drain"]
PHASES: tuple[Phase, ...] = ("warmup", "steady", "drain")
TTFT_DRIFT_TOL = 0.20  # a window half's TTFT p50 may differ from the other's by 20% before it counts as drift
KEEP_UP = 0.90  # completions in the window must be >= 90% of its arrivals (a growing queue fails)
POISSON_WARMUP_PCT = 90.0  # warm-up of an open loop: the p90 end-to-end latency
TRANSIENT_PATTERNS = ("burst", "cold")  # measured for their transient: never "not steady", never averaged
HIT_FRACTION = 0.5  # a prefix hit skipped at least half of the prompt's prefill
DRIFT_BLOCKS = 8  # contiguous time blocks per window half of an open loop for the drift CI
MIN_HALF_TURNOVERS = 2  # whole turnovers a closed loop's window half needs: the drift CI resamples them
DRIFT_BOOT = 400
MIN_OPEN_COMPLETED = 2 * DRIFT_BLOCKS  # an open loop's window: at least this many completions


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """A point's requests split by phase. `phase[i]` is request i's phase (input order)."""

    t_start: float  # unix seconds; nan when there is no steady window
    t_end: float
    phase: tuple[Phase, ...]
    completed: int  # requests that finished inside (t_start, t_end] (any phase)
    completed_output_tokens: int

    @property
    def duration_s(self) -> float:
        return max(0.0, self.t_end - self.t_start) if self.has_window else 0.0

    @property
    def has_window(self) -> bool:
        return not math.isnan(self.t_start) and self.t_end > self.t_start

    def mask(self, phase: Phase) -> np.ndarray:
        return np.array([p == phase for p in self.phase], bool)

    def count(self, phase: Phase) -> int:
        return sum(p == phase for p in self.phase)

    @property
    def request_throughput(self) -> float:
        """Requests completed per second inside the window (nan without a window)."""
        return self.completed / self.duration_s if self.has_window else math.nan

    @property
    def output_throughput(self) -> float:
        """Output tokens per second of the requests completed inside the window (nan without a window)."""
        return self.completed_output_tokens / self.duration_s if self.has_window else math.nan

    def goodput_rps(self, good: int, steady: int) -> float:
        """Requests per second within an SLO: the share of the `steady` requests that met it (`good` of them) times
        the window's request rate. The good steady requests per second alone would undercount (those sent late in
        the window finish after it, the drain: the more, the slower a request), and the good completions in the
        window would count the warm-up's, whose TTFT the start-up wave set."""
        return self.request_throughput * good / steady if steady else math.nan


@dataclasses.dataclass(frozen=True, slots=True)
class Steadiness:
    """The steady-window check of one point; `reasons` is empty when it passed."""

    is_steady: bool
    ttft_drift_pct: float  # 100 * (TTFT p50 of the window's second half / first half - 1)
    ttft_drift_lo_pct: float
    ttft_drift_hi_pct: float
    keep_up: float  # completed / arrived inside the window (1.0 by construction in a closed loop)
    reasons: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class PrefixSplit:
    """TTFT of prefix-cache hits and misses; `unknown`: requests without a cached-token count."""

    hit_ttft_ms: np.ndarray
    miss_ttft_ms: np.ndarray
    unknown: int


def _ends(start_s: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray:
    return np.asarray(start_s, float) + np.nan_to_num(np.asarray(e2e_ms, float), nan=0.0) / 1000.0


def _split(start: np.ndarray, end: np.ndarray, out_tokens: np.ndarray, t_start: float, t_end: float,
           echo: np.ndarray | None = None) -> Window:
    """Phases by send time against the window; `echo` (a mask) marks requests that are warm-up wherever they fall."""
    phases: list[Phase] = []
    for i, (s, e) in enumerate(zip(start, end)):
        warmup = not s >= t_start or (echo is not None and echo[i])
        phases.append("warmup" if warmup else "drain" if e > t_end else "steady")
    done = (end > t_start) & (end <= t_end)  # (t_start, t_end]: see the module docstring
    return Window(t_start, t_end, tuple(phases), int(done.sum()), int(np.asarray(out_tokens)[done].sum()))


def closed_loop_window(start_s: np.ndarray, e2e_ms: np.ndarray, output_tokens: np.ndarray,
                       concurrency: int) -> Window:
    """Warm-up until the c-th completion, drain after the last send (see the module docstring)."""
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} < 1")
    start = np.asarray(start_s, float)
    end = _ends(start, e2e_ms)
    if start.size <= concurrency:  # the first wave is the whole point: nothing is sent after a completion
        return _split(start, end, output_tokens, math.nan, math.nan)
    t_start = float(np.sort(end)[concurrency - 1])
    # the first 2c - 1 sends: the first wave and the refills its first c - 1 completions triggered, however late the
    # client sent them (one streaming c requests sends a refill ms after its completion, and past t_start)
    echo = np.zeros(start.size, bool)
    echo[np.argsort(start, kind="stable")[:2 * concurrency - 1]] = True
    return _split(start, end, output_tokens, t_start, float(start.max()), echo)


def open_loop_window(start_s: np.ndarray, e2e_ms: np.ndarray, output_tokens: np.ndarray) -> Window:
    """Warm-up for one p90 latency after the first arrival, drain after the last arrival (see the docstring)."""
    start = np.asarray(start_s, float)
    end = _ends(start, e2e_ms)
    if start.size < 2:
        return _split(start, end, output_tokens, math.nan, math.nan)
    t_start = float(start.min()) + stats.percentile(np.asarray(e2e_ms, float), POISSON_WARMUP_PCT) / 1000.0
    return _split(start, end, output_tokens, t_start, float(start.max()))


def burst_window(start_s: np.ndarray, e2e_ms: np.ndarray, output_tokens: np.ndarray) -> Window:
    """Everything sent at once: no steady state, every request is warm-up."""
    start = np.asarray(start_s, float)
    return _split(start, _ends(start, e2e_ms), output_tokens, math.nan, math.nan)


def point_window(pattern: str, concurrency: int | None, request_rate: float | None, start_s: np.ndarray,
                 e2e_ms: np.ndarray, output_tokens: np.ndarray) -> Window:
    """The window of a point by how its load was offered: Poisson (a rate), closed loop (a concurrency), else (all
    at once, or a transient pattern) no window."""
    if pattern in TRANSIENT_PATTERNS:
        return burst_window(start_s, e2e_ms, output_tokens)
    if request_rate is not None:
        return open_loop_window(start_s, e2e_ms, output_tokens)
    if concurrency is not None:
        return closed_loop_window(start_s, e2e_ms, output_tokens, concurrency)
    return burst_window(start_s, e2e_ms, output_tokens)


def ttft_drift(first: np.ndarray, second: np.ndarray, seed: int = 0,
               turnovers: tuple[int, int] | None = None) -> tuple[float, float, float]:
    """100 * (p50(second) / p50(first) - 1) with a 95% CI from resampling contiguous blocks of each half (requests
    of one run are correlated in time, so single requests are not independent draws): an open loop's DRIFT_BLOCKS
    blocks per half, a closed loop's `turnovers` (whole turnovers in each half, see _turnover_ci). nan when a half is
    empty."""
    a, b = stats.clean(first), stats.clean(second)
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan, math.nan
    point = 100.0 * (np.median(b) / np.median(a) - 1.0)
    if a.size < 2 or b.size < 2:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    if turnovers is not None:
        return float(point), *_turnover_ci(a, b, turnovers, rng)
    ra = repeats.resample_blocks(a, DRIFT_BLOCKS, DRIFT_BOOT, rng)
    rb = repeats.resample_blocks(b, DRIFT_BLOCKS, DRIFT_BOOT, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 100.0 * (np.median(rb, axis=1) / np.median(ra, axis=1) - 1.0)
    lo, hi = np.quantile(rel[np.isfinite(rel)], [0.025, 0.975])
    return float(point), float(lo), float(hi)


def _turnover_ci(a: np.ndarray, b: np.ndarray, turnovers: tuple[int, int],
                 rng: np.random.Generator) -> tuple[float, float]:
    """The drift CI (%) of halves of k1 and k2 turnovers. A percentile interval of so few blocks is too narrow: with
    two per half and no drift at all, both turnovers of one half lie above both of the other's 1 time in 3, and
    every resample then puts the drift on the same side of 0. So, as for repeats (llmhost.repeats), each half's
    resampled log p50 has its standard deviation times sqrt(k / (k - 1)) as standard error, and the CI is the log
    ratio ± t(0.975, k1 + k2 - 2) × the two errors' root sum of squares. nan with fewer than 2 turnovers a half."""
    ks = [min(k, x.size) for k, x in zip(turnovers, (a, b))]
    if min(ks) < 2:
        return math.nan, math.nan
    var = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):  # a p50 of 0 ms has no log: no CI
        for x, k in zip((a, b), ks):
            log_p50 = np.log(np.median(repeats.resample_blocks(x, k, DRIFT_BOOT, rng), axis=1))
            var += float(log_p50.var()) * k / (k - 1)
        log_ratio = float(np.log(np.median(b) / np.median(a)))
    half = stats.t975(ks[0] + ks[1] - 2) * math.sqrt(var)
    if not math.isfinite(log_ratio + half):
        return math.nan, math.nan
    return 100.0 * (math.exp(log_ratio - half) - 1.0), 100.0 * (math.exp(log_ratio + half) - 1.0)


def turnover_halves(in_window: np.ndarray, concurrency: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """A closed loop's window halves for the drift check: masks (send order) of the first and second half of the
    whole turnovers whose c sends are all in the window (`in_window`, send order), and the turnovers in each. A
    partial turnover (the warm-up's last refill, a remainder at the end) is left out."""
    turn = np.arange(in_window.size) // concurrency
    whole = np.flatnonzero(np.bincount(turn, weights=in_window.astype(float)) == concurrency)
    half = whole.size // 2
    return np.isin(turn, whole[:half]), np.isin(turn, whole[half:]), (half, whole.size - half)


def check_steady(window: Window, start_s: np.ndarray, ttft_ms: np.ndarray, ok: np.ndarray, *,
                 concurrency: int | None, seed: int = 0, min_completed: int = 1) -> Steadiness:
    """Whether the window held a steady state: it saw at least `min_completed` completions, TTFT p50 of the
    requests sent in its first and second half agree — a drift fails only when it is both beyond TTFT_DRIFT_TOL and
    outside its CI — and, for an open loop, completions kept up with arrivals. `concurrency`: a closed loop's c (its
    halves are whole turnovers, see the module docstring); None for an open loop. A point without a window is not
    steady."""
    if not window.has_window:
        return Steadiness(False, math.nan, math.nan, math.nan, math.nan, ("no steady window (too few requests)",))
    start = np.asarray(start_s, float)
    # Sent inside the window, drain included: an overloaded queue finishes nothing sent late before t_end, and
    # TTFT is decided early in a request's life.
    sent = ~window.mask("warmup")
    order = np.argsort(start, kind="stable")  # send order: the drift CI resamples contiguous blocks
    start, sent, good = start[order], sent[order], np.asarray(ok, bool)[order]
    ttft = np.asarray(ttft_ms, float)[order]
    if concurrency is None:
        mid = window.t_start + window.duration_s / 2.0
        first, second, turnovers = sent & (start < mid), sent & (start >= mid), None
    else:
        first, second, turnovers = turnover_halves(sent, concurrency)
    drift, lo, hi = ttft_drift(ttft[first & good], ttft[second & good], seed, turnovers)
    reasons = []
    if window.completed < min_completed:
        reasons.append(f"window too short: {window.completed} of the {min_completed} completions it needs, in "
                       f"{window.duration_s:.2f} s (send more requests: --duration-s)")
    if turnovers is not None and min(turnovers) < MIN_HALF_TURNOVERS:
        reasons.append(f"too few turnovers to check TTFT drift: {min(turnovers)} whole turnover(s) of the "
                       f"{concurrency} slots in a window half, {MIN_HALF_TURNOVERS} needed (send more requests: "
                       "--duration-s)")
    elif math.isnan(lo):  # a half without a successful request, or with one only: nothing to compare
        reasons.append("too few successful requests in a window half to check its TTFT")
    elif abs(drift) > 100 * TTFT_DRIFT_TOL and not (lo <= 0.0 <= hi):
        reasons.append(f"TTFT p50 drifted {drift:+.0f}% [{lo:+.0f}, {hi:+.0f}] from the window's first half to its "
                       f"second (tolerance ±{100 * TTFT_DRIFT_TOL:.0f}%)")
    arrived = int(((start > window.t_start) & (start <= window.t_end)).sum())  # half-open, as completions
    keep_up = window.completed / arrived if arrived else math.nan
    if concurrency is None and not keep_up >= KEEP_UP:
        reasons.append(f"completions kept up with {100 * keep_up:.0f}% of arrivals in the window "
                       f"(< {100 * KEEP_UP:.0f}%: the queue grew)")
    return Steadiness(not reasons, drift, lo, hi, keep_up, tuple(reasons))


def prefix_split(ttft_ms: np.ndarray, ok: np.ndarray, prompt_tokens: np.ndarray,
                 cached_tokens: np.ndarray) -> PrefixSplit:
    """TTFT of successful requests split by prefix-cache hit (cached >= HIT_FRACTION of the prompt) or miss. A
    chat template's common opening is cached for nearly every request, so "any cached token" would call every
    request a hit; a hit means most of the prefill was skipped. cached nan = not recorded (unknown)."""
    ttft = np.asarray(ttft_ms, float)
    good = np.asarray(ok, bool) & np.isfinite(ttft)
    cached = np.asarray(cached_tokens, float)
    known = good & np.isfinite(cached)
    with np.errstate(divide="ignore", invalid="ignore"):
        is_hit = cached >= HIT_FRACTION * np.asarray(prompt_tokens, float)
    return PrefixSplit(ttft[known & is_hit], ttft[known & ~is_hit], int((good & ~np.isfinite(cached)).sum()))


def window_and_check(point: Point, start_s: np.ndarray, e2e_ms: np.ndarray, output_tokens: np.ndarray,
                     ttft_ms: np.ndarray, ok: np.ndarray, seed: int = 0) -> tuple[Window, Steadiness]:
    """A point's window (by its load pattern) and its steadiness check; the arrays must be in send order."""
    w = point_window(point.pattern, point.concurrency, point.request_rate, start_s, e2e_ms, output_tokens)
    closed_c = point.concurrency if point.request_rate is None else None
    return w, check_steady(w, start_s, ttft_ms, ok, concurrency=closed_c, seed=seed,
                           min_completed=min_window_completions(point))


def min_window_completions(point: Point) -> int:
    """Completions a steady window needs: a closed loop's c (every slot turned over once), an open loop's
    MIN_OPEN_COMPLETED."""
    if point.request_rate is not None or not point.concurrency:
        return MIN_OPEN_COMPLETED
    return point.concurrency


def measure(point: Point, rows: list[RequestRecord], seed: int = 0) -> tuple[Window, Steadiness]:
    """window_and_check on a point's request records as the runner holds them (any order; Window.phase follows
    the records sorted by start time)."""
    rows = sorted(rows, key=lambda r: r.start_s)
    ttft = np.array([math.nan if r.ttft_ms is None else r.ttft_ms for r in rows], float)
    return window_and_check(point, np.array([r.start_s for r in rows], float), np.array([r.e2e_ms for r in rows]),
                            np.array([r.output_tokens for r in rows], float), ttft, np.array([r.ok for r in rows]),
                            seed)
