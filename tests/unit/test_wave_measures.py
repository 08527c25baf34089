"""Lockstep waves on worked examples: the period is the mean gap between wave starts, the header pace is the p10-p90
spread over the n - 1 gaps between a wave's requests (a wave needs MIN_PACED timed ones), the median over waves, and
a point is in lockstep from a quarter of its concurrency, at least two requests a wave."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.report import waves


def _wave(t0: float, n: int) -> np.ndarray:
    return t0 + 0.001 * np.arange(n)  # n sends 1 ms apart: one wave


def test_the_period_is_the_mean_gap_between_wave_starts() -> None:
    sends = np.concatenate([_wave(t, 4) for t in (0.0, 1.0, 2.0, 6.0)])
    found = waves.find(sends)
    assert (found.count, found.mean_size) == (4, 4.0)
    assert found.period_s == pytest.approx(2.0)  # gaps of 1, 1 and 4 s (the median would be 1)


def test_a_send_exactly_the_gap_after_the_last_joins_its_wave_and_two_waves_give_one_period() -> None:
    assert waves.find(np.array([0.0, waves.GAP_S])).count == 1
    assert waves.find(np.array([0.0, waves.GAP_S + 0.001])).count == 2
    two = waves.find(np.concatenate([_wave(0.0, 3), _wave(2.5, 3)]))
    assert (two.count, two.period_s) == (2, pytest.approx(2.5))
    one, none = waves.find(_wave(0.0, 3)), waves.find(np.array([]))
    assert math.isnan(one.period_s) and (one.mean_size, one.seen_size) == (3.0, 3.0)
    assert none.count == 0 and all(math.isnan(x) for x in (none.mean_size, none.period_s, none.seen_size))


def test_the_header_pace_spreads_p10_to_p90_over_the_gaps_between_requests() -> None:
    # 11 headers 10 ms apart: p10-p90 = 10..90 ms, 80 ms over 80% of the 10 gaps = 10 ms a request
    assert waves.headers_pace_ms(_wave(0.0, 11), 10.0 * np.arange(11)) == pytest.approx(10.0)
    # exactly MIN_PACED (8) timed requests is a wave to measure: p10-p90 = 7..63 ms over 0.8 * 7 gaps
    assert waves.MIN_PACED == 8
    assert waves.headers_pace_ms(_wave(0.0, 8), 10.0 * np.arange(8)) == pytest.approx(10.0)
    assert math.isnan(waves.headers_pace_ms(_wave(0.0, 7), 10.0 * np.arange(7)))


def test_the_header_pace_is_the_median_over_waves() -> None:
    sends = np.concatenate([_wave(0.0, 11), _wave(1.0, 11), _wave(2.0, 11)])
    headers = np.concatenate([10.0 * np.arange(11), 10.0 * np.arange(11), 40.0 * np.arange(11)])
    assert waves.headers_pace_ms(sends, headers) == pytest.approx(10.0)  # paces 10, 10, 40 (the mean would be 20)


def test_lockstep_starts_at_a_quarter_of_the_concurrency_and_two_requests_a_wave() -> None:
    assert waves.WAVE_SHARE == 0.25
    assert waves.Waves(1.0, 2.0, 3, 4.0).in_lockstep(16)  # judged by a request's wave, not the mean over waves
    assert not waves.Waves(9.0, 2.0, 3, 3.9).in_lockstep(16)
    assert waves.Waves(1.0, 2.0, 3, 2.0).in_lockstep(8)
    assert waves.Waves(1.0, 2.0, 3, 2.0).in_lockstep(4) and not waves.Waves(1.0, 2.0, 3, 1.9).in_lockstep(4)
    assert not waves.Waves(1.0, 2.0, 3, 1.0).in_lockstep(4)  # one request at a time is no wave, whatever the c
    assert not waves.Waves(4.0, 2.0, 3, 4.0).in_lockstep(None)
    assert not waves.Waves(math.nan, math.nan, 0, math.nan).in_lockstep(16)


def test_a_requests_wave_is_weighted_by_the_requests_in_it() -> None:
    # one wave of 12 and 4 stragglers sent alone: 5 waves of 3.2 on average, but a request's wave holds
    # (12 * 12 + 4 * 1) / 16 = 9.25 on average
    sends = np.concatenate([_wave(0.0, 12), 1.0 + 0.2 * np.arange(4)])
    found = waves.find(sends)
    assert (found.count, found.mean_size, found.seen_size) == (5, 3.2, 9.25)
    assert found.in_lockstep(32) and not waves.Waves(found.mean_size, 1.0, 5, found.mean_size).in_lockstep(32)
    assert math.isnan(waves.find(np.array([])).seen_size)


def test_each_send_gets_its_waves_size_in_the_order_given() -> None:
    sends = np.array([5.0, 0.0, 5.01, 0.02, 9.0, 0.01])  # waves of 3 (0 s), 2 (5 s) and 1 (9 s), shuffled
    assert waves.sizes(sends).tolist() == [2, 3, 2, 3, 1, 3] and waves.sizes(sends).dtype.kind == "i"  # counts
    assert waves.sizes(np.array([])).tolist() == []


def test_late_requests_count_in_waves_from_a_quarter_of_the_concurrency() -> None:
    wave_sizes = np.array([8, 8, 7, 7, 32, 1])
    late = np.array([True, False, True, True, True, False])
    assert waves.late_in_waves(wave_sizes, late, 32) == (4, 2)  # 8 and 32 reach 32 / 4; the 7s do not
    assert waves.late_in_waves(wave_sizes, late, None) == (4, None)  # an open loop has no quarter of c
    assert waves.late_in_waves(wave_sizes, np.zeros(6, bool), 32) == (0, 0)
