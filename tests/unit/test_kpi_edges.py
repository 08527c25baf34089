"""KPI cards against their documented rules: the tail cards' common point and the capacity card's edge flags."""
from __future__ import annotations

from llmhost import stats
from llmhost.report import kpis


def _sweep_row(arm: str, wl: str, conc: int, points_ok: int = 1) -> dict:
    return {"arm": arm, "workload": wl, "pattern": "concurrency", "concurrency": conc, "points_ok": points_ok,
            "requests": 48 if points_ok else 0, "meets_slo": True, "ttft_n": 48}


def test_the_reference_point_is_one_every_arm_with_data_ran():
    # fp8's agent point failed outright: agent c=16 is not a point every arm ran, chat c=16 is
    rows = [_sweep_row("base", "agent", 16), _sweep_row("base", "chat", 16),
            _sweep_row("fp8", "agent", 16, points_ok=0), _sweep_row("fp8", "chat", 16)]
    assert kpis.reference_point(rows) == ("chat", 16)
    assert kpis.tail_row(rows, "base")["workload"] == kpis.tail_row(rows, "fp8")["workload"] == "chat"
    # no workload every arm ran: none, and each arm falls back to its own lowest concurrency
    apart = [_sweep_row("base", "agent", 16), _sweep_row("fp8", "chat", 8)]
    assert kpis.reference_point(apart) is None


def _row(conc: int, met: bool, goodput_pct: float, slo_decided: bool) -> dict:
    return {"arm": "a", "workload": "w", "pattern": "concurrency", "concurrency": conc, "request_rate": None,
            "meets_slo": met, "client_bound": False, "points_ok": 1, "points_failed": 0, "repeats": 1,
            "point_errors": "", "requests": 256, "output_throughput": 100.0 * conc, "slo_decided": slo_decided,
            "goodput_pct": goodput_pct, "goodput_lo_pct": 98.5, "goodput_hi_pct": 100.0}


def test_all_requests_good_is_no_coin_flip_under_a_stricter_slo():
    # 256 of 256 good under a 99.5% SLO: Wilson [98.5, 100] straddles 99.5, yet 100% is not flagged
    assert not stats.slo_decided(stats.wilson_ci(256, 256), stats.Slo(1000.0, 50.0, 99.5))
    rows = [_row(4, True, 100.0, False), _row(16, False, 60.0, True)]
    assert kpis._capacity(rows, "a", "concurrency", 99.5) == (
        "w: 4", "w: fails at 16; 400 tok/s at 4 (all requests)", False)
    # a goodput just under 100% within a point of the SLO is still a coin flip
    rows = [_row(4, True, 99.6, False), _row(16, False, 60.0, True)]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency", 99.5)
    assert value == "w: 4" and "at 4 goodput 99.6% [98.5, 100.0] straddles the SLO" in detail and flagged
