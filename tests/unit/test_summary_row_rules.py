"""The whole-point summary row, its arm/run differences, the tool-call and methods rows, on small hand-worked groups:
latencies from completed requests only, throughput and rates from successful repeats only, differences signed b - a,
each verdict, and the first arm as the reference when none is marked."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench.arms import Arm
from llmhost.bench.records import (Point, PointRecord, PointSummary, RequestRecord, ServerRecord, ToolCallCase,
                                    ToolCallSkipped)
from llmhost.report import load, tables

SLO = stats.Slo(ttft_ms=250.0, itl_ms=2000.0, pct=50.0)


def _req(start: float, ttft: float | None, e2e: float, ok: bool = True,
         gaps: tuple[float, ...] = (10.0,)) -> RequestRecord:
    return RequestRecord(start_s=start, ok=ok, error="" if ok else "stream reset", prompt_tokens=10,
                         output_tokens=len(gaps) + 1 if ok else 1, ttft_ms=ttft, itl_ms=gaps if ok else (),
                         e2e_ms=e2e)


def _summary(tok_s: float, req_s: float = 1.0, achieved: float = 1.0, client_bound: bool = False) -> PointSummary:
    return PointSummary(duration_s=10.0, completed=10, failed=0, request_throughput=req_s, input_throughput=1.0,
                        output_throughput=tok_s, total_throughput=tok_s + 1.0, offered_rate=None,
                        achieved_rate=achieved, client_bound=client_bound)


def _record(arm: str, repeat: int, summary: PointSummary | None, status: str = "ok", error: str | None = None,
            concurrency: int | None = 2, num_prompts: int = 4) -> PointRecord:
    point = Point(f"{arm}.chat.concurrency.r{repeat}", arm, "chat", "concurrency", concurrency, None, num_prompts,
                  repeat)
    return PointRecord.of(point, attempt=1, status=status, error=error, started_at=1.0, ended_at=2.0,
                          cache_flushed=True, summary=summary, requests_file="requests/x.jsonl")


def _group(reqs: list[RequestRecord], points: tuple[PointRecord, ...] = (), arm: str = "base",
           concurrency: int | None = 2, num_prompts: int = 4) -> tables.Group:
    points = points or (_record(arm, 1, _summary(100.0), concurrency=concurrency, num_prompts=num_prompts),)
    return tables.Group(arm, "chat", "concurrency", concurrency, None, num_prompts, points,
                        load.requests_from_records(reqs))


# three completed requests and one that broke mid-stream after its first token
COMPLETED = [_req(1.0, 100.0, 1000.0), _req(2.0, 200.0, 2000.0), _req(3.0, 300.0, 3000.0)]
BROKEN = _req(4.0, 5000.0, 9000.0, ok=False)


def test_ttft_and_e2e_percentiles_leave_out_a_request_that_failed_after_its_first_token():
    row = tables.summary_row(_group([*COMPLETED, BROKEN]), SLO)
    assert row["ttft_n"] == 3 and row["ttft_p50_ms"] == 200.0  # of 100, 200, 300 (with 5000: 250)
    assert row["e2e_p50_ms"] == 2000.0  # of 1000, 2000, 3000 (with 9000: 2500)
    assert row["requests"] == 4 and row["failed_requests"] == 1


def test_repeat_rates_come_from_successful_repeats_and_a_failed_repeat_is_counted_and_named():
    points = (_record("base", 1, _summary(100.0, req_s=10.0, achieved=4.0, client_bound=True)),
              _record("base", 2, _summary(200.0, req_s=20.0, achieved=6.0)),
              _record("base", 3, _summary(0.0, req_s=0.0, achieved=0.0), status="failed", error="server died"))
    row = tables.summary_row(_group(COMPLETED, points), SLO)
    assert (row["repeats"], row["points_ok"], row["points_failed"]) == (3, 2, 1)
    assert row["point_errors"] == "server died"
    assert row["output_throughput"] == 150.0  # mean of 100 and 200; the failed repeat's 0 is not a sample
    assert row["request_throughput"] == 15.0 and row["achieved_rate"] == 5.0  # means, not sums
    assert row["client_bound"] is True  # one client-bound repeat is enough to say so


def test_pooled_itl_percentiles_and_the_p999_support_rule():
    """2,000 gaps 1..2000 ms: p99 = 1980.01 (linear interpolation), p99.9 = 1998.001; 2,000 samples support a p99
    (needs 1,000) but not a p99.9 (needs 10,000)."""
    gaps = tuple(float(g) for g in range(1, 2001))
    row = tables.summary_row(_group([_req(1.0, 100.0, 1000.0, gaps=gaps)]), SLO)
    assert row["itl_n"] == 2000
    assert row["itl_p99_ms"] == pytest.approx(1980.01) and row["itl_p999_ms"] == pytest.approx(1998.001)
    assert row["itl_p999_sufficient"] is False


def test_first_wave_ttft_is_the_first_concurrency_requests_by_start_time_completed_only():
    """c=2: by start time the first two sent are the one that broke (t=0.5) and the one at t=1.0 (TTFT 100 ms);
    only the completed one counts. Listed out of order to show the start time decides."""
    reqs = [_req(3.0, 1000.0, 3000.0), _req(2.0, 300.0, 2000.0), _req(0.5, 5000.0, 9000.0, ok=False),
            _req(1.0, 100.0, 1000.0)]
    assert tables.summary_row(_group(reqs), SLO)["ttft_first_wave_p50_ms"] == 100.0


def _timed(arm: str, ttft: float, n_good: int, n: int = 10, tok_s: tuple[float, float] = (100.0, 102.0),
           **kw) -> tables.Group:
    """n completed requests of TTFT `ttft`, the first n_good within the SLO's 250 ms, the rest at 900 ms."""
    reqs = [_req(float(i), ttft if i < n_good else 900.0, 1000.0) for i in range(n)]
    points = tuple(_record(arm, i + 1, _summary(t), **kw) for i, t in enumerate(tok_s))
    return _group(reqs, points, arm=arm, **kw)


def test_a_difference_is_b_minus_a_with_its_verdict_and_goodput_in_percentage_points():
    """Throughput 100, 102 -> 110, 112 tok/s: +10 (Welch CI 10 ± 4.303·√2 excludes 0), +9.90%; goodput 80% ->
    40% of 40 requests each: -40 pp (not the relative -50%)."""
    a = _timed("base", 100.0, n_good=32, n=40)
    b = _timed("fast", 100.0, n_good=16, n=40, tok_s=(110.0, 112.0))
    row = tables.diff_row(a, b, SLO)
    assert (row["output_throughput_a"], row["output_throughput_b"]) == (101.0, 111.0)
    assert row["output_throughput_delta_pct"] == pytest.approx(1000.0 / 101.0)
    assert row["output_throughput_lo_pct"] == pytest.approx(100.0 * (10.0 - 4.303 * math.sqrt(2)) / 101.0)
    assert row["output_throughput_verdict"] == "better"
    assert (row["goodput_a"], row["goodput_b"]) == (80.0, 40.0)
    assert row["goodput_delta_pct"] == pytest.approx(-40.0) and row["goodput_unit"] == "pp"
    assert row["goodput_verdict"] == "worse"


def test_identical_samples_are_within_noise_not_better():
    a = _timed("base", 100.0, n_good=10, tok_s=(100.0, 100.0))
    row = tables.diff_row(a, _timed("fast", 100.0, n_good=10, tok_s=(100.0, 100.0)), SLO)
    assert row["ttft_p50_delta_pct"] == 0.0 and row["ttft_p50_verdict"] == "within noise"
    assert row["goodput_verdict"] == "within noise"


def test_arm_rows_take_the_manifests_baseline_as_reference_wherever_it_is_listed():
    arms = (Arm("fast", "fast", "#111", ("--x",), ""), Arm("base", "base", "#222", (), "", is_baseline=True))
    run = types.SimpleNamespace(arms=arms)
    fast, base = _timed("fast", 50.0, n_good=10), _timed("base", 100.0, n_good=10)
    rows = tables.baseline_rows(run, [fast, base], SLO)
    assert [(r["arm"], r["baseline"]) for r in rows] == [("fast", "base")]
    assert (rows[0]["ttft_p50_a"], rows[0]["ttft_p50_b"]) == (100.0, 50.0)
    assert rows[0]["ttft_p50_delta_pct"] == pytest.approx(-50.0) and rows[0]["ttft_p50_verdict"] == "better"


def test_run_comparison_is_current_relative_to_the_other_and_matches_a_quick_run_but_not_another_burst():
    current = _timed("base", 150.0, n_good=10, num_prompts=40)
    other = _timed("base", 100.0, n_good=10, num_prompts=400)  # a full run of the same closed loop
    (row,) = tables.compare_rows([current], [other], SLO)
    assert row["ttft_p50_delta_pct"] == pytest.approx(50.0) and row["ttft_p50_verdict"] == "worse"
    burst = _timed("base", 150.0, n_good=10, concurrency=None, num_prompts=40)
    assert tables.compare_rows([burst], [_timed("base", 100.0, n_good=10, concurrency=None, num_prompts=400)],
                               SLO) == []  # all at once: the prompt count is the load


def test_groups_are_ordered_by_load_with_all_at_once_last():
    points = [_record("base", 1, _summary(1.0), concurrency=c) for c in (None, 16, 4)]
    run = types.SimpleNamespace(points=points, requests={}, arms=(Arm("base", "base", "#222", (), ""),),
                                workloads=())
    assert [g.concurrency for g in tables.build_groups(run)] == [4, 16, None]


def test_tool_call_shares_use_their_own_denominators_and_a_failed_request_is_not_a_respected_no_tool():
    def case(expected, called, ok, error=""):
        return ToolCallCase("base", f"{expected}-{called}-{error}", "p", expected, called, args_ok=ok, ok=ok,
                            latency_ms=10.0, error=error)
    cases = (case("search", "search", True), case("search", "weather", False),
             case(None, None, True), case(None, None, False, error="timeout"))
    run = types.SimpleNamespace(arms=(Arm("base", "base", "#222", (), ""),), toolcalls=cases)
    (row,) = tables.toolcall_rows(run)
    assert row["cases"] == 4 and row["ok_pct"] == 50.0
    assert row["right_tool_pct"] == 50.0 and row["args_ok_pct"] == 50.0  # of the 2 that expected a tool
    assert row["no_tool_respected_pct"] == 50.0  # the timed-out one answered nothing


def test_goodput_samples_for_differences_count_failed_requests_as_not_good():
    g = _group([*COMPLETED, BROKEN])
    assert list(tables.METRICS["goodput"].samples(g, SLO)) == [100.0, 100.0, 0.0, 0.0]  # 300 ms > 250 ms SLO
    assert np.array_equal(tables.METRICS["ttft_p50"].samples(g, SLO), [100.0, 200.0, 300.0])


def test_tpot_is_each_completed_requests_time_per_output_token_and_goodput_holds_it_to_the_slo():
    """TPOT = (e2e - TTFT) / (output tokens - 1): 10, 20, 30 and 3,000 ms (the last within TTFT but over the SLO's
    2,000 ms) for the four completed requests, and one that broke: TPOT p50 25 ms; goodput counts 3 of 5 sent; the
    pooled ITL p50 is over every gap of the completed requests."""
    reqs = [_req(1.0, 100.0, 110.0, gaps=(10.0,)), _req(2.0, 100.0, 140.0, gaps=(20.0, 20.0)),
            _req(3.0, 100.0, 130.0, gaps=(30.0,)), _req(4.0, 100.0, 3100.0, gaps=(3000.0,)), BROKEN]
    row = tables.summary_row(_group(reqs), SLO)
    assert row["tpot_n"] == 4 and row["tpot_p50_ms"] == 25.0
    assert row["tpot_p99_ms"] == pytest.approx(30.0 + 0.97 * 2970.0)  # linear between the 3rd and 4th of 4
    assert row["itl_n"] == 5 and row["itl_p50_ms"] == 20.0  # 10, 20, 20, 30, 3000
    assert row["goodput_pct"] == pytest.approx(60.0) and row["meets_slo"] is True  # 60% >= 50%


def test_the_slo_share_is_the_goodput_percentage_as_a_fraction():
    """4 of 8 good is exactly the SLO's 50%: met (a share scaled by anything but 1/100 would miss or pass wrongly)."""
    reqs = [_req(float(i), 100.0 if i < 4 else 900.0, 1000.0) for i in range(8)]
    row = tables.summary_row(_group(reqs), SLO)
    assert row["goodput_pct"] == 50.0 and row["meets_slo"] is True
    row = tables.summary_row(_group(reqs[1:]), SLO)  # 3 of 7
    assert row["meets_slo"] is False


def test_the_row_names_its_load_and_a_failed_repeat_without_a_message_as_failed():
    points = (_record("base", 1, _summary(100.0)), _record("base", 2, None, status="failed", error=None))
    row = tables.summary_row(_group(COMPLETED, points), SLO)
    assert row["point_errors"] == "failed" and row["load"] == "c=2" and row["offered_rate"] is None
    two = (*points, _record("base", 3, None, status="failed", error="server died"))
    assert tables.summary_row(_group(COMPLETED, two), SLO)["point_errors"] == "failed; server died"
    diff = tables.diff_row(_group(COMPLETED), _group(COMPLETED, concurrency=None, num_prompts=4), SLO)
    assert (diff["load"], diff["concurrency"], diff["request_rate"], diff["num_prompts"]) == ("all 4 at once", None,
                                                                                              None, 4)


def test_the_seed_decides_the_bootstrap_and_the_row_passes_it_on():
    reqs = [_req(float(i), 100.0 + 37.0 * (i % 7), 1000.0 + 13.3 * i + (i * i % 17), gaps=(5.0 + i % 5,))
            for i in range(40)]
    g = _group(reqs)
    for seed in (0, 7):
        row = tables.summary_row(g, SLO, seed=seed)
        ttft = stats.percentile_summary([r.ttft_ms for r in reqs], tables.PCTS, seed=seed)
        tpot = stats.percentile_summary([(r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1) for r in reqs],
                                        tables.PCTS[:2], seed=seed)
        assert (row["ttft_p99_lo_ms"], row["ttft_p99_hi_ms"]) == (ttft[99.0].lo, ttft[99.0].hi)
        assert (row["tpot_p50_lo_ms"], row["tpot_p50_hi_ms"]) == (tpot[50.0].lo, tpot[50.0].hi)
    other = _group([_req(float(i), 150.0 + 17.1 * i + (i * i % 11), 1000.0) for i in range(40)])
    g = _group([_req(float(i), 100.0 + 13.7 * i + (i * i % 13), 1000.0) for i in range(40)])
    rows = [tables.diff_row(g, other, SLO, seed=s) for s in (0, 7)]
    assert rows[0]["ttft_p50_lo_pct"] != rows[1]["ttft_p50_lo_pct"]
    assert rows[1]["ttft_p50_lo_pct"] == tables.diff_row(g, other, SLO, seed=7)["ttft_p50_lo_pct"]


@pytest.mark.parametrize(("delta", "lo", "hi", "higher_better", "verdict"), [
    (math.nan, math.nan, math.nan, True, "no data"),
    (5.0, math.nan, 9.0, True, "no CI"),
    (5.0, 1.0, math.nan, True, "no CI"),
    (5.0, 1.0, 9.0, True, "better"),
    (5.0, 1.0, 9.0, False, "worse"),
    (0.5, 0.25, 0.75, True, "better"),  # a gain under 1 is still a gain
    (-5.0, -9.0, -1.0, True, "worse"),
    (-5.0, -9.0, -1.0, False, "better"),
    (0.0, 0.0, 0.0, True, "within noise"),
    (2.0, 0.0, 4.0, True, "within noise"),  # a CI that touches 0
])
def test_each_verdict_of_a_difference(delta, lo, hi, higher_better, verdict):
    d = stats.Difference(delta, lo, hi, 10 * delta, 10 * lo, 10 * hi)
    m = tables.Metric("x", "ms", higher_better, 50.0, lambda g, s: np.array([]))
    fields = tables._diff_fields("x", m, d, np.array([1.0]), np.array([2.0]))
    assert fields["x_verdict"] == verdict
    assert (fields["x_delta_pct"], fields["x_unit"]) == (10 * delta, "%") or math.isnan(delta)
    share = tables._diff_fields("x", tables.Metric("x", "%", higher_better, "mean", m.samples), d, np.array([1.0]),
                                np.array([2.0]))  # a share in %: the change in percentage points, CI and all
    assert share["x_verdict"] == verdict and share["x_unit"] == "pp"
    assert [share[f"x_{k}_pct"] for k in ("delta", "lo", "hi")] == [delta, lo, hi] or math.isnan(delta)


def test_tool_call_rows_score_the_right_tool_give_the_latency_and_say_why_an_arm_has_none():
    """Arm `base`: 3 of 4 expected tools called right (an asymmetric split), latencies 10..40 ms (p50 25); arm `skip`:
    skipped with its reason; arm `none`: nothing recorded."""
    def case(arm, expected, called, latency):
        return ToolCallCase(arm, f"{expected}-{called}-{latency}", "p", expected, called, args_ok=True,
                            ok=expected == called, latency_ms=latency, error="")
    cases = (case("base", "search", "search", 10.0), case("base", "search", "search", 20.0),
             case("base", "weather", "weather", 30.0), case("base", "search", "weather", 40.0),
             ToolCallSkipped("skip", "dummy weights never call tools unless forced"))
    arms = tuple(Arm(n, n, "#222", (), "") for n in ("base", "skip", "none"))
    rows = tables.toolcall_rows(types.SimpleNamespace(arms=arms, toolcalls=cases))
    assert rows[0] == {"arm": "base", "cases": 4, "skipped": "", "ok_pct": 75.0, "right_tool_pct": 75.0,
                       "args_ok_pct": 100.0, "no_tool_respected_pct": rows[0]["no_tool_respected_pct"],
                       "latency_p50_ms": 25.0}
    assert math.isnan(rows[0]["no_tool_respected_pct"])  # no case expected no tool: no share, not 0%
    assert rows[1:] == [{"arm": "skip", "cases": 0, "skipped": "dummy weights never call tools unless forced"},
                        {"arm": "none", "cases": 0, "skipped": "no tool-call cases recorded"}]


def test_the_methods_rows_give_each_arms_command_readiness_backend_decode_and_version():
    server = ServerRecord("fast", "python -m sglang.launch_server --x", {"attention_backend": "flashinfer",
                                                                          "version": "0.5.17"}, 21.5,
                          "2026-12-05T04:32:24Z", decode="shared-prefix decode: on")
    arms = (Arm("base", "Baseline", "#111", (), ""), Arm("fast", "Fast", "#222", ("--x", "1"), ""))
    rows = tables.methods_rows(types.SimpleNamespace(arms=arms, servers={"fast": server}))
    assert rows == [
        {"arm": "base", "label": "Baseline", "flags": "(none)",
         "launch_command": "(not recorded: servers/<arm>.json missing)", "ready_s": None, "attention_backend": None,
         "decode": "", "server_version": None},
        {"arm": "fast", "label": "Fast", "flags": "--x 1", "launch_command": "python -m sglang.launch_server --x",
         "ready_s": 21.5, "attention_backend": "flashinfer", "decode": "shared-prefix decode: on",
         "server_version": "0.5.17"}]


def test_without_a_marked_baseline_the_first_arm_is_the_reference():
    arms = (Arm("first", "first", "#111", (), ""), Arm("second", "second", "#222", ("--x",), ""))
    first, second = _timed("first", 100.0, n_good=10), _timed("second", 50.0, n_good=10)
    rows = tables.baseline_rows(types.SimpleNamespace(arms=arms), [first, second], SLO)
    assert [(r["arm"], r["baseline"]) for r in rows] == [("second", "first")]
    assert tables.baseline_rows(types.SimpleNamespace(arms=()), [first], SLO) == []
