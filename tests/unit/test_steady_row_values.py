"""The numbers of a point's steady row, each against its definition on hand-built repeats: TTFT percentiles of the
pooled steady windows (a p99 is not the maximum), the goodput share's CI and its SLO call, the measuring side's
means over the repeats SGLang counted, token and running-request means, prefix hits and misses, the per-repeat
list, the not-steady list of a Poisson point, rows that come out the same on every call, and paired rows against the
first arm when the run names no baseline."""
from __future__ import annotations

import dataclasses
import json
import math
import types

import numpy as np
import pytest

from fixtures_bench import ARMS, make_run
from llmhost import repeats, stats
from llmhost.bench import window
from llmhost.report import load, steady, tables
from test_steady_row_pooling import _group, _rep

SLO = stats.Slo(ttft_ms=500.0, itl_ms=50.0, pct=99.0)


def _with(r: steady.RepeatWindow, ttft: np.ndarray, good: int | None = None, **fields) -> steady.RepeatWindow:
    """`r` with these steady TTFTs (and the first `good` of them within the SLO, the rest over its ITL limit)."""
    good = ttft.size if good is None else good
    itl = np.where(np.arange(ttft.size) < good, 10.0, 90.0)
    return dataclasses.replace(r, ttft_ms={**r.ttft_ms, "steady": ttft}, steady_sent=(np.ones(ttft.size, bool), ttft,
                                                                                      itl), **fields)


def _spread() -> list[steady.RepeatWindow]:
    # three steady repeats of 400 TTFTs each, 1..400 ms, 101..500 ms and 201..600 ms, in send order, after a warm-up
    # of four requests of 10..40 ms
    return [_with(_rep(k, 2.0, 200, warmup_ttft=(10.0, 20.0, 30.0, 40.0)), np.arange(1.0, 401.0) + 100 * (k - 1))
            for k in (1, 2, 3)]


def test_the_ttft_percentiles_are_those_of_the_pooled_steady_windows() -> None:
    row = steady.steady_row(_group(), _spread(), SLO)
    pooled = np.concatenate([r.ttft_ms["steady"] for r in _spread()])
    assert row["steady_ttft_p50_ms"] == pytest.approx(np.percentile(pooled, 50))
    assert row["steady_ttft_p99_ms"] == pytest.approx(np.percentile(pooled, 99))
    assert row["steady_ttft_p99_ms"] < pooled.max() - 1
    assert row["steady_ttft_p999_ms"] == pytest.approx(np.percentile(pooled, 99.9))
    assert row["steady_ttft_p99_ms_lo"] < row["steady_ttft_p99_ms"] < row["steady_ttft_p99_ms_hi"]
    # the per-repeat list: each repeat's own median (the pooled one is another number)
    assert [p["steady_ttft_p50_ms"] for p in row["per_repeat"]] == pytest.approx([200.5, 300.5, 400.5])
    first = row["per_repeat"][0]
    assert sorted(first) == ["is_steady", "output_throughput", "repeat", "steady_ttft_p50_ms", "warmup_ttft_p50_ms"]
    assert (first["repeat"], first["is_steady"], first["output_throughput"]) == (1, True, pytest.approx(100.0))
    assert first["warmup_ttft_p50_ms"] == pytest.approx(25.0)


def test_the_goodput_share_and_its_ci_are_the_repeats_good_over_sent_in_percent() -> None:
    reps = [_with(_rep(k, 2.0, 200), np.full(100, 50.0), good=g) for k, g in ((1, 90), (2, 95), (3, 100))]
    row = steady.steady_row(_group(), reps, SLO)
    share = repeats.goodput_ci({1: (90, 100), 2: (95, 100), 3: (100, 100)})
    assert row["steady_goodput_pct"] == pytest.approx(95.0)
    assert (row["steady_goodput_pct_lo"], row["steady_goodput_pct_hi"]) == pytest.approx((100 * share.lo,
                                                                                          100 * share.hi))
    assert row["steady_goodput_pct_lo"] < 90 and row["steady_goodput_pct_hi"] == pytest.approx(100.0)
    assert row["steady_slo"] == "undecided"


@pytest.mark.parametrize("good,verdict", [(1000, "met"), (500, "missed")])
def test_the_goodput_slo_is_met_from_the_lower_bound_and_missed_from_the_upper(good: int, verdict: str) -> None:
    reps = [_with(_rep(k, 2.0, 200), np.full(1000, 50.0), good=good) for k in (1, 2, 3)]
    assert steady.steady_row(_group(), reps, SLO)["steady_slo"] == verdict


def test_the_measuring_side_counts_only_repeats_sglang_and_the_client_both_timed() -> None:
    spread = _spread()
    reps = [dataclasses.replace(spread[0], server_ttft=(50.0, 80.0, 10), client_headers_ms=20.0,
                                steady_headers_ms=np.arange(1.0, 201.0)),
            # SGLang counted no first token in this window: its client mean is no comparison
            dataclasses.replace(spread[1], server_ttft=(math.nan, 90.0, 0), client_headers_ms=30.0),
            # SGLang counted 5, the client none between the same ticks
            dataclasses.replace(spread[2], server_ttft=(40.0, math.nan, 5), client_headers_ms=math.nan)]
    row = steady.steady_row(_group(), reps, SLO)
    assert (row["server_ttft_mean_ms"], row["client_ttft_mean_ms"], row["server_ttft_n"]) == (50.0, 80.0, 10)
    assert row["client_headers_mean_ms"] == pytest.approx(20.0)
    assert row["client_headers_p99_ms"] == pytest.approx(np.percentile(np.arange(1.0, 201.0), 99))


def test_token_and_running_means_are_over_the_steady_repeats_that_measured_them() -> None:
    spread = _spread()
    reps = [dataclasses.replace(spread[0], tokens=(100.0, 10.0, 64.0), running=50.0),
            dataclasses.replace(spread[1], tokens=(200.0, 20.0, 32.0), running=60.0),
            dataclasses.replace(spread[2], tokens=(300.0, 30.0, math.nan), running=math.nan)]
    row = steady.steady_row(_group(), reps, SLO)
    assert (row["prompt_tokens_mean"], row["output_tokens_mean"], row["cached_tokens_mean"]) == (200.0, 20.0, 48.0)
    assert row["running_reqs_mean"] == 55.0


def test_prefix_hits_and_misses_are_the_medians_of_the_pooled_steady_requests() -> None:
    spread = _spread()
    reps = [dataclasses.replace(r, prefix=window.PrefixSplit(np.arange(1.0, 11.0) + 10 * k, np.arange(100.0, 104.0),
                                                              0)) for k, r in enumerate(spread, 1)]
    row = steady.steady_row(_group(), reps, SLO)
    hits = np.concatenate([np.arange(1.0, 11.0) + 10 * k for k in (1, 2, 3)])  # 11..40 ms, p50 25.5
    assert (row["hit_ttft_p50_ms"], row["hit_n"]) == (pytest.approx(np.percentile(hits, 50)), 30)
    assert (row["miss_ttft_p50_ms"], row["miss_n"]) == (pytest.approx(101.5), 12)


def test_a_poisson_points_unsteady_repeat_is_listed_with_its_phases_and_reasons() -> None:
    r = _rep(2, 4.0, 400, is_steady=False)
    r = dataclasses.replace(
        r, window=dataclasses.replace(r.window, phase=("warmup",) * 3 + ("steady",) * 5 + ("drain",) * 2),
        steadiness=dataclasses.replace(r.steadiness, reasons=("TTFT p50 drifted", "queue grew")))
    group = tables.Group("baseline", "chat", "qps", None, 8.0, 48, (), load.requests_from_records([]))
    (listed,) = steady.not_steady_rows([group], {group.key: [r]})
    assert (listed["load"], listed["repeat"], listed["requests"]) == ("8 req/s", 2, 10)
    assert (listed["warmup_n"], listed["drain_n"]) == (3, 2)
    assert listed["reasons"] == "TTFT p50 drifted; queue grew"
    assert steady.steady_row(group, _spread(), SLO)["load"] == "8 req/s"
    assert steady.steady_row(_group("burst", None), _spread(), SLO)["load"] == "all 48 at once"


def _rows_json(tmp_path) -> str:
    run = load.load_run(make_run(tmp_path, arms=ARMS[:2], n=48, repeats=3, torn=False))
    groups = tables.build_groups(run)
    windows = steady.window_groups(run, groups)
    return json.dumps([steady.steady_rows(groups, windows, SLO), steady.paired_rows(run, groups, windows, SLO)],
                      default=str)


def test_the_rows_are_the_same_on_every_call(tmp_path) -> None:
    assert _rows_json(tmp_path / "a") == _rows_json(tmp_path / "b")


def test_without_a_named_baseline_arms_are_paired_against_the_first_and_a_faster_arm_is_better() -> None:
    slow = [dataclasses.replace(r, window=dataclasses.replace(r.window, completed_output_tokens=200 + k))
            for k, r in enumerate(_spread())]
    fast = [dataclasses.replace(r, window=dataclasses.replace(r.window, completed_output_tokens=300 + 2 * k))
            for k, r in enumerate(_spread())]
    poisson = tables.Group("first", "chat", "qps", None, 8.0, 48, (), load.requests_from_records([]))
    groups = [dataclasses.replace(poisson, arm=arm) for arm in ("first", "second", "third")]
    # the third arm's repeats all failed (no windows); the second also ran a load the first did not
    groups.append(dataclasses.replace(poisson, arm="second", request_rate=16.0))
    windows = {groups[0].key: slow, groups[1].key: fast, groups[2].key: [], groups[3].key: fast}
    run = types.SimpleNamespace(arms=[types.SimpleNamespace(name=a, is_baseline=False)
                                      for a in ("first", "second", "third")])
    (row,) = steady.paired_rows(run, groups, windows, SLO)
    assert (row["arm"], row["baseline"], row["load"]) == ("second", "first", "8 req/s")
    assert row["output_throughput_pairs"] == 3 and row["output_throughput_verdict"] == "better"
    assert row["output_throughput_delta_pct"] > 40
