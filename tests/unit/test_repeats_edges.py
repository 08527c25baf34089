"""Repeat statistics exactly at their edges: a CI that ends at zero, a small difference that still excludes it, an
SLO bound exactly at its limit, half a CI, a baseline of zero, a goodput repeat of one request, a share's CI held
inside 0..1, and the bootstrap CIs the same on every call (the dashboard's numbers do not move between renders)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost import repeats, stats

NAN = math.nan


@pytest.mark.parametrize("lo,hi", [(0.0, 2.0), (-2.0, 0.0)])
def test_a_ci_that_ends_exactly_at_zero_is_within_noise(lo: float, hi: float) -> None:
    assert repeats.verdict(stats.Difference((lo + hi) / 2, lo, hi, NAN, NAN, NAN), True) == "within noise"


def test_a_small_difference_whose_ci_excludes_zero_is_better_or_worse() -> None:
    d = stats.Difference(0.5, 0.1, 0.9, 5.0, 1.0, 9.0)
    assert repeats.verdict(d, is_higher_better=True) == "better"
    assert repeats.verdict(d, is_higher_better=False) == "worse"


@pytest.mark.parametrize("lo,hi", [(NAN, 0.9), (0.1, NAN)])
def test_half_a_ci_is_no_ci(lo: float, hi: float) -> None:
    assert repeats.verdict(stats.Difference(0.5, lo, hi, NAN, NAN, NAN), True) == "no CI"


@pytest.mark.parametrize("lo,hi,higher_better,limit,expected", [
    (99.0, 99.8, True, 99.0, "met"),  # the lower bound exactly at the limit meets it
    (98.0, 99.0, True, 99.0, "undecided"),  # the upper bound exactly at it does not miss it
    (200.0, 250.0, False, 250.0, "met"),  # a latency's upper bound exactly at the limit
    (250.0, 300.0, False, 250.0, "undecided"),
])
def test_an_slo_bound_exactly_at_its_limit(lo: float, hi: float, higher_better: bool, limit: float,
                                           expected: str) -> None:
    assert repeats.slo_verdict(stats.Interval((lo + hi) / 2, lo, hi, 3), limit, higher_better) == expected


def test_a_baseline_of_zero_has_an_absolute_difference_but_no_relative_one() -> None:
    d = repeats.paired_diff({1: 0.0, 2: 0.0, 3: 0.0}, {1: 2.1, 2: 2.0, 3: 1.9})
    assert d.delta == pytest.approx(2.0) and d.lo < 2.0 < d.hi
    assert math.isnan(d.rel_pct) and math.isnan(d.rel_lo) and math.isnan(d.rel_hi)
    assert repeats.verdict(d, True) == "better"


def test_one_pair_has_a_difference_and_no_interval() -> None:
    d = repeats.paired_diff({1: 10.0}, {1: 12.0})
    assert (d.delta, d.rel_pct) == pytest.approx((2.0, 20.0))
    assert all(math.isnan(x) for x in (d.lo, d.hi, d.rel_lo, d.rel_hi))


def test_a_half_width_around_zero_is_undefined() -> None:
    assert math.isnan(repeats.half_width_pct(stats.Interval(0.0, -1.0, 1.0, 3)))


def test_a_goodput_repeat_of_one_request_counts() -> None:
    ci = repeats.goodput_ci({1: (1, 1), 2: (0, 1), 3: (0, 0)})  # the third sent nothing: left out
    assert ci.value == pytest.approx(0.5) and ci.n == 2


def test_a_share_ci_stays_inside_zero_and_one() -> None:
    # two repeats, 100% and 50% good: the t interval (t(0.975, 1) = 12.7) runs far past both ends
    ci = repeats.goodput_ci({1: (10, 10), 2: (5, 10)})
    assert ci.value == pytest.approx(0.75) and (ci.lo, ci.hi) == (0.0, 1.0)
    assert repeats.goodput_ci({}).n == 0


def test_a_single_value_has_a_percentile_and_no_interval() -> None:
    ci = repeats.percentile_ci([np.array([120.0])], 99)
    assert ci.value == 120.0 and math.isnan(ci.lo) and math.isnan(ci.hi) and ci.n == 1


def test_percentile_cis_are_the_same_on_every_call() -> None:
    rng = np.random.default_rng(5)
    reps = [rng.gamma(2.0, 100.0, 300) for _ in range(3)]
    first, again = repeats.percentile_ci(reps, 99), repeats.percentile_ci(reps, 99)
    assert (first.lo, first.hi) == (again.lo, again.hi)
    one = [reps[0]]
    assert repeats.percentile_ci(one, 50) == repeats.percentile_ci(one, 50)
