"""The timer's choices and records without a GPU: which method this host supports, bad input, and the record that
puts the event timer beside the precise one."""
from __future__ import annotations

import importlib.util

import pytest

from llmhost.fi import timing


@pytest.mark.skipif(importlib.util.find_spec("cupti") is not None, reason="this checks a host without cupti-python")
def test_without_cupti_python_the_precise_timer_is_cuda_graph_replay():
    assert timing.has_cupti() is False and timing.precise_method() == "graph"


def test_bad_method_or_repeat_is_refused_before_any_gpu_call():
    with pytest.raises(ValueError, match="unknown timing method"):
        timing.gpu_time_ms(lambda: None, repeat=3, method="stopwatch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat"):
        timing.gpu_time_ms(lambda: None, repeat=0)


def test_cupti_is_refused_rather_than_silently_timed_with_events(monkeypatch):
    monkeypatch.setattr(timing, "has_cupti", lambda: False)
    with pytest.raises(RuntimeError, match="cupti-python"):
        timing.gpu_time_ms(lambda: None, repeat=3, method="cupti")


def test_timed_records_the_precise_median_in_us_and_the_event_ratio(monkeypatch):
    fake = {"graph": lambda fn, repeat: [0.100, 0.102, 0.098][:repeat],
            "event": lambda fn, repeat: [0.130, 0.128, 0.132][:repeat]}
    monkeypatch.setattr(timing, "TIMERS", fake)
    got = timing.timed(lambda: None, repeat=3, method="graph", compare_events=True)
    assert got["timing"] == "graph" and got["n"] == 3
    assert got["median_us"] == pytest.approx(100.0) and got["event_median_us"] == pytest.approx(130.0)
    assert got["event_over_precise"] == pytest.approx(1.3)
    alone = timing.timed(lambda: None, repeat=3, method="event", compare_events=True)
    assert "event_over_precise" not in alone  # the event timer is not compared with itself


def test_timer_comparison_names_the_case_with_the_largest_gap():
    cases = [{"timing": "graph", "median_us": 100.0, "event_median_us": 104.0, "event_over_precise": 1.04, "n": "a"},
             {"timing": "graph", "median_us": 60.0, "event_median_us": 84.0, "event_over_precise": 1.4, "n": "b"},
             {"timing": "graph", "median_us": 80.0}]
    got = timing.timer_comparison(cases, lambda c: c["n"])
    assert got["method"] == "graph" and got["compared"] == 2
    assert got["event_over_precise_median"] == pytest.approx(1.22)
    assert got["largest_gap_case"] == "b" and got["largest_gap_us"] == pytest.approx(24.0)
    assert timing.timer_comparison([], str) == {}


def test_each_timer_times_the_callable_it_is_given_and_the_record_keeps_its_samples(monkeypatch):
    seen = []
    fake = {"graph": lambda fn, repeat: seen.append(("graph", fn, repeat)) or [0.1] * repeat,
            "event": lambda fn, repeat: seen.append(("event", fn, repeat)) or [0.2] * repeat}
    monkeypatch.setattr(timing, "TIMERS", fake)

    def kernel():
        return None
    got = timing.timed(kernel, repeat=2, method="graph", compare_events=True)
    assert seen == [("graph", kernel, 2), ("event", kernel, 2)] and got["samples_ms"] == [0.1, 0.1]
    assert got["p10_us"] == pytest.approx(100.0) and got["p90_us"] == pytest.approx(100.0)
    assert timing.gpu_time_ms(kernel, repeat=1) == [0.1]  # one measured iteration is enough


def test_the_precise_timer_is_cupti_where_cupti_python_is_installed_and_bad_methods_name_the_choices(monkeypatch):
    monkeypatch.setattr(timing, "has_cupti", lambda: True)
    assert timing.precise_method() == "cupti"
    with pytest.raises(ValueError, match="unknown timing method 'stopwatch' \\(choose from event, graph, cupti\\)"):
        timing.gpu_time_ms(lambda: None, repeat=3, method="stopwatch")  # type: ignore[arg-type]
