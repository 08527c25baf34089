"""How a point's steady row pools its repeats, on hand-built windows: means over the steady repeats (throughput in
output tokens per second, window length), the median wave header pace, lockstep only when every steady repeat was,
sample-count sufficiency per percentile; a transient point's warm-up from all its repeats, and it is never listed
as not steady."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench import window
from llmhost.bench.records import Point, PointRecord
from llmhost.report import load, steady, tables, waves

SLO = stats.Slo(ttft_ms=500.0, itl_ms=50.0, pct=99.0)


def _rep(repeat: int, duration: float, tokens: int, *, is_steady: bool = True, steady_ttft: int = 0,
         warmup_ttft: tuple[float, ...] = (), pace: float = math.nan, wave_size: float = math.nan,
         pattern: str = "concurrency", ttft_ms: float = 100.0) -> steady.RepeatWindow:
    point = Point(f"p.r{repeat}", "baseline", "chat", pattern, 4, None, 48, repeat)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=duration,
                            cache_flushed=True, summary=None, requests_file="requests/p.jsonl")
    phase = ("warmup",) * len(warmup_ttft) + ("steady",) * steady_ttft
    w = window.Window(0.0, duration, phase, completed=10, completed_output_tokens=tokens)
    check = window.Steadiness(is_steady, 0.0, 0.0, 0.0, 1.0, () if is_steady else ("TTFT p50 drifted",))
    ttft = np.full(steady_ttft, ttft_ms)
    return steady.RepeatWindow(record, w, check,
                               {"warmup": np.array(warmup_ttft), "steady": ttft, "drain": np.array([])},
                               window.PrefixSplit(np.array([]), np.array([]), 0),
                               (np.ones(steady_ttft, bool), ttft, np.full(steady_ttft, 10.0)),
                               arrivals=waves.Waves(wave_size, 2.0, 3, wave_size ** 2), headers_pace_ms=pace)


def _group(pattern: str = "concurrency", concurrency: int | None = 4) -> tables.Group:
    return tables.Group("baseline", "chat", pattern, concurrency, None, 48, (), load.requests_from_records([]))


def _reps() -> list[steady.RepeatWindow]:
    # three steady repeats: windows of 2, 4 and 9 s at 100, 200 and 300 tok/s (10 completions each), 1,000 steady
    # TTFTs of 100 ms in all; the second was not in lockstep. A fourth, not steady, whose TTFTs of 900 ms all miss
    # the SLO, would change every figure if counted.
    return [_rep(1, 2.0, 200, steady_ttft=400, pace=1.0, wave_size=4.0),
            _rep(2, 4.0, 800, steady_ttft=300, pace=2.0, wave_size=1.0),
            _rep(3, 9.0, 2700, steady_ttft=300, pace=9.0, wave_size=4.0),
            _rep(4, 1.0, 5000, is_steady=False, steady_ttft=5, pace=50.0, wave_size=4.0, ttft_ms=900.0)]


def test_the_rows_means_are_over_steady_repeats_in_output_tokens_per_second() -> None:
    row = steady.steady_row(_group(), _reps(), SLO)
    assert (row["repeats"], row["repeats_steady"]) == (4, 3)
    assert row["steady_output_throughput"] == pytest.approx(200.0)  # (100 + 200 + 300) / 3 tok/s
    assert row["window_s"] == pytest.approx(5.0)  # mean of 2, 4, 9 s (the median would be 4)
    assert row["wave_size"] == pytest.approx(3.0)
    assert row["wave_seen_size"] == pytest.approx(11.0)  # a request's wave: (16 + 1 + 16) / 3


def test_the_header_pace_is_the_median_over_steady_repeats_and_lockstep_needs_all_of_them() -> None:
    row = steady.steady_row(_group(), _reps(), SLO)
    assert row["headers_pace_ms"] == pytest.approx(2.0)  # median of 1, 2, 9 ms (the mean would be 4)
    assert row["in_waves"] is False  # the second repeat sent one request at a time
    lockstep = [r for r in _reps() if r.repeat != 2]
    assert steady.steady_row(_group(), lockstep, SLO)["in_waves"] is True


def test_each_tail_percentile_is_sufficient_at_its_own_sample_count() -> None:
    row = steady.steady_row(_group(), _reps(), SLO)
    assert row["steady_ttft_n"] == 1000  # 400 + 300 + 300: enough for p99 (10 beyond it), not for p99.9
    assert row["steady_ttft_p99_sufficient"] is True and row["steady_ttft_p999_sufficient"] is False


def test_goodput_and_the_ttft_slo_are_judged_on_the_steady_repeats() -> None:
    row = steady.steady_row(_group(), _reps(), SLO)
    assert row["steady_goodput_pct"] == pytest.approx(100.0)  # every steady request within 500 ms and 50 ms
    assert row["steady_ttft_p99_ms"] == pytest.approx(100.0)
    assert row["steady_ttft_p99_slo"] == "met"  # a p99 of 100 ms [100, 100] is within the 500 ms limit


def test_a_transient_points_warm_up_is_every_repeats_and_it_is_not_listed_as_not_steady() -> None:
    burst = [_rep(1, 1.0, 0, is_steady=False, warmup_ttft=(100.0, 200.0, 300.0), pattern="burst"),
             _rep(2, 1.0, 0, is_steady=False, warmup_ttft=(400.0, 500.0, 600.0), pattern="burst")]
    row = steady.steady_row(_group("burst", None), burst, SLO)
    assert row["repeats_steady"] == 0 and row["warmup_n"] == 6
    assert row["warmup_ttft_p50_ms"] == pytest.approx(350.0)
    groups = [_group("burst", None), _group()]
    windows = {groups[0].key: burst, groups[1].key: _reps()}
    listed = steady.not_steady_rows(groups, windows)
    assert [(r["pattern"], r["repeat"], r["reasons"]) for r in listed] == [("concurrency", 4, "TTFT p50 drifted")]


def test_first_tokens_over_the_slo_are_counted_with_those_sent_in_a_wave_of_a_quarter_of_c() -> None:
    # c=16: a wave of 4 is a quarter. The first repeat's 400 steady first tokens all miss 500 ms, 300 of them sent
    # in waves of 4 and 100 in waves of 3; the second's are all in time; a third without wave sizes and a fourth,
    # not steady, are left out of both counts.
    late = dataclasses.replace(_rep(1, 2.0, 200, steady_ttft=400, ttft_ms=900.0),
                               steady_wave_sizes=np.repeat([4, 3], [300, 100]))
    in_time = dataclasses.replace(_rep(2, 2.0, 200, steady_ttft=50), steady_wave_sizes=np.full(50, 16))
    unsized = _rep(3, 2.0, 200, steady_ttft=30, ttft_ms=900.0)
    gone = dataclasses.replace(_rep(4, 2.0, 200, is_steady=False, steady_ttft=20, ttft_ms=900.0),
                               steady_wave_sizes=np.full(20, 16))
    row = steady.steady_row(_group(concurrency=16), [late, in_time, unsized, gone], SLO)
    assert (row["slow_ttft_n"], row["slow_ttft_in_waves_n"]) == (400, 300)
    row = steady.steady_row(_group(concurrency=16), [in_time], SLO)
    assert (row["slow_ttft_n"], row["slow_ttft_in_waves_n"]) == (0, 0)
    at_the_slo = dataclasses.replace(_rep(5, 2.0, 200, steady_ttft=10, ttft_ms=500.0),
                                     steady_wave_sizes=np.full(10, 16))
    assert steady.steady_row(_group(concurrency=16), [at_the_slo], SLO)["slow_ttft_n"] == 0  # 500 ms is within 500
    assert steady.steady_row(_group(concurrency=None), [late], SLO)["slow_ttft_in_waves_n"] is None  # open loop
