"""Verdicts at their edges: a CI that touches 0 is within noise, an SLO bound exactly at its limit meets it (and an
optimistic bound exactly at it does not miss it), and a zero baseline still gets a verdict from the absolute CI."""
from __future__ import annotations

import math

import pytest

from llmhost import repeats, stats


@pytest.mark.parametrize("lo, hi", [(0.0, 10.0), (-10.0, 0.0)])
def test_a_difference_ci_with_a_bound_exactly_at_zero_is_within_noise(lo: float, hi: float) -> None:
    """'The CI excludes 0' is strict: a bound on 0 still includes it."""
    d = stats.Difference((lo + hi) / 2, lo, hi, (lo + hi) / 2, lo, hi)
    assert repeats.verdict(d, is_higher_better=True) == "within noise"
    assert repeats.verdict(d, is_higher_better=False) == "within noise"


def test_a_difference_ci_just_off_zero_is_called() -> None:
    d = stats.Difference(5.0, 0.001, 10.0, 5.0, 0.001, 10.0)
    assert repeats.verdict(d, is_higher_better=True) == "better"
    assert repeats.verdict(d, is_higher_better=False) == "worse"


def test_a_zero_baseline_has_no_relative_change_but_its_absolute_ci_still_decides() -> None:
    """Goodput 0 -> 10, 12, 11 req/s over 3 paired repeats: d = 10, 12, 11, mean 11, sd 1, t(2) = 4.303, so the
    CI is 11 +- 4.303 / sqrt(3) = [8.52, 13.48]: it excludes 0, though no percentage exists from a 0 baseline."""
    d = repeats.paired_diff({0: 0.0, 1: 0.0, 2: 0.0}, {0: 10.0, 1: 12.0, 2: 11.0})
    half = 4.303 / math.sqrt(3)
    assert (d.delta, d.lo, d.hi) == pytest.approx((11.0, 11.0 - half, 11.0 + half))
    assert math.isnan(d.rel_pct) and math.isnan(d.rel_lo) and math.isnan(d.rel_hi)
    assert repeats.verdict(d, is_higher_better=True) == "better"
    assert repeats.verdict(d, is_higher_better=False) == "worse"
    same = repeats.paired_diff({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: -1.0, 2: 0.0})  # CI [-2.48, 2.48]
    assert repeats.verdict(same, is_higher_better=True) == "within noise"


@pytest.mark.parametrize("lo, hi, higher_better, limit, expected", [
    (99.0, 99.8, True, 99.0, "met"),  # goodput: lower bound exactly on the target
    (98.0, 99.0, True, 99.0, "undecided"),  # upper bound exactly on it: the target is still reachable
    (180.0, 250.0, False, 250.0, "met"),  # a latency: upper bound exactly on the limit
    (250.0, 300.0, False, 250.0, "undecided"),  # lower bound exactly on it: still reachable
])
def test_an_slo_bound_exactly_on_the_limit_counts_as_meeting_it(lo: float, hi: float, higher_better: bool,
                                                                limit: float, expected: str) -> None:
    ci = stats.Interval((lo + hi) / 2, lo, hi, 3)
    assert repeats.slo_verdict(ci, limit, higher_better) == expected
