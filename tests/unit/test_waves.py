"""Lockstep waves in a closed loop's send times (llmhost.report.waves) and how the steady section reports them."""
from __future__ import annotations

import math

import numpy as np

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
    row = {"arm": "baseline", "workload": "agent", "load": "c=64", "in_waves": True, "wave_size": 61.1,
           "wave_period_s": 3.05}
    note = steady_page.waves_note([row, {**row, "load": "c=1", "in_waves": False}])
    assert "≋ 1 point(s) ran in lockstep waves (baseline · agent · c=64)" in note and "c=1" not in note
    assert steady_page.waves_note([{**row, "in_waves": False}]) == ""
