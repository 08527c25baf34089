"""Which throughput a point's repeats contribute to its spread, and the half-width target read as a share of the
value's size: a point with steady windows uses the steady ones, a repeat without a window is left out."""
from __future__ import annotations

import pytest

from llmhost import repeats, stats
from llmhost.bench import points, spread
from llmhost.bench.records import PointRecord, PointSummary

KEY = ("baseline", "agent", "concurrency", 64, None, 384)


def attempt(repeat: int, whole: float, window_s: float | None, steady: float | None) -> PointRecord:
    summary = PointSummary(duration_s=30.0, completed=384, failed=0, request_throughput=12.8, input_throughput=1.0,
                           output_throughput=whole, total_throughput=whole, offered_rate=None, achieved_rate=12.8,
                           client_bound=False, steady_window_s=window_s, steady_output_throughput=steady)
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, repeat)
    return PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=30.0,
                          cache_flushed=True, summary=summary, requests_file="requests/x.jsonl")


def test_one_windowed_repeat_makes_the_point_quote_steady_windows_only() -> None:
    """Repeats 1-2 had steady windows (1000, 1100 tok/s), repeat 3 none: the card averages the steady windows, so
    the spread uses those two, not repeat 3's whole-point 900 nor the others' whole-point numbers."""
    rows = [attempt(1, 950.0, 20.0, 1000.0), attempt(2, 1050.0, 20.0, 1100.0), attempt(3, 900.0, None, None)]
    assert spread.throughput_by_repeat(rows)[KEY] == ({1: 1000.0, 2: 1100.0}, 3)


def test_a_window_that_failed_the_steadiness_check_leaves_its_repeat_out() -> None:
    rows = [attempt(1, 950.0, 20.0, 1000.0), attempt(2, 1050.0, 20.0, None), attempt(3, 900.0, 20.0, 1200.0)]
    assert spread.throughput_by_repeat(rows)[KEY] == ({1: 1000.0, 3: 1200.0}, 3)


def test_without_any_window_the_whole_points_throughput_is_used() -> None:
    rows = [attempt(1, 950.0, None, None), attempt(2, 1050.0, None, None)]
    assert spread.throughput_by_repeat(rows)[KEY] == ({1: 950.0, 2: 1050.0}, 2)


def test_a_half_width_is_a_share_of_the_values_size_whatever_its_sign() -> None:
    """[-206, -194] around -200: +-6 is 3% of 200, as for [194, 206] around 200."""
    assert repeats.half_width_pct(stats.Interval(-200.0, -206.0, -194.0, 3)) == pytest.approx(3.0)
    assert repeats.half_width_pct(stats.Interval(200.0, 194.0, 206.0, 3)) == pytest.approx(3.0)
    assert spread.spread_pct({1: -90.0, 2: -100.0, 3: -110.0}) == pytest.approx(10.0)

