"""run_bench.py --startup's pure parts: medians per arm over its restarts, the table, the closing JSON."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from llmhost.bench import restart_runs, startup_bench
from llmhost.bench.records import StartupRecord
from llmhost.bench.store import RunStore


def start(arm: str, repeat: int, ready_s: float | None, phases: dict[str, float], status: str = "ok") -> StartupRecord:
    return StartupRecord(arm, repeat, status, "2026-12-01T10:00:00Z", (ready_s or 5.0) + 10, ready_s, phases,
                         error="" if status == "ok" else "boom")


def test_medians_per_arm_over_its_ok_starts_with_min_and_max():
    rows = [start("baseline", 1, 161, {"launcher": 27, "prefill graphs": 55}),
            start("baseline", 2, 159, {"launcher": 25, "prefill graphs": 57}),
            start("baseline", 3, 170, {"launcher": 30, "prefill graphs": 50}),
            start("nopcg", 1, 100, {"launcher": 26}), start("nopcg", 2, None, {}, status="failed")]
    base, nopcg = startup_bench.summarize(rows)
    assert (base.arm, base.ok, base.failed, base.ready_s, base.ready_min_s, base.ready_max_s) == \
        ("baseline", 3, 0, 161, 159, 170)
    assert base.phases == {"launcher": 27, "prefill graphs": 55} and base.restart_s == 171
    assert (nopcg.ok, nopcg.failed, nopcg.ready_s, nopcg.phases) == (1, 1, 100, {"launcher": 26})


def test_a_phase_one_start_did_not_log_takes_the_median_of_those_that_did():
    rows = [start("a", 1, 40, {"launcher": 10, "weights": 4}), start("a", 2, 40, {"launcher": 20}),
            start("a", 3, 40, {"launcher": 30, "weights": 6})]
    assert startup_bench.summarize(rows)[0].phases == {"launcher": 20, "weights": 5}


def test_an_arm_whose_starts_all_failed_has_no_medians_and_shows_dashes():
    (arm,) = startup_bench.summarize([start("bad", 1, None, {}, status="failed")])
    assert (arm.ok, arm.failed, arm.ready_s, arm.restart_s, arm.phases) == (0, 1, None, None, {})
    head, row = startup_bench.table_lines([arm])
    assert row.split()[:4] == ["bad", "0", "+1", "failed"] and row.split()[-2:] == ["-", "-"]


def test_the_table_has_one_column_per_phase_in_log_order_and_aligned_rows():
    rows = [start("baseline", 1, 161, {"launcher": 27, "prefill graphs": 55}),
            start("tok1", 1, 120, {"launcher": 26, "HTTP + tokenizer workers": 3})]
    head, base, tok1 = startup_bench.table_lines(startup_bench.summarize(rows))
    assert head.split("  ")[0].strip() == "arm" and head.index("launcher") < head.index("prefill graphs") \
        < head.index("HTTP + tokenizer workers")
    assert len(head) == len(base) == len(tok1)
    assert "161 (161-161)" in base and base.rstrip().endswith("-")  # baseline logged no tokenizer phase


def test_the_closing_json_names_the_run_and_each_arms_medians(tmp_path: Path):
    run = RunStore(tmp_path / "20261201-100000-startup")
    rows = [start("baseline", 1, 30, {"launcher": 5}), start("baseline", 2, 32, {"launcher": 7})]
    doc = startup_bench.closing(run, startup_bench.summarize(rows), 2)
    assert doc["run_dir"] == str(run.root) and doc["restarts_per_arm"] == 2
    assert doc["arms"]["baseline"]["ready_s_median"] == 31 and doc["arms"]["baseline"]["phases_s_median"] == \
        {"launcher": 6}


def test_a_startup_record_round_trips_through_its_json():
    rec = start("baseline", 2, 27.0, {"launcher": 5.0, "first generation": 2.0})
    assert StartupRecord.from_dict(rec.to_dict()) == rec


@pytest.mark.parametrize("given,needle", [
    ({"startup": 0}, "--startup must be >= 1"),
    ({"startup": 2, "quick": True, "rates": "2"}, "drop --rates, --quick"),
    ({"startup": 2, "budget_min": 20.0}, "drop --budget-min"),
])
def test_startup_refuses_options_that_plan_load_points(given, needle):
    args = argparse.Namespace(**{**{name: None for name in restart_runs.LOAD_OPTIONS}, **given})
    assert needle in startup_bench.problem(args)


def test_startup_alone_is_fine():
    args = argparse.Namespace(**{name: None for name in restart_runs.LOAD_OPTIONS}, startup=3)
    assert startup_bench.problem(args) is None


def test_an_arms_import_profile_is_the_median_per_package_over_its_profiled_starts(tmp_path: Path):
    def profiled(repeat: int, imports: dict[str, float]) -> StartupRecord:
        return dataclasses.replace(start("baseline", repeat, 60, {"launcher": 20}), imports_s=imports,
                                   import_processes=3)

    rows = [profiled(1, {"torch": 9.0, "sglang": 12.0}), profiled(2, {"torch": 11.0, "sglang": 10.0, "jinja2": 1.0}),
            profiled(3, {"torch": 10.0, "sglang": 14.0})]
    (arm,) = startup_bench.summarize(rows)
    assert arm.imports_starts == 3 and arm.imports.processes == 3
    assert arm.imports.packages_s == {"sglang": 12.0, "torch": 10.0, "jinja2": 0.0}  # not imported: 0 in that start
    assert startup_bench.table_lines([arm])[-1] == \
        "baseline (median of 3 starts): imports 22.0 s summed over 3 processes: sglang 12.0 s, torch 10.0 s, " \
        "jinja2 0.0 s"
    doc = startup_bench.closing(RunStore(tmp_path / "r"), [arm], 3)["arms"]["baseline"]
    assert doc["imports_s_median"] == {"sglang": 12.0, "torch": 10.0, "jinja2": 0.0}
    assert doc["imports_s_medians_sum"] == 22.0 and doc["import_processes"] == 3
    assert StartupRecord.from_dict(rows[1].to_dict()) == rows[1]
    (plain,) = startup_bench.summarize([start("a", 1, 60, {})])
    assert plain.imports is None and "imports_s_median" not in startup_bench.closing(
        RunStore(tmp_path / "p"), [plain], 1)["arms"]["a"]


def test_an_import_profile_without_startup_is_refused():
    args = argparse.Namespace(**{name: None for name in restart_runs.LOAD_OPTIONS}, startup=None, import_profile=True)
    assert "give it with --startup N" in startup_bench.problem(args)
