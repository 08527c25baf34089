"""Dollars per million output tokens: hand-worked prices, the CI inverted, nothing without a price, the cost card."""
from __future__ import annotations

import math

import pytest

from llmhost import cost, stats
from llmhost.report import kpis


def test_a_million_tokens_cost_the_hours_they_take():
    # $3.60/h at 1,000 tok/s: a million tokens take 1,000 s = 1/3.6 h, so they cost $1.00
    usd = cost.usd_per_million_tokens(3.60, stats.Interval(1000.0, math.nan, math.nan, 1))
    assert usd is not None and usd.value == pytest.approx(1.00) and not usd.has_ci and usd.n == 1
    # the H200 number: $3.50/h at 4,847 tok/s = 3.5 / (4847 * 3600) * 1e6
    h200 = cost.usd_per_million_tokens(3.50, stats.Interval(4847.0, 4700.0, 5000.0, 3))
    assert h200.value == pytest.approx(0.2006, abs=1e-4)


def test_the_upper_throughput_bound_gives_the_lower_cost():
    usd = cost.usd_per_million_tokens(3.60, stats.Interval(1000.0, 800.0, 1250.0, 3))
    assert (usd.value, usd.lo, usd.hi, usd.n) == pytest.approx((1.00, 0.80, 1.25, 3))  # 1250 tok/s -> $0.80


def test_a_throughput_ci_reaching_zero_leaves_the_cost_unbounded_above():
    usd = cost.usd_per_million_tokens(3.60, stats.Interval(1000.0, -200.0, 2200.0, 2))  # t CI over 2 repeats
    assert usd.hi == math.inf and usd.lo == pytest.approx(1000 / 2200)
    assert math.isnan(cost.usd_per_million_tokens(3.60, stats.Interval(math.nan, math.nan, math.nan, 0)).value)


def test_no_price_means_no_cost():
    assert cost.usd_per_million_tokens(None, stats.Interval(1000.0, 800.0, 1250.0, 3)) is None


def _row(conc: int, met: bool, tok_s: float, lo: float, hi: float) -> dict:
    return {"arm": "a", "workload": "w", "pattern": "concurrency", "concurrency": conc, "request_rate": None,
            "meets_slo": met, "client_bound": False, "points_ok": 3, "points_failed": 0, "repeats": 3,
            "point_errors": "", "requests": 256, "output_throughput": tok_s, "output_throughput_lo": lo,
            "output_throughput_hi": hi, "slo_decided": True, "goodput_pct": 100.0 if met else 50.0}


SWEEP = [_row(1, True, 100.0, 90.0, 110.0), _row(4, True, 1000.0, 800.0, 1250.0),
         _row(16, False, 3000.0, 2900.0, 3100.0)]


def test_the_cost_card_prices_the_highest_concurrency_within_the_slo():
    (row,) = kpis.cost_rows(SWEEP, ["a"], 3.60)
    assert row["concurrency"] == 4 and row["usd_per_m_output_tokens"] == pytest.approx(1.0)  # not c=16, which fails
    entry = kpis._cost([row], "a")
    assert entry.value == "w: $1.00 per M output tokens" and not entry.is_flagged
    assert entry.detail == "w: $1.00 [$0.80, $1.25] at c=4, 1,000 tok/s [800, 1,250] (all requests)"
    assert kpis.cost_rows(SWEEP, ["a"], None) == []


def test_the_cost_card_flags_a_workload_without_a_load_within_the_slo_and_keeps_two_significant_digits():
    rows = [_row(1, False, 100.0, 90.0, 110.0)]
    entry = kpis._cost(kpis.cost_rows(rows, ["a"], 3.60), "a")
    assert entry.value == "w: — per M output tokens" and entry.is_flagged and "no concurrency within" in entry.detail
    cheap = kpis._cost(kpis.cost_rows([_row(1, True, 25_000.0, math.nan, math.nan)], ["a"], 3.60), "a")
    assert cheap.value == "w: $0.040 per M output tokens" and "no CI: one repeat" in cheap.detail
    assert "no measured load failed" in cheap.detail  # capacity not bracketed: a higher load may cost less
