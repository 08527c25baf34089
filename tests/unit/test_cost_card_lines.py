"""What the dashboard's cost and capacity cards say, line by line, on hand-built sweep rows: the price and its source
in the question, an arm without a sweep, two workloads (one without a load within the SLO), a client-bound
capacity, a cost whose CI reaches zero throughput, the steady window's basis, and the capacity card's unbracketed,
failed and noisy sweeps."""
from __future__ import annotations

import math

import pytest

from llmhost import cost, stats
from llmhost.report import kpis
from test_cost import _row

PRICE = cost.GpuPrice(3.60, "GPU_HOURLY_USD, config.local.env:3")


def _with(row: dict, **fields) -> dict:
    return {**row, **fields}


def test_the_cost_card_names_the_price_and_its_source_and_an_arm_without_a_sweep_has_none() -> None:
    card = kpis._cost_card([_row(4, True, 1000.0, 800.0, 1250.0)], ["a", "b"], PRICE)
    assert card.title == "Cost per million output tokens"
    assert "$3.60 per GPU-hour (GPU_HOURLY_USD, config.local.env:3" in card.question
    (a, b) = card.entries
    assert (a.arm, a.value) == ("a", "w: $1.00 per M output tokens")
    assert (b.arm, b.value, b.is_flagged) == ("b", "—", False) and b.detail.startswith("no concurrency points")


def test_each_workload_is_priced_on_its_own_even_after_one_without_a_load_within_the_slo() -> None:
    rows = [_with(_row(1, False, 100.0, 90.0, 110.0), workload="chat"),
            _with(_row(4, True, 2000.0, 1800.0, 2200.0), workload="agent")]
    entry = kpis._cost(kpis.cost_rows(rows, ["a"], 3.60), "a")
    assert entry.value == "chat: — · agent: $0.50 per M output tokens" and entry.is_flagged is True
    assert entry.detail.startswith("chat: no concurrency within the SLO, so no cost at it; agent: $0.50 [$0.45, ")


def test_a_client_bound_capacity_is_flagged_with_what_the_server_could_do() -> None:
    row = _with(_row(4, True, 1000.0, 800.0, 1250.0), client_bound=True, basis="steady window")
    entry = kpis._cost(kpis.cost_rows([row], ["a"], 3.60), "a")
    assert entry.is_flagged is True
    assert entry.detail == ("w: $1.00 [$0.80, $1.25] at c=4, 1,000 tok/s [800, 1,250] (steady window) (no measured "
                            "load failed: a higher one may cost less) (client-bound: the server could do more)")


def test_a_throughput_ci_reaching_zero_leaves_the_cost_open_above() -> None:
    rows = [_row(4, True, 1000.0, -200.0, 2200.0), _row(8, False, 1500.0, 1400.0, 1600.0)]
    entry = kpis._cost(kpis.cost_rows(rows, ["a"], 3.60), "a")
    assert entry.detail.startswith("w: $1.00 [$0.45, ∞] at c=4, 1,000 tok/s [-200, 2,200] (all requests)")
    assert kpis.usd(math.nan) == "—" and kpis.usd(math.inf) == "∞" and kpis.usd(1234.5) == "$1,234.50"


def test_an_expensive_token_keeps_two_decimals_and_a_tiny_cost_two_significant_digits() -> None:
    dear = kpis._cost(kpis.cost_rows([_row(1, True, 10.0, 9.0, 11.0)], ["a"], 3.60), "a")
    assert dear.value == "w: $100.00 per M output tokens"  # 3.6 / (10 x 3600) x 1e6
    tiny = kpis._cost(kpis.cost_rows([_row(1, True, 1_000_000.0, 900_000.0, 1_100_000.0)], ["a"], 3.60), "a")
    assert tiny.value == "w: $0.0010 per M output tokens" and "[$0.0009, $0.0011]" in tiny.detail


def test_the_capacity_card_marks_an_unbracketed_sweep_and_a_workload_that_never_met_the_slo() -> None:
    rows = [_with(_row(1, True, 100.0, 90.0, 110.0), workload="chat"),
            _with(_row(4, True, 1000.0, 800.0, 1250.0), workload="chat"),
            _with(_row(1, False, 50.0, 40.0, 60.0), workload="agent"),
            _with(_row(4, False, 60.0, 50.0, 70.0), workload="agent")]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    assert value == "chat: 4+ · agent: none" and flagged is True
    assert detail == ("chat: no measured load failed; 1,000 tok/s at 4 (all requests); "
                      "agent: even 1 misses the SLO")
    assert kpis._capacity(rows[:2], "a", "concurrency")[2] is False


def test_the_capacity_card_names_a_client_bound_edge_a_noisy_sweep_and_a_failed_run() -> None:
    rows = [_row(1, True, 100.0, 90.0, 110.0), _with(_row(4, True, 1000.0, 800.0, 1250.0), client_bound=True),
            _row(8, False, 1500.0, 1400.0, 1600.0), _row(16, True, 1600.0, 1500.0, 1700.0),
            _with(_row(32, False, 0.0, 0.0, 0.0), points_failed=1, point_errors="server died")]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    assert value == "w: 4" and flagged is True
    assert detail == ("w: fails at 8; 1,000 tok/s at 4 (all requests) (the load generator could not offer 4: "
                      "client-bound) (a higher load passed again: noisy) (1 of 3 runs at 32 failed: server died)")
    assert kpis._capacity([], "a", "qps") == ("—", f"no qps points in this run — {kpis.FULL_RUN}", False)


@pytest.mark.parametrize("decided,pct,flagged", [(False, 98.5, True), (True, 98.5, False), (False, 97.9, False)])
def test_only_an_undecided_edge_within_one_point_of_the_slo_is_a_coin_flip(decided: bool, pct: float,
                                                                         flagged: bool) -> None:
    rows = [_row(1, True, 100.0, 90.0, 110.0),
            _with(_row(4, False, 1000.0, 800.0, 1250.0), slo_decided=decided, goodput_pct=pct, goodput_lo_pct=97.0,
                  goodput_hi_pct=99.5)]
    _, detail, is_flagged = kpis._capacity(rows, "a", "concurrency", slo_pct=99.0)
    assert is_flagged is flagged and ("straddles the SLO" in detail) is flagged


def test_a_throughput_below_one_token_a_second_still_has_a_price() -> None:
    slow = cost.usd_per_million_tokens(3.60, stats.Interval(0.5, 0.4, 0.6, 3))  # 3.6 / (0.5 x 3600) x 1e6
    assert slow.value == pytest.approx(2000.0) and slow.hi == pytest.approx(2500.0)
