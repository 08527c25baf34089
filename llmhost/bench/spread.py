"""How far a point's throughput moves from repeat to repeat, and how many repeats its CI needs for that.

    values = spread.throughput_by_repeat(records)           # point -> ({repeat: tok/s}, ok repeats)
    spread.spread_pct(values)                                # sd across repeats, % of their mean
    spread.repeats_needed(3.8, target_pct=3.0, fewest=3, most=10)   # -> 9

Why the plan asks for it: on the H200 (SGLang 0.5.17, b20v2 run, seeds 1-6) agent c=64's steady throughput was
5,206-5,765 tok/s (sd 3.8% of the mean) and chat c=64's 6,200-6,222 (0.2%). Each half of a repeat's window sat at
the level of its whole, so a seed's prompts set the level and a longer point does not narrow the spread: only
repeats do. A 95% Student-t CI within ±3% takes 9 repeats at 3.8% (t(8) 2.31 x 3.8 / sqrt(9) = 2.9%), 3 at 0.2%.
Left to adaptive repeats at the end of each boot, agent c=64 got a boot's share of the spare time: 3 more, ±4.0%.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from llmhost import stats
from llmhost.bench.records import Point, PointRecord, PointSummary

MIN_VALUES = 3  # the fewest repeats whose spread says anything
Series = tuple[str, str, str, int | None, float | None, int]  # series(point)


def series(point: Point) -> Series:
    """A point's identity across its repeats: (arm, workload, pattern, concurrency, rate, prompts)."""
    return point.arm, point.workload, point.pattern, point.concurrency, point.request_rate, point.num_prompts


def throughput_by_repeat(done: Iterable[PointRecord], keep: Callable[[PointRecord], bool] = lambda r: True,
                         ) -> dict[Series, tuple[dict[int, float], int]]:
    """Per point with an ok summary (that `keep` accepts), keyed by its identity across repeats (arm, workload,
    pattern, concurrency, rate, prompts): (repeat -> the throughput its headline card quotes, the number of ok
    repeats). That throughput is the steady window's output tok/s of each repeat that had a steady one
    (llmhost.bench.window; the card averages those), else — no repeat of the point recorded one — the whole
    point's. The latest ok attempt of a repeat wins."""
    latest: dict[Series, dict[int, PointSummary]] = {}
    for r in done:
        if r.status == "ok" and r.summary is not None and keep(r):
            latest.setdefault(series(r), {})[r.repeat] = r.summary
    out = {}
    for key, by_repeat in latest.items():
        steady = {rep: s.steady_output_throughput for rep, s in by_repeat.items()
                  if s.steady_output_throughput is not None}
        has_windows = any(s.steady_window_s is not None for s in by_repeat.values())
        out[key] = (steady if has_windows else {rep: s.output_throughput for rep, s in by_repeat.items()},
                    len(by_repeat))
    return out


def spread_pct(values: Mapping[int, float]) -> float:
    """Standard deviation across repeats as % of their mean; nan with fewer than MIN_VALUES."""
    x = stats.clean(list(values.values()))
    if x.size < MIN_VALUES or not x.mean():
        return math.nan
    return 100.0 * float(np.std(x, ddof=1)) / abs(float(x.mean()))


def repeats_needed(spread: float | None, target_pct: float, fewest: int, most: int) -> int:
    """The fewest repeats (fewest..most) whose Student-t 95% CI half-width, at this spread, is within target_pct of
    the mean; `fewest` when the spread is unknown, `most` when even that many are not enough."""
    if spread is None or math.isnan(spread):
        return fewest
    for n in range(fewest, most + 1):
        if stats.t975(n - 1) * spread / math.sqrt(n) <= target_pct:
            return n
    return most
