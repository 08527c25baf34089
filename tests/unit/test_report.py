"""Report builders on synthetic runs: loading (torn lines, retries), tables, KPI cards, figures, page rendering."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fixtures_bench import ARMS, make_run
from llmhost import cost, stats
from llmhost.bench.records import RequestRecord, ToolCallCase
from llmhost.report import figures, kpis, load, page, tables, timeline

SLO = stats.Slo(500.0, 20.0, 99.0)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), n=16, repeats=2)


@pytest.fixture(scope="module")
def run(run_dir: Path) -> load.Run:
    return load.load_run(run_dir)


@pytest.fixture(scope="module")
def ctx(run: load.Run) -> figures.Context:
    groups = tables.build_groups(run)
    return figures.Context(run, groups, tables.summary_rows(groups, SLO), tables.baseline_rows(run, groups, SLO), SLO)


def test_torn_last_lines_are_skipped_and_named_in_the_warnings(run: load.Run) -> None:
    assert all(p.point_id != "torn" for p in run.points)
    assert len(run.points) == len(run.plan)
    torn = sorted(w.split(":")[0] for w in run.warnings if "torn last line" in w)
    assert torn == ["points.jsonl", "requests/baseline.agent.concurrency.1.r0.jsonl", "telemetry.jsonl"]
    assert len(run.warnings) == 3


def test_unreadable_and_misshapen_lines_are_skipped_with_one_warning_each(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, n=8, repeats=1, telemetry=False, toolcalls=False, torn=False)
    points = run_dir / "points.jsonl"
    lines = points.read_text().splitlines()
    damaged = [lines[0], "{oops", json.dumps({**json.loads(lines[1]), "status": "maybe"}), *lines[2:]]
    points.write_text("\n".join(damaged) + "\n")
    run = load.load_run(run_dir)
    assert len(run.points) == len({json.loads(line)["point_id"] for line in lines}) - 1
    assert run.warnings == ("points.jsonl: 1 unreadable line(s) skipped (line 2 first)",
                            "points.jsonl: 1 line(s) skipped, not the records run_bench.py writes (first: point "
                            "record: 'status' should be one of ok, failed, not 'maybe')")


def test_the_latest_attempt_of_a_point_wins(run: load.Run) -> None:
    by_id = {p.point_id: p for p in run.points}
    retried = by_id["baseline.agent.concurrency.16.r1"]  # failed once, then succeeded
    assert (retried.attempt, retried.status) == (2, "ok")
    failed = by_id["baseline.chat.concurrency.4.r1"]  # failed after the retry
    assert (failed.attempt, failed.status) == (2, "failed") and "server died" in failed.error
    assert failed.point_id not in run.requests


def test_request_records_become_arrays_with_per_request_mean_itl() -> None:
    r = load.requests_from_records([
        RequestRecord(start_s=1.0, ok=True, error="", prompt_tokens=10, output_tokens=3, ttft_ms=20.0,
                      itl_ms=(4.0, 6.0), e2e_ms=30.0),
        RequestRecord(start_s=2.0, ok=False, error="timeout", prompt_tokens=10, output_tokens=0, ttft_ms=None,
                      itl_ms=(), e2e_ms=5.0)])
    assert r.itl_mean_ms[0] == 5.0 and math.isnan(r.itl_mean_ms[1])
    assert math.isnan(r.ttft_ms[1]) and r.itl_all_ms.tolist() == [4.0, 6.0]
    assert r.errors == ("timeout",) and r.n == 2


def test_a_directory_without_manifest_or_with_another_schema_is_refused(tmp_path: Path) -> None:
    with pytest.raises(load.LoadError, match="manifest.json is missing"):
        load.load_run(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": 2}))
    with pytest.raises(load.LoadError, match="schema 2, newer than this toolkit reads"):
        load.load_run(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(load.LoadError, match=r"is not readable JSON"):
        load.load_run(tmp_path)


def test_groups_pool_repeats_and_follow_manifest_arm_order(run: load.Run, ctx: figures.Context) -> None:
    g = next(g for g in ctx.groups if g.key == ("baseline", "agent", "concurrency", 4, None, 16))
    assert [p.repeat for p in g.points] == [0, 1]
    assert g.requests.n == sum(run.requests[p.point_id].n for p in g.points)
    assert list(dict.fromkeys(g.arm for g in ctx.groups)) == [a["name"] for a in ARMS]


def test_summary_row_numbers_agree_with_the_raw_data(ctx: figures.Context) -> None:
    i, g = next((i, g) for i, g in enumerate(ctx.groups) if g.key[:4] == ("fp8-kv", "chat", "concurrency", 16))
    row = ctx.rows[i]
    assert row["requests"] == g.requests.n and row["repeats"] == 2
    assert row["output_throughput"] == pytest.approx(np.mean(g.throughputs))
    ok_ttft = g.requests.ttft_ms[g.requests.ok]
    assert row["ttft_p99_ms"] == pytest.approx(np.percentile(ok_ttft, 99))
    share = stats.goodput_share(g.requests.ok, g.requests.ttft_ms, g.requests.itl_mean_ms, SLO)
    assert row["goodput_pct"] == pytest.approx(100 * share) and row["meets_slo"] == stats.meets_slo(share, SLO)
    assert row["ttft_p99_sufficient"] is False  # 32 samples < 1,000


def test_an_arm_compared_with_itself_is_within_noise(ctx: figures.Context) -> None:
    g = next(g for g in ctx.groups if g.key[:4] == ("baseline", "agent", "concurrency", 4))
    row = tables.diff_row(g, g, SLO)
    for metric in tables.METRICS:
        assert row[f"{metric}_delta_pct"] == pytest.approx(0.0, abs=1e-9)
        assert row[f"{metric}_verdict"] in ("within noise", "no CI"), metric


def test_disabling_the_prefix_cache_shows_as_worse_ttft_on_the_agent_workload(ctx: figures.Context) -> None:
    row = next(r for r in ctx.baseline if r["arm"] == "no-prefix-cache" and r["workload"] == "agent"
               and r["pattern"] == "concurrency" and r["concurrency"] == 16)
    assert row["ttft_p50_verdict"] == "worse" and row["ttft_p50_lo_pct"] > 100
    assert not any(r["arm"] == "baseline" for r in ctx.baseline)


def test_toolcall_rows_score_cases_and_keep_the_skip_reason(run: load.Run) -> None:
    rows = {r["arm"]: r for r in tables.toolcall_rows(run)}
    assert rows["triton"]["skipped"].startswith("dummy weights")
    cases = [t for t in run.toolcalls if t.arm == "baseline"]
    assert rows["baseline"]["cases"] == len(cases)
    assert rows["baseline"]["ok_pct"] == pytest.approx(100 * sum(c.ok for c in cases) / len(cases))


def _row(conc: int, met: bool, client_bound: bool = False, key: str = "concurrency", **extra: object) -> dict:
    return {"arm": "a", "workload": "w", "pattern": "qps" if key == "request_rate" else "concurrency",
            "concurrency": conc if key == "concurrency" else None, "request_rate": conc if key != "concurrency"
            else None, "meets_slo": met, "client_bound": client_bound, "points_ok": 1, "points_failed": 0,
            "repeats": 1, "point_errors": "", "requests": 256, "output_throughput": 100.0 * conc,
            "slo_decided": True, "goodput_pct": 100.0 if met else 50.0, "goodput_lo_pct": 98.5,
            "goodput_hi_pct": 100.0, **extra}


def test_capacity_card_brackets_flags_and_explains() -> None:
    value, detail, flagged = kpis._capacity([_row(1, True), _row(4, True), _row(16, False)], "a", "concurrency")
    assert (value, detail, flagged) == ("w: 4", "w: fails at 16; 400 tok/s at 4 (all requests)", False)
    value, detail, flagged = kpis._capacity([_row(2, False), _row(8, False)], "a", "concurrency")
    assert value == "w: none" and "even 2 misses" in detail and flagged
    rows = [_row(2, True, key="request_rate"), _row(32, True, True, key="request_rate")]
    value, detail, flagged = kpis._capacity(rows, "a", "qps")
    assert value == "w: 32 req/s+" and "client-bound" in detail and flagged
    # a run without Poisson points (a tune, --quick, the user's own loads) says which run measures them
    assert kpis._capacity([_row(4, True)], "a", "qps") == (
        "—", "no qps points in this run — ./run_bench.py's default plan (no --quick, --tune or load options) "
        "measures it", False)


def test_cards_cover_every_arm_in_manifest_order(run: load.Run, ctx: figures.Context) -> None:
    cards = kpis.build_cards(run, ctx.rows, SLO)
    assert [c.title for c in cards][:3] == ["Max concurrency within SLO", "Max QPS within SLO",
                                            "Peak output throughput"]
    for card in cards:
        assert [e.arm for e in card.entries] == [a["name"] for a in ARMS]
    tail = next(c for c in cards if c.title.startswith("TTFT"))
    assert all(e.is_flagged and "p99.9" in e.detail for e in tail.entries)  # long run of 192 < 10,000


def test_the_cost_card_follows_capacity_only_when_a_price_is_set(run: load.Run, ctx: figures.Context) -> None:
    assert "Cost per million output tokens" not in [c.title for c in kpis.build_cards(run, ctx.rows, SLO)]
    cards = kpis.build_cards(run, ctx.rows, SLO, cost.GpuPrice(3.5, "GPU_HOURLY_USD, config.local.env:3"))
    priced = cards[1]
    assert priced.title == "Cost per million output tokens"
    assert [e.arm for e in priced.entries] == [a["name"] for a in ARMS]
    assert "$3.50 per GPU-hour (GPU_HOURLY_USD, config.local.env:3, read when this page was built)" in priced.question
    assert all(e.value.endswith(" per M output tokens") for e in priced.entries)


def test_every_figure_is_built_with_manifest_colours_and_order(ctx: figures.Context) -> None:
    colours = {a["label"]: a["color"] for a in ARMS}
    for key, build in {**figures.FIGURES, "kv": timeline.kv_cache, "gpu": timeline.gpu}.items():
        chart = build(ctx)
        assert chart.figure is not None, (key, chart.missing)
        assert chart.title.endswith("?") and chart.how_to_read
        # traces are named by arm label, or label + " p50"/" p99" on the latency chart
        named = [(t, label) for t in chart.figure.data for label in colours
                 if t.name == label or t.name.startswith(label + " p")]
        assert named, key
        for trace, label in named:
            colour = trace.marker.color if trace.type == "bar" else trace.line.color
            assert colour == colours[label], (key, trace.name)
        legend = list(dict.fromkeys(label for t, label in named if t.showlegend is not False))
        assert legend == [a["label"] for a in ARMS if a["label"] in legend], key


def test_figures_follow_a_reordered_manifest(tmp_path: Path) -> None:
    arms = [dict(ARMS[2], is_baseline=True, color="#000000"), dict(ARMS[0], is_baseline=False)]
    run = load.load_run(make_run(tmp_path, n=8, repeats=1, arms=arms, telemetry=False, toolcalls=False))
    groups = tables.build_groups(run)
    ctx = figures.Context(run, groups, tables.summary_rows(groups, SLO), tables.baseline_rows(run, groups, SLO),
                          SLO)
    fig = figures.capacity(ctx).figure
    assert [t.name for t in fig.data][:2] == [ARMS[2]["label"], ARMS[0]["label"]]
    assert fig.data[0].line.color == "#000000"
    assert {r["arm"] for r in ctx.baseline} == {"baseline"}  # compared against the new baseline, fp8-kv


def test_a_telemetry_gap_is_a_warning_and_not_a_series(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, n=8, repeats=1, toolcalls=False, torn=False)
    gap = {"t": 1.0, "source": "gap", "name": "telemetry_gap_s", "value": 12.4, "point_id": None,
           "labels": {"error": "cannot write telemetry.jsonl: No space left on device (0 MiB free there)"}}
    with (run_dir / "telemetry.jsonl").open("a") as out:
        out.write(json.dumps(gap) + "\n")
    run = load.load_run(run_dir)
    assert run.warnings == ("telemetry.jsonl: 1 gap(s), 12 s of samples not written (first: cannot write "
                            "telemetry.jsonl: No space left on device (0 MiB free there))",)
    ctx = figures.Context(run, [], [], [], SLO)
    assert "telemetry_gap_s" not in set(timeline.frame(ctx, "gpu")["name"])  # a hole, not a series


def test_missing_telemetry_says_how_to_produce_it(tmp_path: Path) -> None:
    run = load.load_run(make_run(tmp_path, n=8, repeats=1, telemetry=False, toolcalls=False))
    ctx = figures.Context(run, [], [], [], SLO)
    for build in (timeline.kv_cache, timeline.gpu, figures.capacity, figures.survival, figures.head_to_head):
        chart = build(ctx)
        assert chart.figure is None and "run_bench.py" in chart.missing


def test_tables_escape_cell_text_and_mark_verdict_cells() -> None:
    html = page.table([("Name", lambda r: page.esc(r["n"])), ("V", lambda r: f"class=worse|{r['v']}")],
                      [{"n": "<script>x</script>", "v": 1}])
    assert "<script>x" not in html and "&lt;script&gt;" in html
    assert "<td class='worse'>1</td>" in html


def test_a_malformed_request_line_is_skipped_and_named_not_a_crash(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, n=8, repeats=1, telemetry=False, toolcalls=False, torn=False)
    point = next(p for p in load.load_run(run_dir).points if p.status == "ok")
    file = run_dir / point.requests_file
    rows = file.read_text().splitlines()
    file.write_text("\n".join([json.dumps({**json.loads(rows[0]), "ttft_ms": "abc"}), *rows[1:]]) + "\n")
    run = load.load_run(run_dir)
    assert run.requests[point.point_id].n == len(rows) - 1
    assert run.warnings == (f"{point.requests_file}: 1 line(s) skipped, not the records run_bench.py writes "
                            "(first: request record: 'ttft_ms' should be float, not 'abc')",)


def test_the_bench_directory_itself_gets_a_hint_towards_latest(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=4, repeats=1, telemetry=False, toolcalls=False, quick=True)
    (tmp_path / "bench" / "latest").symlink_to(run.name)
    with pytest.raises(load.LoadError, match="did you mean .*latest"):
        load.load_run(tmp_path / "bench")
    assert load.load_run(tmp_path / "bench" / "latest").run_id == run.name


def _sweep_row(arm: str, wl: str, conc: int, met: bool) -> dict:
    return {"arm": arm, "workload": wl, "pattern": "concurrency", "concurrency": conc, "points_ok": 1,
            "requests": 48, "meets_slo": met, "ttft_n": 48}


def test_tail_cards_use_the_same_point_for_every_arm_without_a_long_run() -> None:
    rows = [_sweep_row("base", "agent", 16, False), _sweep_row("base", "tools", 8, True),
            _sweep_row("fp8", "agent", 16, True), _sweep_row("fp8", "agent", 64, False)]
    assert kpis.reference_point(rows) == ("agent", 16)
    assert kpis.tail_row(rows, "base")["workload"] == "agent"  # not the SLO-meeting tools point
    assert kpis.tail_row(rows, "fp8")["concurrency"] == 16
    assert kpis.tail_row([_sweep_row("x", "chat", 4, False), _sweep_row("x", "chat", 1, False)], "x")["concurrency"] == 4


def test_compare_matches_loads_across_prompt_counts_but_not_burst_sizes(ctx: figures.Context) -> None:
    other = [dataclasses.replace(g, num_prompts=g.num_prompts * 2) for g in ctx.groups]
    rows = tables.compare_rows(ctx.groups, other, SLO)
    assert {r["pattern"] for r in rows} == {"concurrency", "qps", "long", "cold", "warm"}  # burst size differs
    assert len(rows) == sum(1 for g in ctx.groups if g.pattern != "burst")


def test_capacity_card_names_and_flags_a_load_whose_point_failed_outright() -> None:
    rows = [_row(1, True), _row(8, True), _row(32, True),
            _row(64, False, points_ok=0, points_failed=1, requests=0, point_errors="server died (exit -9)")]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    # a crash under a load is a failure to serve it: capacity is bracketed there, and the error is named
    assert value == "w: 32" and "fails at 64" in detail and "server died (exit -9)" in detail and flagged


def test_a_load_with_one_crashed_repeat_is_missed_and_one_without_data_is_not_a_verdict() -> None:
    rows = [_row(1, True), _row(4, True, points_failed=1, repeats=2, point_errors="server died"),
            _row(16, True)]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    assert value == "w: 1" and "1 of 2 runs at 4 failed: server died" in detail and flagged
    rows = [_row(1, True), _row(4, False, requests=0), _row(16, True)]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    assert value == "w: 16+" and "no request data at 4" in detail and flagged


def test_a_capacity_whose_goodput_ci_straddles_the_slo_is_flagged() -> None:
    rows = [_row(4, True), _row(16, False, slo_decided=False, goodput_pct=98.8, goodput_lo_pct=96.6,
                                  goodput_hi_pct=99.6, requests=256)]
    value, detail, flagged = kpis._capacity(rows, "a", "concurrency")
    assert value == "w: 4" and "at 16 goodput 98.8% [96.6, 99.6] straddles the SLO" in detail and flagged
    # 256 of 256 good is "undecided" for 99% (Wilson lower bound 98.5%) on every run: that alone is no flag
    clean = [_row(4, True, slo_decided=False, goodput_pct=100.0), _row(16, False, goodput_pct=60.0)]
    assert kpis._capacity(clean, "a", "concurrency") == ("w: 4", "w: fails at 16; 400 tok/s at 4 (all requests)", False)


def test_goodput_ci_is_wilson_and_the_slo_verdict_knows_when_it_is_undecided() -> None:
    all_good = stats.wilson_ci(16, 16)
    assert all_good.value == 1.0 and 0.80 < all_good.lo < 0.81 and all_good.hi == 1.0  # not [100, 100]
    slo = stats.Slo(1000, 50, 99)
    assert not stats.slo_decided(stats.wilson_ci(32, 32), slo)  # 32/32 cannot show >= 99%
    assert stats.slo_decided(stats.wilson_ci(1000, 1000), slo) and stats.slo_decided(stats.wilson_ci(50, 100), slo)


def test_qps_chart_states_the_client_bound_rule_the_runner_applies(ctx: figures.Context) -> None:
    read = figures.qps_sweep(ctx).how_to_read
    assert "95%" not in read and "5%" in read and "3/√n" in read  # points.summarize: max(5%, 3/sqrt(n-1)) slack


def test_a_failed_no_tool_request_does_not_count_as_respecting_no_tool(run: load.Run) -> None:
    cases = [ToolCallCase("baseline", "none-0", "hi", None, None, True, True, 10.0),
             ToolCallCase("baseline", "none-1", "hi", None, None, True, False, 120_000.0,
                          "APITimeoutError: Request timed out.")]
    rows = {r["arm"]: r for r in tables.toolcall_rows(dataclasses.replace(run, toolcalls=tuple(cases)))}
    assert rows["baseline"]["no_tool_respected_pct"] == 50.0 and rows["baseline"]["ok_pct"] == 50.0


def test_cold_start_ttft_is_the_first_wave_not_the_whole_point() -> None:
    """After a flush only the first `concurrency` requests miss the prefix cache; the rest hit what they filled."""
    from types import SimpleNamespace

    n = 128
    start = np.arange(n, dtype=float)
    ttft = np.where(start < 16, 900.0, 40.0)  # 16 cold requests, then warm ones
    group = SimpleNamespace(concurrency=16, requests=SimpleNamespace(
        start_s=start[::-1].copy(), ok=np.ones(n, bool), ttft_ms=ttft[::-1].copy(), n=n))
    assert tables._first_wave_ttft_p50(group) == 900.0
    assert stats.percentile(ttft, 50) == 40.0  # what the card used to show: no cold cost at all


def _steady(conc: int, goodput_pct: float, tok_s: float, **extra: object) -> dict:
    """A steady row (llmhost.report.steady) of _row's point at `conc`."""
    fields = {theirs: math.nan for theirs in kpis.STEADY_FIELDS.values()}
    return {**fields, "arm": "a", "workload": "w", "pattern": "concurrency", "concurrency": conc,
            "request_rate": None, "num_prompts": None, "repeats_steady": 3, "steady_output_throughput": tok_s,
            "steady_goodput_pct": goodput_pct, "steady_slo": "met" if goodput_pct >= 99 else "missed", **extra}


def test_the_headline_cards_take_a_points_steady_window_where_it_has_one_and_say_so() -> None:
    # c=64 missed the SLO over all requests (its start-up wave) but meets it in its steady window
    rows = [_row(c, c == 16, num_prompts=None, load=f"c={c}") for c in (16, 64)]
    view = kpis.steady_view(rows, [_steady(64, 99.6, 7000.0)], 99.0)
    assert [r["basis"] for r in view] == [kpis.POOLED, kpis.STEADY]
    assert view[1]["meets_slo"] and view[1]["slo_decided"] and view[1]["output_throughput"] == 7000.0
    assert rows[1]["output_throughput"] == 6400.0  # the summary rows themselves are unchanged
    value, detail, _ = kpis._capacity(view, "a", "concurrency")
    assert value == "w: 64+" and detail.endswith("7,000 tok/s at 64 (steady window)")
    assert kpis._peak(view, "a").detail == "w c=64 (steady window)"
    # a point whose repeats were all not steady keeps its numbers over all requests
    unsteady = kpis.steady_view(rows, [_steady(64, 99.6, 7000.0, repeats_steady=0)], 99.0)
    assert unsteady[1]["basis"] == kpis.POOLED and unsteady[1]["output_throughput"] == 6400.0


def test_the_environment_card_says_how_the_run_did_against_its_estimate_only_when_it_recorded_one(
        tmp_path: Path, run: load.Run) -> None:
    from llmhost.bench import store
    from llmhost.bench.records import Estimate
    from llmhost.bench.sittings import EtaShown, SittingBegan, SittingEnded
    from llmhost.report import dashboard

    assert run.reckoning is None and "Time vs estimate" not in dashboard.env_card(run, SLO)  # recorded before
    root = make_run(tmp_path, n=8, repeats=1, telemetry=False, toolcalls=False, torn=False)
    doc = json.loads((root / "manifest.json").read_text())
    doc["estimate"] = dataclasses.asdict(Estimate(1200.0, True, "calibrated on ...", 4, 1200.0))
    (root / "manifest.json").write_text(json.dumps(doc))
    recorder = store.RunStore(root)
    for row in (SittingBegan(1, 0.0, 1100.0), EtaShown(1, 300.0, 1, 300.0, 900.0, "baseline", 0.0),
                EtaShown(1, 600.0, 2, 600.0, 720.0, "baseline", 0.0), SittingEnded(1, 1260.0)):
        recorder.append_sitting(row)
    with_estimate = load.load_run(root)
    card = dashboard.env_card(with_estimate, SLO)
    assert "<th class=l>Time vs estimate</th><td class=l>took 21m00s in 1 sitting vs estimate 20m00s (+5%)" in card
    assert "ETA held within +10%/+0% after each arm&#x27;s first point (bound ±25%)" in card
    assert dashboard.build(with_estimate, SLO).meta["estimate"]["actual_s"] == 1260.0
