"""KPI card entries where a card has nothing to show, where the ITL card differs from the TTFT card, and where a
failure must count: each entry's value, detail and warning mark, whole."""
from __future__ import annotations

import math
from types import SimpleNamespace

from llmhost import cost, stats
from llmhost.report import kpis

FULL = f"not measured in this run — {kpis.FULL_RUN}"


def _tail_row(**over) -> dict:
    row = {"arm": "a", "workload": "chat", "pattern": "concurrency", "concurrency": 16, "load": "c=16",
           "points_ok": 1, "requests": 1, "ttft_n": 900, "itl_n": 20000, "basis": kpis.STEADY,
           "ttft_p50_ms": 100.0, "ttft_p99_ms": 300.0, "ttft_p999_ms": 400.0, "ttft_p99_sufficient": False,
           "ttft_p999_sufficient": False, "itl_p50_ms": 4.0, "itl_p99_ms": 9.0, "itl_p999_ms": 20.0,
           "itl_p999_sufficient": True}
    return {**row, **over}


def test_the_itl_card_counts_token_gaps_over_all_requests_and_needs_no_ttft_sample() -> None:
    # one request is enough for a tail row; ITL's n is its own, its basis all requests whatever the TTFT's is
    entry = kpis._tail([_tail_row()], "a", "itl")
    assert entry == kpis.Entry("a", "4.0 / 9.0 / 20.0 ms",
                               "chat concurrency c=16, all requests, start-up and drain included, n=20,000", False)
    short = kpis._tail([_tail_row(itl_p999_sufficient=False)], "a", "itl")
    assert short.is_flagged and short.detail.endswith(f"n=20,000 — p99.9 needs ≥{stats.needed_samples(99.9):,}")
    # the TTFT card: p99.9 supported, p99 not, is still named; a row without a basis is over all requests
    ttft = kpis._tail([{k: v for k, v in _tail_row(ttft_p999_sufficient=True).items() if k != "basis"}], "a", "ttft")
    assert ttft == kpis.Entry("a", "100.0 / 300.0 / 400.0 ms", "chat concurrency c=16, all requests, n=900 — p99 "
                              f"needs ≥{stats.needed_samples(99.0):,}, p99.9 ≥{stats.needed_samples(99.9):,}", False)


def test_an_arm_without_a_successful_point_has_no_tail_and_no_peak() -> None:
    rows = [_tail_row(points_ok=0), _tail_row(arm="b")]
    assert kpis._tail(rows, "a", "ttft") == kpis.Entry("a", "—", "no successful point", True)
    assert kpis._tail([_tail_row(requests=0)], "a", "itl") == kpis.Entry("a", "—", "no successful point", True)
    # a concurrency row without a concurrency is no sweep point to fall back on
    assert kpis.tail_row([_tail_row(concurrency=None)], "a") is None
    nan = {"arm": "a", "workload": "chat", "pattern": "concurrency", "output_throughput": math.nan}
    assert kpis._peak([nan], "a") == kpis.Entry("a", "—", "no successful sweep point", True)


def test_the_peak_counts_poisson_points_and_says_all_requests_where_no_window() -> None:
    rows = [{"arm": "a", "workload": "chat", "pattern": "concurrency", "output_throughput": 900.0,
             "meets_slo": True, "load": "c=16"},
            {"arm": "a", "workload": "agent", "pattern": "qps", "output_throughput": 950.0, "meets_slo": True,
             "load": "8 req/s"}]
    assert kpis._peak(rows, "a") == kpis.Entry("a", "950 tok/s", "agent 8 req/s (all requests)", False)


KEY = {"arm": "a", "workload": "chat", "pattern": "concurrency", "request_rate": None, "num_prompts": 96}


def _steady(conc: int, goodput: float, verdict: str) -> dict:
    return {**KEY, "concurrency": conc, "repeats_steady": 2, "steady_output_throughput": 1.0,
            "steady_output_throughput_lo": 0.5, "steady_output_throughput_hi": 1.5, "steady_ttft_n": 10,
            "steady_ttft_p50_ms": 1.0, "steady_ttft_p99_ms": 2.0, "steady_ttft_p999_ms": 3.0,
            "steady_ttft_p99_sufficient": False, "steady_ttft_p999_sufficient": False, "steady_goodput_pct": goodput,
            "steady_goodput_pct_lo": goodput, "steady_goodput_pct_hi": goodput, "steady_slo": verdict}


def test_the_steady_view_keeps_a_row_without_a_window_and_goes_on_to_the_next() -> None:
    rows = [{**KEY, "concurrency": 8}, {**KEY, "concurrency": 16}, {**KEY, "concurrency": 32}]
    view = kpis.steady_view(rows, [_steady(16, 99.0, "met"), _steady(32, 99.0 - 1e-12, "undecided")], 99.0)
    assert [(v["concurrency"], v["basis"]) for v in view] == [(8, kpis.POOLED), (16, kpis.STEADY), (32, kpis.STEADY)]
    assert view[1]["meets_slo"] is True and view[1]["slo_decided"] is True
    assert view[2]["meets_slo"] is True and view[2]["slo_decided"] is False  # a float's last bit under the SLO
    under = kpis.steady_view(rows[1:2], [_steady(16, 98.9, "missed")], 99.0)[0]
    assert under["meets_slo"] is False


def _cap(conc: int, met: bool, **over) -> dict:
    row = {"arm": "a", "workload": "w", "pattern": "concurrency", "concurrency": conc, "request_rate": None,
           "meets_slo": met, "client_bound": False, "points_ok": 1, "points_failed": 0, "repeats": 1,
           "point_errors": "", "requests": 256, "output_throughput": 100.0 * conc, "output_throughput_lo": 90.0 * conc,
           "output_throughput_hi": 110.0 * conc, "goodput_pct": 100.0, "goodput_lo_pct": 98.6, "goodput_hi_pct": 100.0}
    return {**row, **over}


def test_a_load_whose_repeat_failed_outright_is_missed_even_where_its_requests_met_the_slo() -> None:
    rows = [_cap(4, True), _cap(16, True, points_failed=1, repeats=3, point_errors="")]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency", 99.0)
    assert value == "w: 4" and flagged
    assert detail == ("w: fails at 16; 400 tok/s at 4 (all requests) "
                      "(1 of 3 runs at 16 failed: no error text)")


def test_the_capacity_card_with_no_verdict_at_all_says_no_data() -> None:
    rows = [_cap(4, True, requests=0)]
    assert kpis._capacity(rows, "a", "concurrency", 99.0) == (
        "w: none", "w: no data (no request data at 4)", True)
    # the default SLO share is 99%: 98.5% good at the edge, undecided, is a coin flip under it
    edge = [_cap(4, True, goodput_pct=98.5, slo_decided=False, goodput_lo_pct=97.0)]
    assert "straddles the SLO" in kpis._capacity(edge, "a", "concurrency")[1]


def test_the_capacity_card_names_a_client_bound_load_and_flags_it() -> None:
    rows = [{**_cap(4, True), "basis": kpis.STEADY, "client_bound": True}]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency", 99.0)
    assert value == "w: 4+" and flagged
    assert detail == ("w: no measured load failed; 400 tok/s at 4 (steady window) "
                      "(the load generator could not offer 4: client-bound)")


def test_an_edge_exactly_one_point_from_the_slo_is_no_coin_flip_and_a_row_without_a_verdict_field_is_decided() -> None:
    exact = [_cap(4, True, goodput_pct=99.5, slo_decided=True), _cap(16, False, goodput_pct=98.0, slo_decided=False)]
    assert kpis._capacity(exact, "a", "concurrency", 99.0)[2] is False
    pooled = [_cap(4, True, goodput_pct=99.5), _cap(16, False, goodput_pct=98.5)]  # pooled rows carry no slo_decided
    assert kpis._capacity(pooled, "a", "concurrency", 99.0)[2] is False
    both = [_cap(4, True, goodput_pct=99.5, slo_decided=False), _cap(16, False, goodput_pct=98.5, slo_decided=False)]
    detail = kpis._capacity(both, "a", "concurrency", 99.0)[1]
    assert detail.endswith("straddles the SLO: 256 requests cannot decide it; at 16 goodput 98.5% [98.6, 100.0] "
                           "straddles the SLO: 256 requests cannot decide it)")


def test_the_errors_card_flags_one_failed_request_or_one_failed_point() -> None:
    one = [{"arm": "a", "requests": 10, "failed_requests": 1, "points_failed": 0}]
    assert kpis._errors(one, "a").is_flagged
    point = [{"arm": "a", "requests": 0, "failed_requests": 0, "points_failed": 1}]
    assert kpis._errors(point, "a") == kpis.Entry("a", "0 requests", "of 0; 1 failed point(s)", True)
    clean = [{"arm": "a", "requests": 10, "failed_requests": 0, "points_failed": 0}]
    assert not kpis._errors(clean, "a").is_flagged


def test_the_burst_card_is_the_arms_own_and_flags_one_failed_request() -> None:
    rows = [{"arm": "a", "pattern": "burst", "requests": 100, "failed_requests": 1, "points_failed": 0},
            {"arm": "b", "pattern": "burst", "requests": 900, "failed_requests": 9, "points_failed": 1},
            {"arm": "a", "pattern": "concurrency", "requests": 500, "failed_requests": 5, "points_failed": 0}]
    assert kpis._burst(rows, "a") == kpis.Entry("a", "1 failed", "of 100 requests", True)
    assert kpis._burst(rows[2:], "a") == kpis.Entry("a", "—", FULL, False)


def test_the_cold_card_says_why_it_has_no_number() -> None:
    failed = {"arm": "a", "workload": "agent", "pattern": "cold", "load": "c=16", "requests": 0,
              "point_errors": "server died"}
    assert kpis._cold([failed], "a") == kpis.Entry("a", "—", "the cold point failed: server died", True)
    assert kpis._cold([{**failed, "point_errors": ""}], "a") == kpis.Entry(
        "a", "—", "the cold point failed: no request data", True)
    other_arm = {**failed, "arm": "b", "requests": 64, "ttft_first_wave_p50_ms": 800.0}
    assert kpis._cold([other_arm, {"arm": "a", "pattern": "warm", "requests": 0}], "a") == kpis.Entry(
        "a", "—", FULL, False)
    alone = {**other_arm, "arm": "a"}
    assert kpis._cold([alone], "a") == kpis.Entry(
        "a", "800 ms", "p50 of the first wave after a flush (agent c=16); no warm point to compare", False)


def test_fmt_shows_missing_as_a_dash_and_text_as_it_is() -> None:
    assert kpis.fmt(None) == kpis.fmt(math.nan) == "—"
    assert kpis.fmt("c=16") == "c=16" and kpis.fmt(1234.5, 1, "ms") == "1,234.5 ms"


def test_a_workload_whose_lowest_load_misses_costs_nothing_and_has_no_repeats() -> None:
    rows = [_cap(4, False, goodput_pct=50.0, points_ok=3)]
    (row,) = kpis.cost_rows(rows, ["a"], 2.0)
    assert row["concurrency"] is None and row["basis"] == kpis.POOLED and not row["client_bound"]
    assert all(math.isnan(row[k]) for k in ("output_throughput", "output_throughput_lo", "output_throughput_hi",
                                            "usd_per_m_output_tokens"))


def _cost_row(usd: float, lo: float, hi: float, tok_lo: float = math.nan) -> dict:
    return {"arm": "a", "workload": "w", "concurrency": 8, "basis": kpis.STEADY, "is_bracketed": True,
            "client_bound": False, "output_throughput": 1000.0, "output_throughput_lo": tok_lo,
            "output_throughput_hi": 1100.0, "usd_per_m_output_tokens": usd, "usd_per_m_output_tokens_lo": lo,
            "usd_per_m_output_tokens_hi": hi}


def test_a_cost_of_nothing_or_of_no_tokens_keeps_two_decimals_and_one_repeat_says_it_has_no_ci() -> None:
    free = kpis._cost([_cost_row(0.0, math.nan, math.nan)], "a")
    assert free == kpis.Entry("a", "w: $0.00 per M output tokens", "w: $0.00 (no CI: one repeat; --repeat 3) at "
                              "c=8, 1,000 tok/s (steady window)", False)
    cheap = kpis._cost([_cost_row(0.04, math.nan, math.nan)], "a")
    assert cheap.detail.startswith("w: $0.040 (no CI: one repeat; --repeat 3) at c=8")
    endless = kpis._cost([_cost_row(math.inf, 1.5, math.inf, tok_lo=0.0)], "a")
    assert endless.value == "w: ∞ per M output tokens"
    assert endless.detail == "w: ∞ [$1.50, ∞] at c=8, 1,000 tok/s [0, 1,100] (steady window)"


def test_the_cards_ask_their_questions_in_reading_order_with_every_arms_answer() -> None:
    run = SimpleNamespace(arms=[SimpleNamespace(name="a"), SimpleNamespace(name="b")])
    rows = [_cap(4, True, load="c=4", ttft_n=96, itl_n=9000, ttft_p50_ms=90.0, ttft_p99_ms=200.0, ttft_p999_ms=210.0,
                 ttft_p99_sufficient=False, ttft_p999_sufficient=False, itl_p50_ms=4.0, itl_p99_ms=8.0,
                 itl_p999_ms=12.0, itl_p999_sufficient=False, failed_requests=0),
            _cap(16, False, load="c=16", goodput_pct=94.5, goodput_lo_pct=92.0, goodput_hi_pct=97.0,
                 slo_decided=False, ttft_n=384, itl_n=40000, ttft_p50_ms=300.0, ttft_p99_ms=900.0,
                 ttft_p999_ms=990.0, ttft_p99_sufficient=False, ttft_p999_sufficient=False, itl_p50_ms=6.0,
                 itl_p99_ms=30.0, itl_p999_ms=60.0, itl_p999_sufficient=True, failed_requests=2)]
    rows += [{**r, "arm": "b", "output_throughput": r["output_throughput"] / 2} for r in rows]
    slo = stats.Slo(500.0, 50.0, 95.0)
    cards = kpis.build_cards(run, rows, slo, cost.GpuPrice(2.0, "--gpu-hourly-usd"))
    steady = " In the steady window (warm-up and drain left out) where the point has one."
    slo_text = "TTFT ≤ 500 ms and TPOT ≤ 50 ms for ≥ 95% of requests"
    assert [(c.title, c.question) for c in cards] == [
        ("Max concurrency within SLO", f"How many concurrent users before the SLO ({slo_text}) breaks?" + steady),
        ("Cost per million output tokens", "What do a million output tokens cost at the highest concurrency within "
         "the SLO, at $2.00 per GPU-hour (--gpu-hourly-usd, read when this page was built)? Set against a "
         "provider's price per million output tokens."),
        ("Max QPS within SLO", "What Poisson arrival rate can it take within the same SLO?" + steady),
        ("Peak output throughput", "What is the most tokens/s it produced in any sweep point?" + steady),
        ("TTFT p50 / p99 / p99.9", "How long until the first token, typically and in the tail?" + steady
         + " The start-up wave and the drain are in 'Steady state and repeats'."),
        ("ITL p50 / p99 / p99.9", "How smooth is streaming once it starts (all token gaps of all requests pooled)?"),
        ("Cold-start TTFT", "What does a flushed prefix cache cost the first requests (p50)?"),
        ("Burst failures", "Did a burst of simultaneous requests lose any?"),
        ("Errors", "Did anything fail across the whole run?")]
    costs = kpis.cost_rows(rows, ["a", "b"], 2.0)
    for arm, i in (("a", 0), ("b", 1)):
        assert [c.entries[i].arm for c in cards] == [arm] * len(cards)
        assert [c.entries[i] for c in cards] == [
            kpis.Entry(arm, *kpis._capacity(rows, arm, "concurrency", 95.0)), kpis._cost(costs, arm),
            kpis.Entry(arm, *kpis._capacity(rows, arm, "qps", 95.0)), kpis._peak(rows, arm),
            kpis._tail(rows, arm, "ttft"), kpis._tail(rows, arm, "itl"), kpis._cold(rows, arm),
            kpis._burst(rows, arm), kpis._errors(rows, arm)]
    # judged at the run's SLO share: 94.5% good at 16, undecided, is a coin flip under 95% (not under 99%)
    assert cards[0].entries[0].value == "w: 4" and cards[3].entries[1].value == "800 tok/s"
    capacity = cards[0].entries[0]
    assert capacity.is_flagged and "at 16 goodput 94.5% [92.0, 97.0] straddles the SLO" in capacity.detail
    assert cards[1].entries[1].value.startswith("w: $")
    assert cards[8].entries[0] == kpis.Entry("a", "2 requests", "of 512; 0 failed point(s)", True)
    # without a price, no cost card
    assert [c.title for c in kpis.build_cards(run, rows, slo)][:2] == ["Max concurrency within SLO",
                                                                        "Max QPS within SLO"]
