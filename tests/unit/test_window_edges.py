"""The steady window's checks at their edges: the drift CI's degrees of freedom and its seed, the smallest halves and
open loops that still have one, and arrivals counted half-open like completions."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.bench import window
from llmhost.bench.records import Point, RequestRecord


def test_the_turnover_ci_takes_t_with_k1_plus_k2_minus_2_degrees_of_freedom(monkeypatch):
    seen = []
    monkeypatch.setattr(window.stats, "t975", lambda df: seen.append(df) or 2.0)
    a, b = np.array([100.0, 110.0, 90.0, 105.0]), np.array([120.0, 130.0, 125.0, 118.0, 122.0, 128.0])
    lo, hi = window._turnover_ci(a, b, (2, 3), np.random.default_rng(0))
    assert seen == [3] and lo < 100 * (np.median(b) / np.median(a) - 1) < hi


def test_halves_of_two_requests_have_a_drift_ci_and_of_one_only_a_drift():
    drift, lo, hi = window.ttft_drift(np.array([100.0, 110.0]), np.array([120.0, 130.0]))
    assert drift == pytest.approx(100 * (125 / 105 - 1)) and math.isfinite(lo) and math.isfinite(hi)
    drift, lo, hi = window.ttft_drift(np.array([100.0]), np.array([120.0, 130.0]))
    assert drift == pytest.approx(100 * (125 / 100 - 1)) and math.isnan(lo) and math.isnan(hi)
    assert math.isnan(window.ttft_drift(np.array([100.0, 110.0]), np.array([120.0]))[1])


def test_the_drift_ci_is_the_seed_s_so_a_report_recomputes_the_runner_s_verdict():
    rng = np.random.default_rng(1)
    first, second = rng.uniform(90, 130, 40), rng.uniform(95, 140, 40)
    assert window.ttft_drift(first, second, seed=3) == window.ttft_drift(first, second, seed=3)
    assert window.ttft_drift(first, second, seed=3) != window.ttft_drift(first, second, seed=4)
    rows = [RequestRecord(float(i // 4), True, "", 100, 10, float(rng.uniform(90, 140)), (9.0,) * 9, 1000.0)
            for i in range(40)]
    point = Point("p", "baseline", "chat", "concurrency", 4, None, 40, 1)
    once, again = window.measure(point, rows, seed=7)[1], window.measure(point, rows, seed=7)[1]
    assert (once.ttft_drift_lo_pct, once.ttft_drift_hi_pct) == (again.ttft_drift_lo_pct, again.ttft_drift_hi_pct)
    assert math.isfinite(once.ttft_drift_lo_pct)


def test_an_open_loop_of_two_arrivals_has_a_window():
    w = window.open_loop_window(np.array([0.0, 1.0]), np.array([100.0, 100.0]), np.array([10, 10]))
    assert w.has_window and w.t_start == pytest.approx(0.1) and w.t_end == 1.0


def test_an_arrival_at_the_window_s_opening_is_not_counted_as_one_of_its_arrivals():
    start = np.array([1.0, 1.5, 2.0, 2.5, 3.0])  # the first at t_start: before the window, like a completion there
    w = window.Window(1.0, 3.0, ("warmup",) + ("steady",) * 4, completed=4, completed_output_tokens=40)
    verdict = window.check_steady(w, start, np.full(5, 100.0), np.ones(5, bool), concurrency=None)
    assert verdict.keep_up == 1.0
