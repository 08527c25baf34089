"""Paired arm differences are taken against the manifest's baseline arm (not the first listed), by repeat index,
over repeats steady on both sides."""
from __future__ import annotations

import types

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench import window
from llmhost.bench.arms import Arm
from llmhost.bench.records import Point, PointRecord
from llmhost.report import load, steady, tables

SLO = stats.Slo(ttft_ms=500.0, itl_ms=50.0, pct=99.0)


def _rep(arm: str, repeat: int, tok_s: float, is_steady: bool = True) -> steady.RepeatWindow:
    point = Point(f"{arm}.r{repeat}", arm, "chat", "concurrency", 4, None, 48, repeat)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=1.0,
                            cache_flushed=True, summary=None, requests_file="requests/p.jsonl")
    w = window.Window(0.0, 1.0, (), completed=10, completed_output_tokens=int(tok_s))  # a 1 s window
    check = window.Steadiness(is_steady, 0.0, 0.0, 0.0, 1.0, () if is_steady else ("TTFT p50 drifted",))
    ttft = np.full(10, 100.0)
    return steady.RepeatWindow(record, w, check, {"warmup": ttft, "steady": ttft, "drain": ttft},
                               window.PrefixSplit(np.array([]), np.array([]), 0),
                               (np.ones(10, bool), ttft, np.full(10, 10.0)))


def _group(arm: str) -> tables.Group:
    return tables.Group(arm, "chat", "concurrency", 4, None, 48, (), load.requests_from_records([]))


def test_the_reference_arm_is_the_baseline_wherever_the_manifest_lists_it() -> None:
    arms = (Arm("fast", "fast", "#111", ("--x",), ""), Arm("base", "base", "#222", (), "", is_baseline=True))
    run = types.SimpleNamespace(arms=arms)
    groups = [_group("fast"), _group("base")]
    windows = {groups[0].key: [_rep("fast", 1, 110.0), _rep("fast", 2, 220.0)],
               groups[1].key: [_rep("base", 1, 100.0), _rep("base", 2, 200.0)]}
    rows = steady.paired_rows(run, groups, windows, SLO)
    assert [(r["arm"], r["baseline"]) for r in rows] == [("fast", "base")]
    # differences +10 and +20 tok/s over a baseline mean of 150: +10%
    assert rows[0]["output_throughput_delta_pct"] == pytest.approx(10.0)


def test_a_repeat_not_steady_on_the_arms_side_is_left_out_of_the_pairs() -> None:
    base = [_rep("base", 1, 100.0), _rep("base", 2, 200.0), _rep("base", 3, 300.0)]
    arm = [_rep("fast", 1, 110.0), _rep("fast", 2, 220.0), _rep("fast", 3, 900.0, is_steady=False)]
    row = steady.paired_row(base, arm, SLO)
    assert row["output_throughput_pairs"] == 2
    assert row["output_throughput_delta_pct"] == pytest.approx(10.0)  # (10 + 20) / 2 over (100 + 200) / 2
    assert steady.paired_row(arm, base, SLO)["output_throughput_pairs"] == 2
