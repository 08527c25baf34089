"""What the tuner's ranking counts at its edges and what it stores: a point too short for a steady window, requests
without a first token, one- and two-token answers, Poisson loads and points read past unranked ones, the defaults'
own row, the reason the defaults stay, the difference's text, tune.json's strict JSON, and a trial priced with the
warm pass a tune's boots pay."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from llmhost import stats
from llmhost.bench.costs import LOADGEN_START_S, WARM_ARM_EST_S, CostModel
from llmhost.tune import plan, rank, space
from llmhost.tune.rank import RepeatGoodput
from test_tuner_ranking_rules import ROWS, _closed_loop, _point

NAN = math.nan
SLO = stats.Slo(ttft_ms=500, itl_ms=100, pct=99)


def test_a_point_too_short_for_a_steady_window_has_no_goodput_and_is_not_steady():
    # 4 requests at c=2: the first wave and its refill, nothing between the c-th completion and the last send
    got = rank.repeat_goodput(_point(), _closed_loop(4, 2, 1000.0, 100.0, 11), SLO)
    assert math.isnan(got.goodput_rps) and math.isnan(got.good_tok_s)
    assert (got.good, got.steady) == (0, 0) and got.is_steady is False


def test_a_steady_repeat_says_so():
    assert rank.repeat_goodput(_point(), ROWS, SLO).is_steady is True


def test_a_request_that_failed_before_its_first_token_is_sent_but_never_good():
    rows = [dataclasses.replace(r, ok=False, error="reset", ttft_ms=None, output_tokens=0) if i == 4 else r
            for i, r in enumerate(ROWS)]
    got = rank.repeat_goodput(_point(), rows, SLO)
    assert (got.good, got.steady) == (6, 7) and got.goodput_rps == pytest.approx(2.0 * 6 / 7)


def test_a_one_token_answer_has_no_itl_to_miss_and_a_two_token_answer_has_one():
    # e2e 1000 ms after a 100 ms first token: one token has no gap after it; two tokens have a 900 ms one
    one = [dataclasses.replace(r, output_tokens=1) for r in ROWS]
    assert rank.repeat_goodput(_point(), one, SLO).good == 7
    two = [dataclasses.replace(r, output_tokens=2) for r in ROWS]
    assert rank.repeat_goodput(_point(), two, SLO).good == 0


def test_a_poisson_load_is_labelled_by_its_rate():
    poisson = dataclasses.replace(_point(pattern="qps", c=None), request_rate=0.5)
    assert rank.load_label(poisson) == "r0.5" and rank.load_label(_point(c=64)) == "c64"


def test_points_after_an_unranked_or_failed_one_are_still_read(tmp_path):
    (tmp_path / "requests").mkdir()
    burst = _point(pattern="burst", c=None)
    failed = dataclasses.replace(_point(repeat=2), status="failed")
    poisson = dataclasses.replace(_point(pattern="qps", c=None), request_rate=2.0)
    closed = _point()
    for p in (burst, failed, poisson, closed):
        (tmp_path / p.requests_file).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in ROWS))
    latest = {p.point_id: p for p in (burst, failed, poisson, closed)}
    measured = rank.goodput_by_repeat(tmp_path, latest, SLO)
    assert sorted(measured) == [("baseline", "c2"), ("baseline", "r2")]
    assert list(measured["baseline", "c2"]) == [1]  # the failed repeat 2 is not measured


def _reps(*values: float) -> dict[int, RepeatGoodput]:
    return {i + 1: RepeatGoodput(v, 100 * v, 10, 10, True) for i, v in enumerate(values)}


def test_the_defaults_row_is_the_reference_with_no_difference_to_itself():
    ranking = rank.rank({("baseline", "c2"): _reps(10, 11, 12), ("cps2048", "c2"): _reps(10.5, 11, 12.5)})
    row = next(r for r in ranking.rows if r.trial == "baseline")
    assert row.verdict == "reference" and math.isnan(row.vs_defaults.delta) and math.isnan(row.vs_defaults.lo)


def test_when_nothing_beats_the_defaults_the_reason_says_to_keep_them():
    ranking = rank.rank({("baseline", "c2"): _reps(10, 11, 12), ("cps2048", "c2"): _reps(10, 11.5, 11.5)})
    assert ranking.winner == "baseline"
    assert ranking.reason == "no trial beat the defaults beyond noise (paired 95% CI): keep the defaults"


@pytest.mark.parametrize("diff,text", [
    (stats.Difference(1.0, 0.5, 1.5, 10.0, 5.0, 15.0), "+10.0% [+5.0, +15.0]"),
    (stats.Difference(0.5, 0.1, 0.9, NAN, NAN, NAN), "+0.50 req/s [+0.10, +0.90]"),  # the defaults' goodput was 0
    (stats.Difference(0.5, 0.1, NAN, NAN, NAN, NAN), "-"),
    (stats.Difference(0.5, NAN, 0.9, NAN, NAN, NAN), "-"),
    (stats.Difference(0.5, NAN, NAN, NAN, NAN, NAN), "-"),
])
def test_a_difference_is_relative_absolute_where_the_defaults_were_zero_or_a_dash(diff, text):
    assert rank.diff_text(diff) == text


@pytest.mark.parametrize("lo,hi", [(NAN, 1.0), (0.5, NAN)])
def test_a_paired_difference_with_half_a_ci_has_no_verdict(lo, hi):
    assert rank.paired_verdict(stats.Difference(0.7, lo, hi, NAN, NAN, NAN)) == "no CI"


def test_the_stored_ranking_is_strict_json_with_nan_as_null_and_infinity_as_text():
    ranking = rank.rank({("baseline", "c2"): _reps(10, 11, 12), ("cps2048", "c2"): _reps(12, 13, 14)})
    inf_row = dataclasses.replace(ranking.rows[0], usd_per_m=stats.Interval(math.inf, 1.0, math.inf, 3))
    stored = rank.to_json(dataclasses.replace(ranking, rows=[inf_row, *ranking.rows[1:]]))
    back = json.loads(json.dumps(stored, allow_nan=False))
    assert back["winner"] == "cps2048" and back["reason"].startswith("cps2048: goodput +")
    first, defaults = back["rows"]
    assert first["trial"] == "cps2048" and first["goodput"]["value"] == pytest.approx(13.0)
    assert first["usd_per_m"] == {"value": "inf", "lo": 1.0, "hi": "inf", "n": 3}
    assert defaults["trial"] == "baseline" and defaults["verdict"] == "reference"
    assert defaults["vs_defaults"]["delta"] is None and defaults["usd_per_m"] is None


def test_an_uncalibrated_trial_is_priced_with_the_warm_pass_a_tunes_boots_pay():
    # no boot learned from a run: the restart (or the load generator's start, if longer) plus the warm pass
    model = CostModel(per_request_s={((), ("chat", "concurrency", 8, None)): 0.5}, ready_s=40.0)
    trial = next(t for t in space.coarse_trials(space.SPACE) if t.name == "baseline")
    boot = max(40.0, LOADGEN_START_S) + WARM_ARM_EST_S
    assert plan.trial_s(trial, [("chat", "concurrency", 8, None, 40)], 1, model) == pytest.approx(boot + 4.5 + 20)
