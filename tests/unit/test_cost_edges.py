"""Cost at the edges of a throughput CI: a bound exactly at 0 tok/s buys no tokens (infinite cost), a bound
below 0 likewise, and the point estimate is the cost at the mean throughput."""
from __future__ import annotations

import math

import pytest

from llmhost import cost, stats


def test_a_throughput_bound_exactly_at_zero_gives_an_unbounded_cost() -> None:
    """$3.60/h, 1,000 tok/s [0, 2,000]: the cost is $1.00 [$0.50, inf]."""
    usd = cost.usd_per_million_tokens(3.60, stats.Interval(1000.0, 0.0, 2000.0, 2))
    assert usd.value == pytest.approx(1.0) and usd.lo == pytest.approx(0.5) and usd.hi == math.inf and usd.n == 2


def test_no_throughput_at_all_costs_infinitely_much() -> None:
    assert cost.usd_per_million_tokens(3.60, stats.Interval(0.0, math.nan, math.nan, 1)).value == math.inf


def test_the_cost_is_taken_at_the_mean_throughput_not_averaged_over_repeats() -> None:
    """Repeats at 500 and 1,500 tok/s: the mean 1,000 tok/s costs $1.00 at $3.60/h (the mean of the two repeats'
    costs, $2.00 and $0.67, would be $1.33)."""
    usd = cost.usd_per_million_tokens(3.60, stats.mean_ci_over_repeats([500.0, 1500.0]))
    assert usd.value == pytest.approx(1.0)
    assert usd.hi == math.inf  # t(0.975, 1) x 707 / sqrt(2) = 6,353: the lower throughput bound is below 0
