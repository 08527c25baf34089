"""The steadiness rules of llmhost.bench.window at their edges: the drift figure and its messages, the keep-up and
window-length boundaries, which requests the drift check sees, transient patterns, and the prefix-hit threshold."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.bench import window
from llmhost.bench.records import Point, RequestRecord


def test_the_drift_is_the_second_halfs_median_over_the_firsts_with_a_ci_around_it() -> None:
    first, second = np.full(32, 100.0), np.full(32, 130.0)
    assert window.ttft_drift(first, second) == pytest.approx((30.0, 30.0, 30.0))
    assert window.ttft_drift(second, first)[0] == pytest.approx(100 * (100 / 130 - 1))
    assert all(math.isnan(x) for x in window.ttft_drift(np.array([]), second))
    assert all(math.isnan(x) for x in window.ttft_drift(first, np.array([])))
    point, lo, hi = window.ttft_drift(np.array([100.0]), second)  # one request: a figure, no CI
    assert point == pytest.approx(30.0) and math.isnan(lo) and math.isnan(hi)
    assert math.isnan(window.ttft_drift(first, np.array([130.0]))[1])


def test_a_closed_loops_drift_ci_comes_from_its_turnovers_and_needs_two_per_half() -> None:
    flat = np.full(32, 100.0)
    assert window.ttft_drift(flat, flat * 1.3, turnovers=(2, 2)) == pytest.approx((30.0, 30.0, 30.0))
    # two turnovers of 16 per half, each half's two waves 2x apart: the t interval holds that spread
    first, second = np.repeat([100.0, 200.0], 16), np.repeat([150.0, 300.0], 16)
    point, lo, hi = window.ttft_drift(first, second, turnovers=(2, 2))
    assert point == pytest.approx(50.0) and lo < 0 < hi
    point, lo, hi = window.ttft_drift(first, second, turnovers=(1, 2))  # one turnover: a figure, no CI
    assert point == pytest.approx(50.0) and math.isnan(lo) and math.isnan(hi)


def _open_loop(ttft: np.ndarray, e2e_ms: float = 10.0) -> tuple[window.Window, np.ndarray]:
    start = np.arange(ttft.size, dtype=float)
    return window.open_loop_window(start, np.full(ttft.size, e2e_ms), np.ones(ttft.size)), start


def test_the_reasons_say_the_drift_and_the_keep_up_in_percent_of_their_tolerances() -> None:
    ttft = np.where(np.arange(64) < 32, 100.0, 150.0)
    w, start = _open_loop(ttft)
    drift = window.check_steady(w, start, ttft, np.ones(64, bool), concurrency=None, min_completed=16)
    assert drift.reasons == ("TTFT p50 drifted +50% [+50, +50] from the window's first half to its second "
                             "(tolerance ±20%)",)
    flat = np.full(65, 100.0)
    w, start = _open_loop(flat)  # arrivals at 1, 2, ..., 64 s are inside the window: 64
    queued = window.Window(w.t_start, w.t_end, w.phase, completed=32, completed_output_tokens=32)
    verdict = window.check_steady(queued, start, flat, np.ones(65, bool), concurrency=None, min_completed=16)
    assert verdict.reasons == ("completions kept up with 50% of arrivals in the window (< 90%: the queue grew)",)


def test_keeping_up_with_exactly_the_required_share_and_count_passes() -> None:
    flat = np.full(61, 100.0)
    w, start = _open_loop(flat)
    arrived = int(((start >= w.t_start) & (start <= w.t_end)).sum())
    assert arrived == 60  # the first arrival is the warm-up's start
    at_edge = window.Window(w.t_start, w.t_end, w.phase, completed=int(arrived * window.KEEP_UP),
                            completed_output_tokens=0)
    assert at_edge.completed / arrived == pytest.approx(window.KEEP_UP)
    ok = window.check_steady(at_edge, start, flat, np.ones(61, bool), concurrency=None,
                             min_completed=at_edge.completed)
    assert ok.is_steady, ok.reasons
    short = window.check_steady(at_edge, start, flat, np.ones(61, bool), concurrency=None,
                                min_completed=at_edge.completed + 1)
    assert short.reasons[0].startswith(f"window too short: {at_edge.completed} of the {at_edge.completed + 1} ")


def test_the_drift_check_sees_only_successful_requests_sent_after_the_warm_up() -> None:
    # closed loop c=8, 7 waves of 1 s: the window runs from the 8th completion (1 s) to the last send (6 s); the
    # warm-up is the first 15 sends, so turnover 1 (the wave sent at 1 s) is partial, and the whole turnovers are
    # the waves sent at 2-5 s, halved into 2-3 s and 4-5 s. The start-up wave's TTFT is 50x the rest: counted, it
    # would be half of the first half.
    start = np.repeat(np.arange(7.0), 8)
    e2e = np.full(56, 1000.0)
    ttft = np.where(start == 0, 5000.0, np.where(start < 4, 100.0, 110.0))
    ok = np.ones(56, bool)
    ok[-1], ttft[-1] = False, 9000.0  # failed: kept out
    point = Point("p", "baseline", "chat", "concurrency", 8, None, 56, 1)
    w, verdict = window.window_and_check(point, start, e2e, np.full(56, 10), ttft, ok)
    assert (w.t_start, w.t_end) == (1.0, 6.0)
    assert verdict.is_steady and verdict.ttft_drift_pct == pytest.approx(10.0), verdict.reasons
    assert window.min_window_completions(point) == 8
    assert window.min_window_completions(Point("q", "baseline", "chat", "qps", None, 2.0, 20, 1)) == 16


def test_a_closed_loops_halves_are_its_whole_turnovers_in_send_order() -> None:
    # c=4, 26 sends: the warm-up is the first 7 (2c - 1), so turnover 1 (sends 4-7) is partial and left out, as is
    # the remainder 24-25; turnovers 2-5 are whole: 2-3 in the first half, 4-5 in the second
    in_window = np.arange(26) >= 7
    first, second, turnovers = window.turnover_halves(in_window, 4)
    assert np.flatnonzero(first).tolist() == list(range(8, 16))
    assert np.flatnonzero(second).tolist() == list(range(16, 24)) and turnovers == (2, 2)
    assert window.turnover_halves(np.arange(9) >= 1, 1)[2] == (4, 4)  # c=1: a turnover is one request


def test_a_drift_of_exactly_the_tolerance_passes_and_just_beyond_it_fails() -> None:
    for second, steady in ((100.0 * (1 + window.TTFT_DRIFT_TOL), True), (120.1, False)):
        ttft = np.where(np.arange(64) < 32, 100.0, second)
        w, start = _open_loop(ttft)
        verdict = window.check_steady(w, start, ttft, np.ones(64, bool), concurrency=None, min_completed=16)
        assert verdict.is_steady is steady, (second, verdict.reasons)


@pytest.mark.parametrize("pattern", ["burst", "cold"])
def test_transient_patterns_are_all_warm_up_and_have_no_window(pattern: str) -> None:
    start, e2e = np.zeros(8), np.full(8, 500.0)
    w = window.point_window(pattern, 8, None, start, e2e, np.full(8, 10))
    assert w.phase == ("warmup",) * 8 and not w.has_window and w.duration_s == 0.0
    assert math.isnan(w.output_throughput)


def test_an_open_loop_of_one_arrival_has_no_window_and_requests_without_an_e2e_end_at_their_send() -> None:
    one = window.open_loop_window(np.array([5.0]), np.array([100.0]), np.array([10]))
    assert not one.has_window and one.phase == ("warmup",)
    w = window.closed_loop_window(np.array([0.0, 0.0, 1.0, 2.0]), np.array([1000.0, math.nan, 1000.0, 1000.0]),
                                  np.array([10, 10, 10, 10]), concurrency=2)
    assert w.t_start == 1.0  # it ends when sent (nan -> 0 ms), so the 2nd completion is the one at 1 s


def test_half_the_prompt_cached_is_already_a_hit() -> None:
    split = window.prefix_split(np.array([20.0, 30.0]), np.array([True, True]), np.array([1000, 1000]),
                                np.array([500, 499]))
    assert split.hit_ttft_ms.tolist() == [20.0] and split.miss_ttft_ms.tolist() == [30.0]


def test_measure_reads_a_failed_request_without_ttft_as_not_timed() -> None:
    rows = [RequestRecord(float(i // 4), True, "", 100, 10, 100.0, (9.0,) * 9, 1000.0) for i in range(27)]
    rows.append(RequestRecord(6.0, False, "boom", 100, 0, None, (), 1000.0))
    w, verdict = window.measure(Point("p", "baseline", "chat", "concurrency", 4, None, 28, 1), rows)
    assert verdict.is_steady and w.count("steady") + w.count("drain") + w.count("warmup") == 28
