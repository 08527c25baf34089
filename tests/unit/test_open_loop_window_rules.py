"""An open loop's steady window on worked examples: its warm-up lasts the p90 end-to-end latency, arrivals are counted
in (t_start, t_end] like completions, the drift figure compares medians, and a point with a request rate is an open
loop even when it also names a concurrency."""
from __future__ import annotations

import numpy as np
import pytest

from llmhost.bench import window
from llmhost.bench.records import Point


def test_the_warm_up_lasts_the_p90_end_to_end_latency_after_the_first_arrival() -> None:
    # arrivals at 0, 1, ..., 19 s; request i takes 100 (i + 1) ms, so it ends at 1.1 i + 0.1 s.
    # p90 of 100..2000 ms (linear interpolation, rank 0.9 * 19 = 17.1): 1800 + 0.1 * 100 = 1810 ms
    start = np.arange(20, dtype=float)
    e2e = 100.0 * (np.arange(20) + 1)
    w = window.open_loop_window(start, e2e, np.arange(20) + 1.0)
    assert w.t_start == pytest.approx(1.81) and w.t_end == 19.0
    # warm-up: sent at 0 and 1 s; drain: sent at 18 and 19 s, ending at 19.9 and 21 s, after the last arrival
    assert (w.count("warmup"), w.count("steady"), w.count("drain")) == (2, 16, 2)
    # completions in (1.81, 19]: requests 2..17 (ending 2.3 .. 18.8 s), with 3 + 4 + ... + 18 output tokens
    assert w.completed == 16 and w.completed_output_tokens == 168
    assert w.request_throughput == pytest.approx(16 / 17.19)


def test_an_arrival_exactly_at_the_windows_start_is_not_counted_against_keep_up() -> None:
    # arrivals at 0..19 s, each taking 2 s: the window is (2, 19]. The arrival at 2 s is sent at its opening edge,
    # as the completion at 2 s is outside it: 17 arrivals (3..19 s) and 17 completions (ending 3..19 s).
    start = np.arange(20, dtype=float)
    w = window.open_loop_window(start, np.full(20, 2000.0), np.ones(20))
    assert (w.t_start, w.t_end, w.completed) == (2.0, 19.0, 17)
    verdict = window.check_steady(w, start, np.full(20, 100.0), np.ones(20, bool), concurrency=None,
                                  min_completed=16)
    assert verdict.keep_up == 1.0 and verdict.is_steady


def test_the_drift_figure_compares_the_halves_medians_not_their_means() -> None:
    # first half: median 100 ms, one slow request in four (mean 250 ms); second half 120 ms throughout
    first, second = np.tile([100.0, 100.0, 100.0, 700.0], 8), np.full(32, 120.0)
    assert window.ttft_drift(first, second)[0] == pytest.approx(20.0)


def test_a_point_with_a_request_rate_is_checked_as_an_open_loop_even_with_a_concurrency() -> None:
    # arrivals at 0..99 s, request i taking 1 + 0.3 i s (a growing queue), flat TTFT. Warm-up: p90 latency
    # 1000 + 300 * 89.1 = 27,730 ms. Arrivals in (27.73, 99]: 28..99 = 72; completions (ending 1.3 i + 1 s):
    # i = 21..75 = 55. 55 / 72 < 90%: the queue grew, whatever concurrency the point also names.
    n = 100
    start = np.arange(n, dtype=float)
    e2e = 1000.0 + 300.0 * np.arange(n)
    point = Point("p", "baseline", "chat", "qps", 4, 1.0, n, 1)
    w, verdict = window.window_and_check(point, start, e2e, np.ones(n), np.full(n, 100.0), np.ones(n, bool))
    assert w.t_start == pytest.approx(27.73) and w.completed == 55
    assert verdict.keep_up == pytest.approx(55 / 72)
    assert not verdict.is_steady
    assert verdict.reasons == ("completions kept up with 76% of arrivals in the window (< 90%: the queue grew)",)
