"""Repeat statistics on hand-made inputs: paired differences, verdicts, SLO calls, block resampling and the pooled
percentile read off resampled repeats."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost import repeats, stats


def test_paired_diff_matches_a_hand_computed_paired_t_interval() -> None:
    a = {0: 100.0, 1: 110.0, 2: 90.0}
    b = {0: 105.0, 1: 114.0, 2: 96.0}  # d = 5, 4, 6: mean 5, sd 1
    d = repeats.paired_diff(a, b)
    half = 4.303 * 1.0 / math.sqrt(3)
    assert (d.delta, d.lo, d.hi) == pytest.approx((5.0, 5 - half, 5 + half))
    assert (d.rel_pct, d.rel_lo, d.rel_hi) == pytest.approx((5.0, 5 - half, 5 + half))  # mean(a) = 100
    assert repeats.verdict(d, is_higher_better=True) == "better"
    assert repeats.verdict(d, is_higher_better=False) == "worse"


def test_pairs_are_matched_by_repeat_index_and_unpaired_or_missing_repeats_are_left_out() -> None:
    d = repeats.paired_diff({0: 10.0, 1: 12.0, 2: math.nan, 3: 9.0}, {1: 13.0, 0: 11.0, 2: 5.0, 4: 1.0})
    assert d.delta == pytest.approx(1.0) and d.lo == d.hi == pytest.approx(1.0)  # d = 1, 1: zero spread
    one = repeats.paired_diff({0: 10.0}, {0: 12.0})
    assert one.delta == 2.0 and repeats.verdict(one, True) == "no CI"
    assert repeats.verdict(repeats.paired_diff({0: 1.0}, {1: 1.0}), True) == "no data"


def test_a_ci_that_includes_zero_is_within_noise() -> None:
    d = repeats.paired_diff({0: 100.0, 1: 100.0, 2: 100.0}, {0: 103.0, 1: 97.0, 2: 101.0})
    assert d.lo < 0 < d.hi and repeats.verdict(d, True) == "within noise"


@pytest.mark.parametrize("lo, hi, higher_better, limit, expected", [
    (99.2, 99.8, True, 99.0, "met"),  # goodput: its lower bound meets 99%
    (98.5, 99.8, True, 99.0, "undecided"),
    (97.0, 98.9, True, 99.0, "missed"),
    (180.0, 240.0, False, 250.0, "met"),  # a latency: its upper bound is within the limit
    (180.0, 260.0, False, 250.0, "undecided"),
    (255.0, 300.0, False, 250.0, "missed"),
])
def test_an_slo_is_met_only_when_the_conservative_bound_meets_it(lo: float, hi: float, higher_better: bool,
                                                                 limit: float, expected: str) -> None:
    ci = stats.Interval((lo + hi) / 2, lo, hi, 3)
    assert repeats.slo_verdict(ci, limit, higher_better) == expected


def test_an_slo_without_a_ci_is_no_data_not_met() -> None:
    assert repeats.slo_verdict(stats.Interval(99.9, math.nan, math.nan, 1), 99.0, True) == "no data"


def test_block_resamples_are_made_of_contiguous_runs_of_the_original() -> None:
    values = np.arange(40.0)
    out = repeats.resample_blocks(values, 4, 50, np.random.default_rng(0))
    assert out.shape == (50, 40)
    blocks = out.reshape(50, 4, 10)
    assert (np.diff(blocks, axis=2) == 1).all() and set(blocks[:, :, 0].ravel()) <= {0.0, 10.0, 20.0, 30.0}


def test_pooled_percentiles_of_resampled_repeats_equal_percentiles_of_the_concatenation() -> None:
    rng = np.random.default_rng(0)
    reps = [rng.normal(size=n) for n in (50, 70, 33)]
    counts = np.array([[1, 1, 1], [3, 0, 0], [0, 2, 1], [2, 0, 1]])
    for pct in (0.0, 12.5, 50.0, 99.0, 100.0):
        want = [np.percentile(np.concatenate([reps[j] for j in range(3) for _ in range(c[j])]), pct) for c in counts]
        assert repeats.pooled_percentiles(reps, counts, pct) == pytest.approx(want)


def test_percentile_ci_pools_the_repeats_and_widens_when_they_disagree() -> None:
    rng = np.random.default_rng(1)
    same = [rng.normal(100, 5, 200) for _ in range(3)]
    apart = [rng.normal(m, 5, 200) for m in (90, 100, 110)]
    a, b = repeats.percentile_ci(same, 50), repeats.percentile_ci(apart, 50)
    assert a.value == pytest.approx(np.percentile(np.concatenate(same), 50)) and a.n == 3
    assert a.lo < a.value < a.hi and (b.hi - b.lo) > 4 * (a.hi - a.lo)


def test_one_repeat_gets_the_within_run_ci_and_no_data_gets_none() -> None:
    one = repeats.percentile_ci([np.arange(100.0)], 50)
    assert one.n == 1 and one.lo < 49.5 < one.hi
    assert repeats.percentile_ci([np.array([]), np.array([math.nan])], 50).n == 0
    assert repeats.across_repeats({0: 1.0, 1: 3.0}).value == 2.0


def test_goodput_of_all_good_repeats_keeps_the_wilson_doubt_and_meets_the_slo_only_from_its_lower_bound() -> None:
    perfect = repeats.goodput_ci({0: (16, 16), 1: (16, 16), 2: (16, 16)})
    assert perfect.value == 1.0 and perfect.lo == pytest.approx(stats.wilson_ci(48, 48).lo) and perfect.n == 3
    pct = stats.Interval(100 * perfect.value, 100 * perfect.lo, 100 * perfect.hi, 3)
    assert repeats.slo_verdict(pct, 99.0, is_higher_better=True) == "undecided"  # 48 of 48 cannot show 99%
    spread = repeats.goodput_ci({0: (990, 1000), 1: (900, 1000), 2: (995, 1000), 3: (0, 0)})
    assert spread.n == 3 and spread.lo < stats.wilson_ci(2885, 3000).lo  # the spread between repeats dominates
    assert math.isnan(repeats.goodput_ci({0: (0, 0)}).value)


def test_half_width_is_a_share_of_the_value_and_undefined_without_a_ci() -> None:
    assert repeats.half_width_pct(stats.Interval(200.0, 194.0, 206.0, 3)) == pytest.approx(3.0)
    assert math.isnan(repeats.half_width_pct(stats.Interval(200.0, math.nan, math.nan, 1)))
