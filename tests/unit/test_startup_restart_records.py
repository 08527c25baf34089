"""run_bench.py --startup: what one restart records, which starts the medians count, the exit code, the JSON."""
from __future__ import annotations

import dataclasses

import types

from llmhost.bench import restart_runs, runner, startup_bench
from llmhost.bench.records import StartupRecord
from llmhost.bench.store import RunStore
from llmhost.serve import startup
from llmhost.serve.console import ServeError

ARM = types.SimpleNamespace(name="tok1", flags=("--tokenizer-worker-num", "1"))


def ready_info(timeline: startup.Timeline | None, waited_s: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(timeline=timeline, waited_s=waited_s, launch_command="python -m sglang x")


def test_a_restart_records_the_logs_launch_to_ready_time_and_its_phases(monkeypatch):
    timeline = startup.Timeline(40.0, (startup.Phase("launcher", 12.0), startup.Phase("first generation", 28.0)))
    monkeypatch.setattr(restart_runs, "restart", lambda *a, **k: ready_info(timeline, 37.5))
    rec = startup_bench.restart_once(None, None, ARM, 2, 0.0)
    assert (rec.arm, rec.repeat, rec.status, rec.ready_s) == ("tok1", 2, "ok", 40.0)
    assert rec.phases == {"launcher": 12.0, "first generation": 28.0}
    assert rec.launch_command == "python -m sglang x" and (rec.imports_s, rec.import_processes) == ({}, 0)


def test_without_a_timeline_a_restart_records_the_wait_and_no_phases(monkeypatch):
    monkeypatch.setattr(restart_runs, "restart", lambda *a, **k: ready_info(None, 37.5))
    rec = startup_bench.restart_once(None, None, ARM, 1, 0.0)
    assert (rec.status, rec.ready_s, rec.phases) == ("ok", 37.5, {})


def test_a_restart_that_failed_is_a_failed_record_with_the_first_line_of_the_error(monkeypatch):
    def refuse(*a, **k):
        raise ServeError("the server exited\nTraceback ...")
    monkeypatch.setattr(restart_runs, "restart", refuse)
    rec = startup_bench.restart_once(None, None, ARM, 3, 0.0)
    assert (rec.status, rec.ready_s, rec.phases, rec.error) == ("failed", None, {}, "the server exited")


def start(repeat: int, status: str = "ok", imports_s: dict[str, float] | None = None) -> StartupRecord:
    ok = status == "ok"
    return StartupRecord("a", repeat, status, "2026-12-01T10:00:00Z", 50.0, 40.0 if ok else None,
                         {"launcher": 10.0} if ok else {}, error="" if ok else "boom", imports_s=imports_s or {},
                         import_processes=3 if imports_s else 0)


def test_the_run_exits_1_when_any_restart_failed_and_0_when_all_started(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runner, "interrupt_on_sigterm", lambda: None)
    for statuses, code in ((("ok", "failed", "ok"), 1), (("ok", "ok", "ok"), 0)):
        made = iter([start(i + 1, s) for i, s in enumerate(statuses)])
        monkeypatch.setattr(startup_bench, "restart_once", lambda *a, **k: next(made))
        run = RunStore(tmp_path / f"run-{code}")
        run.root.mkdir()
        assert startup_bench.measure_all(None, run, [ARM], 3, estimate_s=60.0) == code
        assert len((run.root / "startups.jsonl").read_text().splitlines()) == 3
    capsys.readouterr()


def test_each_restart_says_how_long_the_rest_will_take_from_the_runs_own_warm_restarts(monkeypatch, tmp_path, capsys):
    """The first restart of a run pays the host's cold caches: until a second one ends, the rest is estimated with
    the cost model's restart; then with the median of the run's restarts after the first."""
    monkeypatch.setattr(runner, "interrupt_on_sigterm", lambda: None)
    whole = iter([95.0, 34.0, 36.0, 35.0])
    made = iter([dataclasses.replace(start(i + 1), restart_s=next(whole)) for i in range(4)])
    monkeypatch.setattr(startup_bench, "restart_once", lambda *a, **k: next(made))
    run = RunStore(tmp_path / "run")
    run.root.mkdir()
    assert startup_bench.measure_all(None, run, [ARM], 4, estimate_s=60.0) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "ready in" in ln]
    assert [ln.rsplit("ETA ", 1)[1] if "ETA " in ln else None for ln in lines] == ["3m00s", "1m08s", "0m35s", None]


def test_the_import_median_counts_only_the_starts_that_were_profiled():
    rows = [start(1, imports_s={"torch": 4.0}), start(2, imports_s={"torch": 6.0}), start(3)]
    (arm,) = startup_bench.summarize(rows)
    assert (arm.ok, arm.imports_starts, arm.imports.packages_s) == (3, 2, {"torch": 5.0})
    assert startup_bench.table_lines([arm])[-1].startswith("a (median of 2 starts): ")


def test_a_phase_sglang_does_not_log_goes_after_the_known_ones():
    assert startup_bench.in_log_order(["router", "weights", "launcher"]) == ["launcher", "weights", "router"]


def test_the_closing_json_keeps_seconds_to_two_decimals(tmp_path):
    rows = [StartupRecord("a", 1, "ok", "2026-12-01T10:00:00Z", 50.456, 41.234, {"launcher": 12.345})]
    doc = startup_bench.closing(RunStore(tmp_path / "r"), startup_bench.summarize(rows), 1)["arms"]["a"]
    assert (doc["ready_s_median"], doc["restart_s_median"], doc["phases_s_median"]) == (41.23, 50.46,
                                                                                         {"launcher": 12.35})
