"""llmhost.stats on hand-made inputs: percentile definition, sufficiency rule, bootstrap CIs, goodput, capacity."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from llmhost import stats

SLO = stats.Slo(ttft_ms=100.0, itl_ms=10.0, pct=90.0)


def test_percentile_interpolates_linearly_between_ranks() -> None:
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.percentile([1, 2, 3, 4], 0) == 1.0
    assert stats.percentile([1, 2, 3, 4], 100) == 4.0
    assert stats.percentile([10, 20], 99) == pytest.approx(19.9)


def test_percentile_drops_missing_values_and_is_nan_when_empty() -> None:
    assert stats.percentile([None, 3.0, float("nan"), 1.0], 50) == 2.0
    assert math.isnan(stats.percentile([], 50))
    assert math.isnan(stats.percentile([None], 99))


def test_sufficiency_needs_ten_samples_beyond_the_percentile() -> None:
    assert stats.needed_samples(50) == 20
    assert stats.needed_samples(99) == 1000
    assert stats.needed_samples(99.9) == 10_000  # not 10,001: float 1 - 0.999 is rounded away
    assert stats.is_sufficient(1000, 99) and not stats.is_sufficient(999, 99)
    assert stats.is_sufficient(10_000, 99.9) and not stats.is_sufficient(9_999, 99.9)
    with pytest.raises(ValueError):
        stats.needed_samples(100)


def test_percentile_summary_flags_too_few_samples() -> None:
    summary = stats.percentile_summary(np.arange(1000.0), (50.0, 99.0, 99.9))
    assert summary[50.0].is_sufficient and summary[99.0].is_sufficient
    assert not summary[99.9].is_sufficient and summary[99.9].needed_n == 10_000
    assert summary[99.0].value == pytest.approx(np.percentile(np.arange(1000.0), 99))
    assert summary[99.0].lo <= summary[99.0].value <= summary[99.0].hi


def test_bootstrap_ci_is_reproducible_with_a_seed_and_changes_without() -> None:
    x = np.random.default_rng(1).lognormal(3, 0.5, 300)
    a = stats.bootstrap_ci(x, 99.0, seed=7)
    assert a == stats.bootstrap_ci(x, 99.0, seed=7)
    assert (a.lo, a.hi) != (stats.bootstrap_ci(x, 99.0, seed=8).lo, stats.bootstrap_ci(x, 99.0, seed=8).hi)


def test_shared_resamples_give_the_same_cis_as_separate_calls() -> None:
    x = np.random.default_rng(2).exponential(50, 400)
    both = stats.bootstrap_cis(x, [50.0, 99.0], seed=3)
    assert both[0] == stats.bootstrap_ci(x, 50.0, seed=3)
    assert both[1] == stats.bootstrap_ci(x, 99.0, seed=3)


def test_bootstrap_ci_of_the_mean_covers_the_truth_near_the_nominal_rate() -> None:
    # 1,500 seeded simulations: the coverage's standard error is sqrt(0.95 * 0.05 / 1500) = 0.56 points, so a 90%
    # interval (~0.89) or a 99% one (~0.99) falls outside the band; the percentile bootstrap at n = 100 runs ~1
    # point narrow (it uses sd with ddof 0 and z instead of t), hence 0.925 rather than 0.93 below.
    rng = np.random.default_rng(0)
    trials, covered = 1500, 0
    for i in range(trials):
        ci = stats.bootstrap_ci(rng.normal(10.0, 2.0, 100), "mean", seed=i)
        covered += ci.lo <= 10.0 <= ci.hi
    assert 0.925 <= covered / trials <= 0.97


def test_bootstrap_ci_of_the_mean_has_the_width_of_a_95_percent_interval() -> None:
    # n = 20,000 normal values, sd 2: the 95% CI of the mean is +-1.96 * 2 / sqrt(20000) = +-0.0277 wide; a 90%
    # interval would be +-0.0233 (1.645 instead of 1.96).
    x = np.random.default_rng(8).normal(10.0, 2.0, 20_000)
    ci = stats.bootstrap_ci(x, "mean", n_boot=2000, seed=1)
    half = 1.959964 * x.std(ddof=1) / math.sqrt(x.size)
    assert (ci.hi - ci.lo) / 2 == pytest.approx(half, rel=0.06)
    assert ci.lo < ci.value < ci.hi and ci.value == pytest.approx(x.mean())


def test_ci_narrows_as_samples_grow_and_is_absent_for_one_sample() -> None:
    rng = np.random.default_rng(5)
    small = stats.bootstrap_ci(rng.normal(0, 1, 50), "mean")
    large = stats.bootstrap_ci(rng.normal(0, 1, 5000), "mean")
    assert (large.hi - large.lo) < (small.hi - small.lo) / 5
    one = stats.bootstrap_ci([4.2], "mean")
    assert one.value == 4.2 and not one.has_ci and one.n == 1


def test_difference_of_identical_distributions_is_within_noise() -> None:
    rng = np.random.default_rng(11)
    d = stats.bootstrap_diff(rng.normal(100, 10, 400), rng.normal(100, 10, 400), 50.0)
    assert d.has_ci and d.is_within_noise
    assert d.lo < 0 < d.hi


def test_a_real_shift_is_outside_noise_with_the_right_sign_and_size() -> None:
    rng = np.random.default_rng(12)
    a, b = rng.normal(100, 10, 400), rng.normal(80, 10, 400)
    d = stats.bootstrap_diff(a, b, "mean")
    assert not d.is_within_noise
    assert d.rel_pct == pytest.approx(-20, abs=3) and d.rel_hi < 0
    assert d.lo < d.delta < d.hi < 0


def test_difference_without_enough_samples_has_no_ci_and_counts_as_noise() -> None:
    d = stats.bootstrap_diff([1000.0], [1200.0], "mean")
    assert d.rel_pct == pytest.approx(20.0) and not d.has_ci and d.is_within_noise
    assert math.isnan(stats.bootstrap_diff([], [1.0], "mean").delta)


def test_goodput_counts_requests_meeting_both_limits_among_all_sent() -> None:
    ok = np.array([True, True, True, True, False])
    ttft = np.array([50.0, 150.0, 80.0, 100.0, np.nan])
    itl = np.array([5.0, 5.0, 12.0, np.nan, np.nan])  # nan ITL = single-token answer: passes the ITL limit
    assert stats.good_mask(ok, ttft, itl, SLO).tolist() == [True, False, False, True, False]
    assert stats.goodput_share(ok, ttft, itl, SLO) == pytest.approx(0.4)


def test_goodput_counts_failed_requests_as_sent_and_not_good() -> None:
    # a failed request may still have streamed a fast first token before it broke
    ok = np.array([True, True, False, False])
    fast = np.array([50.0, 50.0, 50.0, 50.0])
    smooth = np.array([5.0, 5.0, 5.0, 5.0])
    assert stats.good_mask(ok, fast, smooth, SLO).tolist() == [True, True, False, False]
    assert stats.goodput_share(ok, fast, smooth, SLO) == pytest.approx(0.5)  # 2 good of 4 sent, not 2 of 2 ok
    assert math.isnan(stats.goodput_share(np.array([], bool), np.array([]), np.array([]), SLO))


def test_a_request_exactly_at_either_limit_is_good_and_just_over_is_not() -> None:
    ok = np.array([True, True, True, True])
    ttft = np.array([100.0, 50.0, 100.0001, 50.0])
    itl = np.array([5.0, 10.0, 5.0, 10.0001])
    assert stats.good_mask(ok, ttft, itl, SLO).tolist() == [True, True, False, False]


def test_a_completed_request_without_ttft_is_not_good() -> None:
    assert not stats.good_mask(np.array([True]), np.array([np.nan]), np.array([1.0]), SLO)[0]


def test_meets_slo_at_exactly_the_required_share() -> None:
    assert stats.meets_slo(0.9, SLO)
    assert not stats.meets_slo(0.8999, SLO)
    assert not stats.meets_slo(math.nan, SLO)


def test_capacity_is_bounded_below_when_every_load_passes() -> None:
    cap = stats.max_load_within_slo({1: True, 4: True, 16: True})
    assert cap.load == 16 and not cap.is_bracketed and cap.first_failing is None and cap.is_monotonic


def test_capacity_is_the_load_before_the_first_failure() -> None:
    cap = stats.max_load_within_slo({16: False, 1: True, 4: True, 64: False})
    assert cap.load == 4 and cap.first_failing == 16 and cap.is_bracketed and cap.is_monotonic


def test_a_pass_above_a_failure_is_not_trusted() -> None:
    cap = stats.max_load_within_slo({1: True, 4: False, 16: True})
    assert cap.load == 1 and cap.first_failing == 4 and not cap.is_monotonic


def test_capacity_is_none_when_even_the_lowest_load_fails_or_nothing_ran() -> None:
    cap = stats.max_load_within_slo({2.0: False, 8.0: True})
    assert cap.load is None and cap.first_failing == 2.0
    assert stats.max_load_within_slo({}).load is None


@pytest.mark.parametrize("repeats", [2, 3, 5])
def test_per_repeat_intervals_cover_the_truth_at_the_nominal_rate(repeats: int) -> None:
    """A bootstrap over 2-3 repeats covered ~53-73% (simulated): the Student-t interval must cover ~95%."""
    rng = np.random.default_rng(1)
    trials = 2000
    hits = 0
    for _ in range(trials):
        ci = stats.mean_ci_over_repeats(rng.normal(5000, 150, repeats))
        hits += ci.lo <= 5000 <= ci.hi
    assert 0.93 <= hits / trials <= 0.97
    false_calls = sum(not stats.welch_diff(rng.normal(5000, 150, repeats), rng.normal(5000, 150, repeats)).is_within_noise
                      for _ in range(trials))
    assert false_calls / trials <= 0.06  # equal arms are called better/worse at most ~5% of the time


def test_per_repeat_mean_ci_is_the_95_percent_student_t_interval() -> None:
    # [1..5]: mean 3, s = sqrt(2.5) = 1.5811, t(0.975, 4) = 2.776 -> half = 2.776 * 1.5811 / sqrt(5) = 1.9629
    ci = stats.mean_ci_over_repeats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (ci.value, ci.n) == (3.0, 5)
    assert ci.lo == pytest.approx(3.0 - 1.9629, abs=1e-3) and ci.hi == pytest.approx(3.0 + 1.9629, abs=1e-3)


def test_welch_uses_the_satterthwaite_degrees_of_freedom_with_unequal_sizes_and_variances() -> None:
    # a: 8 repeats tightly around 100 (s^2/n = 0.04607); b: 3 repeats 110, 130, 90 (s^2 = 400, s^2/n = 133.33).
    # se = sqrt(0.04607 + 133.33) = 11.549; Welch df = 133.38^2 / (0.04607^2 / 7 + 133.33^2 / 2) = 2.0014 -> t(2) =
    # 4.303, half = 49.69. Pooled variances with df = 9 would give se 6.393, t 2.262, half 14.46.
    a = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]
    d = stats.welch_diff(a, [110.0, 130.0, 90.0])
    assert d.delta == pytest.approx(10.0) and d.rel_pct == pytest.approx(10.0)
    assert d.lo == pytest.approx(10.0 - 49.69, abs=0.02) and d.hi == pytest.approx(10.0 + 49.69, abs=0.02)
    assert d.rel_lo == pytest.approx(d.lo) and d.rel_hi == pytest.approx(d.hi)  # over mean(a) = 100
    assert d.is_within_noise
    swapped = stats.welch_diff([110.0, 130.0, 90.0], a)
    assert swapped.lo == pytest.approx(-10.0 - 49.69, abs=0.02) and swapped.rel_pct == pytest.approx(-100 / 11)


def test_wilson_interval_of_all_good_still_admits_a_lower_share() -> None:
    # 16 of 16 good: centre (1 + z^2/32) / (1 + z^2/16), half z * sqrt(z^2 / 1024) / (1 + z^2/16) -> [0.8064, 1]
    ci = stats.wilson_ci(16, 16)
    assert ci.value == 1.0 and ci.hi == 1.0 and ci.lo == pytest.approx(0.8064, abs=1e-4)
    # 8 of 16: centre 0.5, half 1.96 * sqrt(0.25 / 16 + 3.8415 / 1024) / 1.2401 = 0.2200
    half = stats.wilson_ci(8, 16)
    assert half.lo == pytest.approx(0.2800, abs=1e-4) and half.hi == pytest.approx(0.7200, abs=1e-4)
    assert math.isnan(stats.wilson_ci(0, 0).value)


def test_the_slo_verdict_is_decided_only_when_the_interval_clears_the_target() -> None:
    slo = stats.Slo(ttft_ms=100.0, itl_ms=10.0, pct=80.0)
    assert stats.slo_decided(stats.wilson_ci(16, 16), slo)  # [80.6, 100] lies above 80
    assert not stats.slo_decided(stats.wilson_ci(14, 16), slo)  # [64.0, 96.5] straddles 80
    assert stats.slo_decided(stats.wilson_ci(2, 16), slo)  # wholly below
    assert not stats.slo_decided(stats.Interval(0.9, math.nan, math.nan, 1), slo)


def test_welch_finds_a_clear_throughput_gain_and_has_no_ci_for_one_repeat() -> None:
    d = stats.welch_diff([5000, 5040, 4980], [6000, 6050, 5990])
    assert not d.is_within_noise and d.lo > 0 and 19 < d.rel_pct < 21 and d.rel_lo < d.rel_pct < d.rel_hi
    one = stats.welch_diff([5000], [6000, 6100])
    assert one.rel_pct == pytest.approx(21.0) and not one.has_ci
    assert not stats.mean_ci_over_repeats([5000.0]).has_ci
    assert stats.t975(2) == 4.303 and abs(stats.t975(31) - 2.0395) < 1e-3 and abs(stats.t975(1000) - 1.9623) < 1e-3


def test_too_few_repeats_give_exact_empty_and_single_answers() -> None:
    empty = stats.mean_ci_over_repeats([])
    assert math.isnan(empty.value) and not empty.has_ci and empty.n == 0
    one = stats.mean_ci_over_repeats([7.0, math.nan])  # nan dropped: one repeat, no CI
    assert (one.value, one.n) == (7.0, 1) and math.isnan(one.lo) and math.isnan(one.hi)
    two = stats.mean_ci_over_repeats([1.0, 3.0])  # t(0.975, 1) = 12.706, s = sqrt(2), half = 12.706
    assert two.n == 2 and two.lo == pytest.approx(2.0 - 12.706) and two.hi == pytest.approx(2.0 + 12.706)


def test_welch_without_enough_repeats_on_either_side_has_a_delta_but_no_ci() -> None:
    assert all(math.isnan(v) for v in dataclasses.astuple(stats.welch_diff([], [1.0, 2.0])))
    assert all(math.isnan(v) for v in dataclasses.astuple(stats.welch_diff([1.0, 2.0], [])))
    for a, b in (([100.0], [110.0, 130.0]), ([100.0, 100.0], [120.0])):
        d = stats.welch_diff(a, b)
        assert d.delta == pytest.approx(np.mean(b) - np.mean(a)) and not d.has_ci
        assert math.isnan(d.lo) and math.isnan(d.hi) and d.rel_pct == pytest.approx(100 * d.delta / np.mean(a))
    zero = stats.welch_diff([0.0, 0.0], [1.0, 2.0])  # no relative change from a zero baseline
    assert math.isnan(zero.rel_pct) and math.isnan(zero.rel_lo) and zero.lo < zero.delta < zero.hi
    same = stats.welch_diff([5.0, 5.0], [5.0, 5.0])  # no spread at all: a zero-width CI at 0
    assert (same.delta, same.lo, same.hi) == (0.0, 0.0, 0.0)


def test_bootstrap_differences_need_two_samples_a_side_and_a_nonzero_baseline_for_percent() -> None:
    assert all(math.isnan(v) for v in dataclasses.astuple(stats.bootstrap_diff([], [1.0, 2.0], "mean")))
    for a, b in (([10.0], [12.0, 14.0]), ([10.0, 12.0], [14.0])):
        d = stats.bootstrap_diff(a, b, "mean")
        assert d.delta == pytest.approx(np.mean(b) - np.mean(a)) and not d.has_ci
        assert math.isnan(d.lo) and math.isnan(d.hi) and math.isnan(d.rel_hi)
        assert d.rel_pct == pytest.approx(100 * (np.mean(b) / np.mean(a) - 1))
    two = stats.bootstrap_diff([10.0, 12.0], [14.0, 16.0], "mean", seed=1)  # two a side is enough for a CI
    assert two.has_ci and two.lo <= two.delta <= two.hi
    zero = stats.bootstrap_diff([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], "mean")
    assert math.isnan(zero.rel_pct) and zero.delta == 2.0 and not zero.has_ci


def test_bootstrap_difference_cis_follow_conf_and_the_relative_ci_is_b_over_a() -> None:
    rng = np.random.default_rng(21)
    a, b = rng.normal(100, 10, 300), rng.normal(110, 10, 300)
    wide = stats.bootstrap_diff(a, b, "mean", seed=2)
    narrow = stats.bootstrap_diff(a, b, "mean", conf=0.5, seed=2)
    # 95% of a normal difference: +-1.96 * sqrt(100/300 + 100/300) = +-1.60; 50%: +-0.674 * 0.816 = +-0.55
    assert (wide.hi - wide.lo) / 2 == pytest.approx(1.96 * math.sqrt(2 * 100 / 300), rel=0.12)
    assert (narrow.hi - narrow.lo) / 2 == pytest.approx(0.674 * math.sqrt(2 * 100 / 300), rel=0.15)
    # relative: ~ the absolute CI over mean(a) ~ 100, in percent
    assert wide.rel_lo == pytest.approx(100 * wide.lo / a.mean(), abs=0.3)
    assert wide.rel_hi == pytest.approx(100 * wide.hi / a.mean(), abs=0.3)
    assert stats.bootstrap_diff(a, b, "mean") == stats.bootstrap_diff(a, b, "mean", seed=0)  # 0 is the default
    assert wide != stats.bootstrap_diff(a, b, "mean", seed=3)


def test_the_t_table_ends_at_30_degrees_of_freedom_where_the_expansion_takes_over() -> None:
    assert stats.t975(30) == 2.042 and stats.t975(0.5) == 12.706 and stats.t975(2.9) == 4.303
    assert stats.t975(31) == pytest.approx(2.039513, abs=1e-4)  # t(0.975, 31), R: qt(0.975, 31)
    assert stats.t975(1000) == pytest.approx(1.962339, abs=1e-6)
