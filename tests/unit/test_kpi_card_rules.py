"""KPI cards on hand-made summary rows: the steady view's fields and SLO verdict, which row the tail cards read (the
reference point's first workload), the capacity card's one-point edge band, the peak card's sweep points and flag, the
cold card's first wave, the burst card's failed points, the errors card's totals."""
from __future__ import annotations

from llmhost.report import kpis

KEY = {"arm": "a", "workload": "chat", "pattern": "concurrency", "concurrency": 16, "request_rate": None,
       "num_prompts": 96}


def _steady_row(goodput: float, lo: float, hi: float, verdict: str) -> dict:
    return {**KEY, "repeats_steady": 3, "steady_output_throughput": 1000.0, "steady_output_throughput_lo": 900.0,
            "steady_output_throughput_hi": 1100.0, "steady_ttft_n": 800, "steady_ttft_p50_ms": 100.0,
            "steady_ttft_p99_ms": 300.0, "steady_ttft_p999_ms": 400.0, "steady_ttft_p99_sufficient": False,
            "steady_ttft_p999_sufficient": False, "steady_goodput_pct": goodput, "steady_goodput_pct_lo": lo,
            "steady_goodput_pct_hi": hi, "steady_slo": verdict}


def test_the_steady_view_takes_each_steady_field_and_meets_the_slo_at_exactly_its_share() -> None:
    pooled = {**KEY, "output_throughput": 1.0, "goodput_pct": 50.0, "meets_slo": False, "slo_decided": True}
    view = kpis.steady_view([pooled], [_steady_row(99.0, 97.0, 100.0, "undecided")], 99.0)[0]
    assert view["basis"] == kpis.STEADY
    assert (view["output_throughput"], view["output_throughput_lo"], view["output_throughput_hi"]) == (
        1000.0, 900.0, 1100.0)
    assert (view["goodput_pct"], view["goodput_lo_pct"], view["goodput_hi_pct"]) == (99.0, 97.0, 100.0)
    assert view["meets_slo"] is True and view["slo_decided"] is False
    missed = kpis.steady_view([pooled], [_steady_row(90.0, 85.0, 95.0, "missed")], 99.0)[0]
    assert missed["meets_slo"] is False and missed["slo_decided"] is True


def _tail_row(pattern: str, conc: int | None, ttft_n: int, points_ok: int = 1, wl: str = "chat") -> dict:
    return {"arm": "a", "workload": wl, "pattern": pattern, "concurrency": conc, "points_ok": points_ok,
            "requests": ttft_n, "ttft_n": ttft_n}


def test_the_tail_row_is_the_long_point_with_most_samples_else_the_lowest_concurrency() -> None:
    rows = [_tail_row("long", 128, 2000), _tail_row("long", 128, 10000), _tail_row("long", 128, 20000, 0)]
    assert kpis.tail_row(rows, "a")["ttft_n"] == 10000  # the third's points all failed
    # no long point, and no reference point (the other arm ran another workload): the lowest concurrency
    rows = [_tail_row("concurrency", 64, 384), _tail_row("concurrency", 8, 48), _tail_row("concurrency", 16, 96),
            {**_tail_row("concurrency", 8, 48, wl="agent"), "arm": "b"}]
    assert kpis.tail_row(rows, "a")["concurrency"] == 8


def test_the_tail_card_names_both_percentiles_a_small_sample_cannot_support() -> None:
    row = {**_tail_row("concurrency", 16, 800), "load": "c=16", "basis": kpis.STEADY, "ttft_p50_ms": 100.0,
           "ttft_p99_ms": 300.0, "ttft_p999_ms": 400.0, "ttft_p99_sufficient": False, "ttft_p999_sufficient": False}
    entry = kpis._tail([row], "a", "ttft")
    assert entry == kpis.Entry("a", "100.0 / 300.0 / 400.0 ms",
                               "chat concurrency c=16, steady window, n=800 — p99 needs ≥1,000, p99.9 ≥10,000", True)


def _cap_row(conc: int, met: bool, goodput: float, decided: bool) -> dict:
    return {"arm": "a", "workload": "w", "pattern": "concurrency", "concurrency": conc, "request_rate": None,
            "meets_slo": met, "client_bound": False, "points_ok": 1, "points_failed": 0, "repeats": 1,
            "point_errors": "", "requests": 256, "output_throughput": 100.0 * conc, "slo_decided": decided,
            "goodput_pct": goodput, "goodput_lo_pct": goodput - 3.0, "goodput_hi_pct": min(100.0, goodput + 3.0)}


def test_an_undecided_edge_is_a_coin_flip_only_within_one_point_of_the_slo() -> None:
    far = [_cap_row(4, True, 99.5, True), _cap_row(16, False, 97.5, False)]  # 1.5 points under a 99% SLO
    assert kpis._capacity(far, "a", "concurrency", 99.0) == (
        "w: 4", "w: fails at 16; 400 tok/s at 4 (all requests)", False)
    near = [_cap_row(4, True, 99.5, True), _cap_row(16, False, 98.5, False)]
    value, detail, flagged = kpis._capacity(near, "a", "concurrency", 99.0)
    assert value == "w: 4" and "at 16 goodput 98.5% [95.5, 100.0] straddles the SLO" in detail and flagged


def _peak_row(pattern: str, tok_s: float, meets: bool = True) -> dict:
    return {"arm": "a", "workload": "chat", "pattern": pattern, "output_throughput": tok_s, "meets_slo": meets,
            "load": "c=16", "basis": kpis.STEADY}


def test_the_peak_is_the_best_sweep_point_and_is_flagged_where_it_misses_the_slo() -> None:
    rows = [_peak_row("concurrency", 900.0), _peak_row("qps", 800.0), _peak_row("long", 5000.0),
            _peak_row("burst", 7000.0)]
    assert kpis._peak(rows, "a") == kpis.Entry("a", "900 tok/s", "chat c=16 (steady window)", False)
    missed = kpis._peak([_peak_row("concurrency", 900.0, meets=False)], "a")
    assert missed.is_flagged and missed.detail.endswith(" — misses the SLO there (the capacity card gives "
                                                        "throughput within it)")


def test_the_cold_card_is_the_first_waves_p50_not_the_whole_points() -> None:
    cold = {"arm": "a", "workload": "agent", "pattern": "cold", "load": "c=16", "requests": 128,
            "ttft_first_wave_p50_ms": 900.0, "ttft_p50_ms": 150.0, "point_errors": ""}
    warm = {"arm": "a", "workload": "agent", "pattern": "warm", "load": "c=16", "requests": 128,
            "ttft_p50_ms": 120.0}
    assert kpis._cold([cold, warm], "a") == kpis.Entry(
        "a", "900 ms", "p50 of the first wave after a flush; warm: 120 ms (p50, agent c=16)", False)


def test_a_burst_point_that_failed_outright_is_flagged_without_failed_requests() -> None:
    rows = [{"arm": "a", "pattern": "burst", "requests": 2000, "failed_requests": 0, "points_failed": 0},
            {"arm": "a", "pattern": "burst", "requests": 0, "failed_requests": 0, "points_failed": 1}]
    assert kpis._burst(rows, "a") == kpis.Entry(
        "a", "0 failed", "of 2,000 requests; 1 burst point(s) failed outright", True)
    assert not kpis._burst(rows[:1], "a").is_flagged



def test_the_reference_point_is_in_the_first_workload_every_arm_ran() -> None:
    rows = [{**_tail_row("concurrency", c, 96, wl=wl), "arm": arm} for arm in ("a", "b") for wl in ("agent", "chat")
            for c in (8, 16)]
    assert kpis.reference_point(rows) == ("agent", 16)


def test_the_errors_card_adds_up_every_point_of_the_arm() -> None:
    rows = [{"arm": "a", "requests": 100, "failed_requests": 2, "points_failed": 0},
            {"arm": "a", "requests": 50, "failed_requests": 3, "points_failed": 1},
            {"arm": "b", "requests": 70, "failed_requests": 7, "points_failed": 1}]
    assert kpis._errors(rows, "a") == kpis.Entry("a", "5 requests", "of 150; 1 failed point(s)", True)
