"""Lockstep waves in a closed loop's send times (llmhost.report.waves) and how the steady section reports them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.report import steady_page, waves


def test_sends_within_the_gap_form_one_wave_and_the_period_is_between_wave_starts():
    rng = np.random.default_rng(0)
    starts = np.concatenate([t + rng.uniform(0, 0.03, 64) for t in (10.0, 13.0, 16.0)])  # 3 waves of 64, 3 s apart
    found = waves.find(rng.permutation(starts))
    assert found.count == 3 and found.mean_size == 64 and math.isclose(found.period_s, 3.0, abs_tol=0.05)
    assert found.in_lockstep(64) and not found.in_lockstep(512)  # 64 of 512 is no lockstep


def test_requests_sent_one_by_one_are_no_waves():
    spread = np.cumsum(np.full(200, 0.06))  # one send every 60 ms: each its own "wave" of 1
    found = waves.find(spread)
    assert found.mean_size == 1 and not found.in_lockstep(16)
    assert not waves.find(np.array([])).in_lockstep(16) and waves.find(np.array([])).count == 0
    assert not waves.find(np.array([1.0, 1.01])).in_lockstep(None)  # an open loop has no concurrency to fill


def test_the_page_names_the_points_in_waves_and_says_nothing_otherwise():
    row = {"arm": "baseline", "workload": "agent", "load": "c=64", "in_waves": True, "wave_size": 41.1,
           "wave_seen_size": 61.4, "wave_period_s": 3.05}
    note = steady_page.waves_note([row, {**row, "load": "c=1", "in_waves": False}])
    assert ("≋ 1 point(s) ran in lockstep waves (the wave a request was sent in held, on average: baseline · agent · "
            "c=64: 61)") in note and "c=1" not in note
    assert steady_page.waves_note([{**row, "in_waves": False}]) == ""
    assert "over the TTFT SLO" not in note  # no count of late first tokens: nothing said about them


def test_the_page_says_how_many_late_first_tokens_came_in_the_waves() -> None:
    row = {"arm": "baseline", "workload": "agent", "load": "c=128", "in_waves": True, "wave_size": 42.5,
           "wave_seen_size": 103.6, "wave_period_s": 1.38, "slow_ttft_n": 255, "slow_ttft_in_waves_n": 254}
    note = steady_page.waves_note([row, {**row, "load": "c=64", "slow_ttft_n": 0, "slow_ttft_in_waves_n": 0}])
    assert note.endswith("Of the steady first tokens over the TTFT SLO, those sent in a wave of at least 25% of the "
                         "concurrency: baseline · agent · c=128: 254 of 255.</p>")


def test_the_page_says_what_a_wave_hands_the_server_in_tokens() -> None:
    # the H100's c=128 defaults: 98.9 requests a wave, 4,449.6-token prompts of which 4,314.9 came from the cache
    row = {"arm": "baseline", "workload": "agent", "load": "c=128", "in_waves": True, "wave_size": 35.1,
           "wave_seen_size": 98.9, "wave_period_s": 1.3, "prompt_tokens_mean": 4449.6, "cached_tokens_mean": 4314.9}
    small = {**row, "load": "c=8", "wave_seen_size": 7.0, "prompt_tokens_mean": 120.0, "cached_tokens_mean": 0.0}
    unknown = {**row, "load": "c=64", "cached_tokens_mean": math.nan}  # no reply reported cached tokens
    note = steady_page.waves_note([row, small, unknown])
    assert note.endswith("to prefill: baseline · agent · c=128: 440k to tokenize, 13.3k to prefill; baseline · "
                         "agent · c=8: 840 to tokenize, 840 to prefill.</p>")
    assert "c=64: " not in note.split("Such a wave")[1]  # no cache count: nothing said about its prefill
    assert "Such a wave" not in steady_page.waves_note([unknown])
    over = {**row, "cached_tokens_mean": 4500.0}  # a mean over requests can exceed another mean: never negative
    assert "0 to prefill" in steady_page.waves_note([over])
    many = steady_page.waves_note([{**row, "load": f"c={c}"} for c in range(7)])
    assert many.count(" to tokenize, ") == 6 and many.endswith("to prefill; ….</p>")


def test_a_wave_taken_up_one_request_at_a_time_spreads_its_headers_by_that_time():
    # the H200's defaults at agent c=64: 64 sends within ~45 ms, headers from ~25 to ~370 ms, ~5 ms apart
    start = np.concatenate([1000.0 + np.arange(64) * 0.0007, 1002.6 + np.arange(64) * 0.0007])
    serial = np.concatenate([20.0 + 5.0 * np.arange(64), 30.0 + 5.0 * np.arange(64)[::-1]])  # any send order
    assert waves.headers_pace_ms(start, serial) == pytest.approx(5.0, rel=0.02)
    assert waves.headers_pace_ms(start, np.full(128, 40.0)) == 0.0  # taken up at once
    assert waves.headers_pace_ms(start, np.where(np.arange(128) % 2 == 0, serial, np.nan)) == pytest.approx(
        10.0, rel=0.05)  # only the timed requests count: 32 a wave, 10 ms apart
    spread = 1000.0 + np.arange(64) * 0.3  # sent one by one: no wave holds MIN_PACED requests
    assert math.isnan(waves.headers_pace_ms(spread, np.full(64, 40.0)))
    assert math.isnan(waves.headers_pace_ms(np.array([]), np.array([])))
