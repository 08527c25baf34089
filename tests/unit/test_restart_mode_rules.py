"""What the restart-per-arm modes (--startup, --single-stream) share (llmhost.bench.restart_runs): which options they
refuse, the arms they restart, the run directory they open, the lock they run under and the line a cut-short run
ends with."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json

import pytest

from llmhost import config, files
from llmhost.bench import restart_runs, run_end, runlock, runner
from llmhost.bench.arms import ArmError


def _args(**given: object) -> argparse.Namespace:
    names = (*restart_runs.LOAD_OPTIONS, *restart_runs.MODES)
    return argparse.Namespace(**{**dict.fromkeys(names), **given})


def test_a_mode_needs_at_least_one_of_its_units():
    problem = restart_runs.mode_problem(_args(startup=0), "startup", "restart per arm", "restarts only")
    assert problem == "--startup must be >= 1 restart per arm (got 0)"
    assert restart_runs.mode_problem(_args(startup=1), "startup", "restart per arm", "restarts only") is None
    assert restart_runs.mode_problem(_args(), "startup", "restart per arm", "restarts only") is None  # not given


def test_a_mode_refuses_every_option_that_plans_load_points_and_the_other_mode():
    args = _args(single_stream=2, concurrency="64", only_missing=True, startup=3, duration_s=None, quick=False)
    problem = restart_runs.mode_problem(args, "single_stream", "stream per arm", "one stream per arm")
    assert problem == ("--single-stream measures one stream per arm, no load points: drop --concurrency, "
                       "--only-missing, --startup")
    assert restart_runs.mode_problem(_args(startup=2, single_stream=0), "startup", "u", "m") is None  # 0: not given


def _cfg(tmp_path, **env: str) -> config.Config:
    return dataclasses.replace(config.load(env), results_dir=str(tmp_path / "results"),
                               work_dir=str(tmp_path / "work"))


def test_the_arms_are_the_baseline_unless_named_plus_the_given_ones(tmp_path):
    cfg = _cfg(tmp_path)
    assert [a.name for a in restart_runs.pick_arms(cfg, None, [])] == ["baseline"]
    both = restart_runs.pick_arms(cfg, None, ["tok1=--tokenizer-worker-num 1"])
    assert [(a.name, a.flags) for a in both] == [("baseline", ()), ("tok1", ("--tokenizer-worker-num", "1"))]
    mine = dataclasses.replace(cfg, bench_user_arms="lean=--skip-server-warmup")  # BENCH_USER_ARMS, picked by name
    assert [(a.name, a.flags) for a in restart_runs.pick_arms(mine, ["lean"], [])] == [
        ("lean", ("--skip-server-warmup",))]
    with pytest.raises(ArmError):
        restart_runs.pick_arms(cfg, ["no-such-arm"], [])


def test_a_new_run_has_its_manifest_first_with_the_modes_own_field(tmp_path):
    cfg = _cfg(tmp_path)
    arms = restart_runs.pick_arms(cfg, None, [])
    run = restart_runs.new_run(cfg, arms, "startup", "lean", ["--startup", "3"], startup_restarts=3)
    assert run.root.parent == cfg.results_path / "bench" and run.root.name.endswith("-lean-startup")
    m = run.read_manifest()
    assert (m.run_id, m.seed, m.slo, m.workloads, m.plan, m.startup_restarts) == (run.run_id, 0, None, (), (), 3)
    assert [a.name for a in m.arms] == ["baseline"] and m.config == config.redacted(cfg)
    assert m.provenance.command == ("run_bench.py", "--startup", "3")
    untagged = restart_runs.new_run(cfg, arms, "single-stream", "", [], single_stream_requests=5)
    assert untagged.root.name.endswith("-single-stream") and "--" not in untagged.root.name[16:]


def test_a_manifest_that_cannot_be_written_leaves_no_run_directory(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)

    def full(*args, **kwargs):
        raise files.WriteError("cannot write manifest.json: No space left on device (0 MiB free there)")
    monkeypatch.setattr(restart_runs.store.RunStore, "write_manifest", full)
    with pytest.raises(files.WriteError):
        restart_runs.new_run(cfg, restart_runs.pick_arms(cfg, None, []), "startup", "", [], startup_restarts=1)
    assert list((cfg.results_path / "bench").iterdir()) == []


def test_the_mode_runs_under_the_bench_lock_and_a_second_run_is_refused(tmp_path, capsys):
    cfg = _cfg(tmp_path)
    arms = restart_runs.pick_arms(cfg, None, [])
    seen = []

    def measure(run) -> int:  # while it measures, the lock names its run directory and command
        seen.append((run.root, json.loads((cfg.state_dir / runlock.LOCK_FILE).read_text())))
        return 7

    def create():
        return restart_runs.new_run(cfg, arms, "startup", "", ["--startup", "1"], startup_restarts=1)
    assert restart_runs.run_locked(cfg, ["--startup", "1"], create, measure) == 7  # the mode's own exit code
    ((root, owner),) = seen
    assert root.is_dir() and owner["run_dir"] == str(root)
    assert owner["command"] == ["run_bench.py", "--startup", "1"]

    held = runlock.RunLock(cfg.state_dir)
    held.acquire(["run_bench.py", "--repeat", "3"])
    with held:
        assert restart_runs.run_locked(cfg, ["--startup", "1"], create, measure) == restart_runs.EXIT_BUSY == 75
    assert capsys.readouterr().err.startswith("[bench] error: another benchmark run holds this server: ")
    assert len(seen) == 1  # the refused run created and measured nothing


def test_an_unwritable_results_directory_is_one_line_before_anything_restarts(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = dataclasses.replace(_cfg(tmp_path), results_dir=str(blocker / "results"))
    called = []
    code = restart_runs.run_locked(cfg, [], lambda: called.append("create"), lambda run: called.append("measure"))
    err = capsys.readouterr().err
    assert code == 1 and called == [] and err.count("\n") == 1
    assert err.startswith(f"[bench] error: {cfg.source('RESULTS_DIR')}: RESULTS_DIR={cfg.results_dir}: ")


def test_a_run_directory_that_cannot_be_created_is_one_line_with_what_to_do(tmp_path, capsys):
    cfg = _cfg(tmp_path)

    def create():
        raise files.WriteError("cannot write manifest.json: No space left on device (0 MiB free there)")
    assert restart_runs.run_locked(cfg, [], create, lambda run: 0) == 1
    assert capsys.readouterr().err == ("[bench] error: cannot write manifest.json: No space left on device (0 MiB "
                                       "free there) — free space or fix permissions, then run again\n")


def test_a_cut_short_run_says_why_in_one_line_and_other_errors_propagate(tmp_path, capsys):
    cfg = _cfg(tmp_path)
    run = restart_runs.new_run(cfg, restart_runs.pick_arms(cfg, None, []), "startup", "", [], startup_restarts=1)
    code = restart_runs.cut_short(KeyboardInterrupt(), run, "./run_bench.py --startup 3")
    line = capsys.readouterr().err
    expected = run_end.ended_by(KeyboardInterrupt(), run.root, "./run_bench.py --startup 3")
    assert (line, code) == (expected[0] + "\n", expected[1])
    with pytest.raises(ZeroDivisionError):
        restart_runs.cut_short(ZeroDivisionError(), run, "x")


def test_a_bench_folder_that_is_a_file_is_the_problem_named(tmp_path, capsys):
    cfg = _cfg(tmp_path)
    cfg.results_path.mkdir(parents=True)
    (cfg.results_path / "bench").write_text("")  # the results folder is fine, its bench folder cannot be made
    assert restart_runs.run_locked(cfg, [], lambda: None, lambda run: 0) == 1
    assert "RESULTS_DIR=" in capsys.readouterr().err


def test_a_restart_passes_the_arms_flags_settings_and_extra_environment_and_logs_to_its_file(tmp_path, monkeypatch):
    cfg = dataclasses.replace(_cfg(tmp_path), server_env="A=1")
    run = restart_runs.new_run(cfg, restart_runs.pick_arms(cfg, None, []), "startup", "", [], startup_restarts=1)
    arm = restart_runs.pick_arms(cfg, None, ["gc=--schedule-policy lpm --tokenizer-worker-num 2 FREEZE_GC=off"])[1]
    seen = {}

    def restart(c, extra_args=(), settings=None, *, console, unless_stopped_since):
        console.info("launching")
        seen.update(cfg=c, extra_args=extra_args, settings=settings, since=unless_stopped_since)
        return "ready"
    monkeypatch.setattr(restart_runs.lifecycle, "restart", restart)
    monkeypatch.setattr(restart_runs, "BootWatch", lambda *a, **k: contextlib.nullcontext())
    assert restart_runs.restart(cfg, run, arm, 1234.5, ["--x", "1"], "B=2") == "ready"
    # a flag serve.sh owns through a setting travels as that setting, as an arm's always does (bench.arms)
    assert seen == {"cfg": cfg, "extra_args": ["--schedule-policy", "lpm", "--x", "1"],
                    "settings": {"TOKENIZER_WORKER_NUM": "2", "FREEZE_GC": "off", "SERVER_ENV": "A=1 B=2"},
                    "since": 1234.5}
    assert "launching" in (run.raw_dir() / "serve-gc.log").read_text()
    restart_runs.restart(cfg, run, arm, 1.0)
    assert seen["settings"] == {"TOKENIZER_WORKER_NUM": "2", "FREEZE_GC": "off"}  # no extra environment
    assert seen["extra_args"] == ["--schedule-policy", "lpm"]


def test_a_restart_the_user_stopped_ends_the_run(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    run = restart_runs.new_run(cfg, restart_runs.pick_arms(cfg, None, []), "startup", "", [], startup_restarts=1)

    def stopped(*a, **k):
        raise restart_runs.lifecycle.StoppedByUser("2026-12-05 12:00:00 UTC")
    monkeypatch.setattr(restart_runs.lifecycle, "restart", stopped)
    monkeypatch.setattr(restart_runs, "BootWatch", lambda *a, **k: contextlib.nullcontext())
    with pytest.raises(runner.UserStopped, match="^2026-12-05 12:00:00 UTC$"):
        restart_runs.restart(cfg, run, restart_runs.pick_arms(cfg, None, [])[0], 1.0)
