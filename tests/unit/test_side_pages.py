"""The pages of runs without load points on hand-made records: a --startup run's phase bars and table of medians,
a --single-stream run's time-per-token bar and table, the run's kind read from its manifest, and damaged records
(a torn last line named, no readable record refused)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fixtures_side import PHASES, startup, stream_arm, write_side_run
from llmhost.bench import stream_breakdown
from llmhost.bench.startup_bench import summarize
from llmhost.report import load, side_runs, startup_page, stream_page

STARTS = [startup("baseline", 1, 40.0), startup("baseline", 2, 30.0), startup("baseline", 3, 32.0),
          startup("no-prefix-cache", 1, 0, error="exited 1: unknown flag"), startup("no-prefix-cache", 2, 50.0)]


def side_run(tmp_path: Path, kind: str, records: list, torn: bool = False) -> load.SideRun:
    path = write_side_run(tmp_path, kind, records, torn=torn)
    found = side_runs.kind_of(path)
    assert found is side_runs.KINDS["start-up" if kind == "startup" else "single-stream"]
    return side_runs.load(path, found)


def traces(chart: startup_page.Chart) -> dict[str, object]:
    return {t.name: t for t in chart.figure.data}


def test_the_median_bar_of_each_arm_stacks_its_phase_medians_in_log_order_and_ends_at_its_median_ready(tmp_path):
    run = side_run(tmp_path, "startup", STARTS)
    phases = startup_page.phase_order(list(run.records))
    chart = startup_page.median_phases(run, summarize(list(run.records)), phases)
    assert phases == list(PHASES) and [t.name for t in chart.figure.data] == [*PHASES, "ready (median)"]
    weights = traces(chart)["weights"]
    assert list(weights.y) == ["Baseline (FlashInfer)", "No prefix cache"]
    assert list(weights.x) == pytest.approx([32.0 * 0.30, 50.0 * 0.30])  # median of 40, 30, 32 is 32
    assert list(traces(chart)["ready (median)"].x) == [32.0, 50.0]
    colors = {t.name: t.marker.color for t in chart.figure.data[:-1]}
    assert len(set(colors.values())) == len(PHASES)  # one colour per phase


def test_every_restart_is_its_own_bar_and_a_failed_one_is_red_as_long_as_it_took(tmp_path):
    run = side_run(tmp_path, "startup", STARTS)
    chart = startup_page.every_restart(run, list(PHASES))
    failed = traces(chart)["failed"]
    assert list(failed.y) == ["Baseline (FlashInfer) #1", "Baseline (FlashInfer) #2", "Baseline (FlashInfer) #3",
                              "No prefix cache #1", "No prefix cache #2"]
    assert list(failed.x) == [None, None, None, 61.5, None]
    assert list(traces(chart)["ready"].x) == [40.0, 30.0, 32.0, None, 50.0]
    assert traces(chart)["launcher"].x[3] is None


def test_the_table_gives_flags_starts_and_medians_and_lists_each_failure_with_its_error(tmp_path):
    run = side_run(tmp_path, "startup", STARTS)
    rows = startup_page.table_rows(run, summarize(list(run.records)))
    assert rows[0]["Flags"] == "(our defaults)" and rows[1]["Flags"] == "--disable-radix-cache"
    assert rows[0]["Starts ok / failed"] == "3 / 0" and rows[1]["Starts ok / failed"] == "1 / 1"
    assert rows[0]["Ready s, median (min–max)"] == "32.0 (30.0–40.0)" and rows[0]["weights s"] == "9.6"
    assert rows[0]["Restart s, median"] == "34.0"
    html = startup_page.build(run)
    assert "Failed restarts (1)" in html and "exited 1: unknown flag" in html and html.count("plotly.js v") == 1


def test_an_import_profile_gets_its_table_of_package_medians_and_a_run_without_one_no_section(tmp_path):
    def profiled(arm: str, repeat: int, imports: dict[str, float]):
        return dataclasses.replace(startup(arm, repeat, 60.0), imports_s=imports, import_processes=3)

    records = [profiled("baseline", 1, {"sglang": 12.0, "torch": 9.0, "json": 0.5}),
               profiled("baseline", 2, {"sglang": 14.0, "torch": 11.0, "json": 0.5}),
               profiled("no-prefix-cache", 1, {"torch": 8.0, "sglang": 7.0})]
    run = side_run(tmp_path / "p", "startup", records)
    html = startup_page.imports_html(run, summarize(list(run.records)))
    head = [h.split("<")[0] for h in html.split("<th class=")[1:]]
    assert head == ["l>Arm", "r>Starts", "r>Processes", "r>sglang s", "r>torch s", "r>json s", "r>the rest s",
                    "r>sum s"]
    assert "<td>13.0</td><td>10.0</td><td>0.5</td><td>0.0</td><td>23.5</td>" in html  # baseline's medians
    assert "<td>7.0</td><td>8.0</td><td>0.0</td><td>0.0</td><td>15.0</td>" in html
    assert "CPython's import profile" in startup_page.build(run)
    plain = side_run(tmp_path / "q", "startup", STARTS)
    assert startup_page.imports_html(plain, summarize(list(plain.records))) == ""
    assert "CPython's import profile" not in startup_page.build(plain)


def test_a_run_where_no_restart_got_ready_says_so_instead_of_an_empty_chart(tmp_path):
    run = side_run(tmp_path, "startup", [startup("baseline", 1, 0, error="timed out")])
    chart = startup_page.median_phases(run, summarize(list(run.records)), [])
    assert chart.figure is None and "no restart reached ready" in chart.missing


def test_the_stream_bar_stacks_floor_gpu_cpu_and_streaming_up_to_the_client_mean(tmp_path):
    run = side_run(tmp_path, "single-stream", [stream_arm("baseline")])
    chart = stream_page.time_per_token(run, [stream_breakdown.breakdown(r) for r in run.records])
    parts = {t.name: t.x[0] for t in chart.figure.data}
    assert list(parts) == ["weight-read floor", "GPU above floor", "CPU gap", "streaming", "client ITL p50"]
    assert parts["weight-read floor"] == pytest.approx(8_044_544_000 / 4800e9 * 1000)
    assert sum(v for k, v in parts.items() if k != "client ITL p50") == pytest.approx(3.7)  # the client's mean
    assert parts["client ITL p50"] == 3.55


def test_a_part_not_measured_is_drawn_whole_under_its_own_name_never_split_by_a_guess(tmp_path):
    recs = [stream_arm("baseline", peak_gb_s=None, floor_note="GPU not known"),
            stream_arm("no-prefix-cache", occupancy_pct=None, gpu_forward_ms=None)]
    run = side_run(tmp_path, "single-stream", recs)
    chart = stream_page.time_per_token(run, [stream_breakdown.breakdown(r) for r in run.records])
    parts = {t.name: list(t.x) for t in chart.figure.data}
    assert parts["GPU forward (floor not stated)"] == [2.9, None]
    assert parts["server step (not split: no GPU forward)"] == [None, 3.4]
    assert parts["CPU gap"] == [pytest.approx(0.5), None]
    assert "weight-read floor" not in parts  # the second arm's floor lies inside its unsplit step


def test_the_stream_table_has_every_terminal_column_with_its_cells_and_the_notes_say_what_is_missing(tmp_path):
    recs = [stream_arm("baseline"), stream_arm("no-prefix-cache", peak_gb_s=None, floor_note="GPU not known")]
    run = side_run(tmp_path, "single-stream", recs)
    rows = stream_page.table_rows(list(run.records))
    assert list(rows[0])[:len(stream_breakdown.COLUMNS)] == list(stream_breakdown.COLUMNS)
    terminal = stream_breakdown.table_lines([stream_breakdown.breakdown(r) for r in recs])
    for row, line in zip(rows, terminal[1:]):  # the terminal's cells, in its order
        at = 0
        for column in stream_breakdown.COLUMNS:
            at = line.index(row[column], at) + len(row[column])
    assert rows[1]["floor"] == rows[1]["BW share"] == "-" and rows[0]["floor"] == "1.68"
    assert "floor not stated: GPU not known" in stream_page.notes_html(run)
    assert "Every instrument" in stream_page.notes_html(side_run(tmp_path / "b", "single-stream", recs[:1]))


def test_a_torn_last_line_is_skipped_and_named(tmp_path):
    run = side_run(tmp_path, "startup", STARTS[:2], torn=True)
    assert len(run.records) == 2 and run.warnings == ("startups.jsonl: a torn last line (a crash mid-write) was "
                                                      "skipped",)
    assert "a torn last line" in startup_page.build(run)


def test_a_side_run_without_a_readable_record_is_refused_in_one_line(tmp_path):
    path = write_side_run(tmp_path, "single-stream", [], torn=True)
    with pytest.raises(load.LoadError, match=r"is a single-stream run with no readable arms \(stream_arms.jsonl: a "
                                              r"torn last line.*\) — measure again with ./run_bench.py "
                                              r"--single-stream N"):
        side_runs.load(path, side_runs.KINDS["single-stream"])


def test_a_run_with_load_points_is_no_side_run(tmp_path):
    from fixtures_bench import make_run
    assert side_runs.kind_of(make_run(tmp_path, n=8, repeats=1, telemetry=False, toolcalls=False)) is None
