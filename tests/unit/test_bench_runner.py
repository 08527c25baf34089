"""The runner with the process and HTTP boundaries faked: a failed point is retried once, after a restart when the
server is dead, and recorded as failed when the retry fails too; a server the user stopped ends the run; a run restarts
the server only where the launch flags change; run_bench.py's one-line endings (a broken manifest, no points, a full
disk) and SIGTERM. One attempt of a point, with the load generator's output faked, is in test_bench_attempt.py."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from llmhost.bench import arms, points, records, store
from llmhost.bench import runner  # executes runner.py's plan
from llmhost.config import REPO_ROOT
from llmhost.bench.records import PointRecord, PointSummary


def _points(run: store.RunStore) -> list[PointRecord]:
    return records.read_records(run.points_path, PointRecord.from_dict).records


class FakeBench:
    def __init__(self, root):
        from types import SimpleNamespace

        self.store = store.RunStore.create(root)
        self.cfg = SimpleNamespace(state_dir=root / "state")
        self.started_at = time.time()
        self.done, self.lines, self.boots = 0, [], []
        self.kernel_profile = False

    def progress(self, text: str) -> None:
        self.lines.append(text)

    def boot_paid(self, lead: str, arms, started_at: float, error: str = "", is_fault: bool = False) -> None:
        self.boots.append((lead, is_fault))

    def spend(self, point, wall_s: float) -> None:
        pass


def _record(point, attempt, ok):
    summary = PointSummary(duration_s=1.0, completed=4, failed=0, request_throughput=4.0, input_throughput=1.0,
                           output_throughput=1.0, total_throughput=2.0, offered_rate=None, achieved_rate=4.0,
                           client_bound=False) if ok else None
    return PointRecord.of(point, attempt=attempt, status="ok" if ok else "failed",
                          error=None if ok else "load generator exited 1: refused", started_at=1.0, ended_at=2.0,
                          cache_flushed=True, summary=summary, requests_file="requests/x.jsonl")


@pytest.mark.parametrize("outcomes,alive,restarts,final", [
    ([True], True, 0, ["ok"]),
    ([False, True], False, 1, ["failed", "ok"]),
    ([False, False], False, 1, ["failed", "failed"]),
    ([False, True], True, 0, ["failed", "ok"]),
])
def test_a_failed_point_is_retried_once_restarting_a_dead_server_first(tmp_path, monkeypatch, outcomes,
                                                                       alive, restarts, final):
    bench = FakeBench(tmp_path)
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    reasons = []
    results = iter(outcomes)
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, next(results)))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: alive)
    monkeypatch.setattr(runner, "restart_server", lambda b, arm, reason="": reasons.append(reason) or "")
    ok = runner.run_point(bench, arms.REGISTRY["baseline"], point, last=None)
    lines = _points(bench.store)
    assert [r.status for r in lines] == final and [r.attempt for r in lines] == list(range(1, len(final) + 1))
    assert ok == (final[-1] == "ok") and len(reasons) == restarts and bench.done == 1
    assert bench.boots == [("baseline", True)] * restarts  # a fault's restart is paid, not planned
    # the restart is recorded with the point and the failure that caused it (servers/<arm>.json restarts)
    assert all(r.startswith(f"restarted after {point.point_id} attempt 1: load generator") for r in reasons)
    assert bench.store.done_points(only_missing=True) == {point.point_id}
    assert bench.store.done_points() == ({point.point_id} if final[-1] == "ok" else set())


@pytest.mark.parametrize("last_attempt,attempts", [(1, [2]), (2, [3, 4]), (3, [4]), (4, [5, 6])])
def test_a_resumed_point_gets_its_retry_or_after_a_failed_retry_a_fresh_pair(tmp_path, monkeypatch, last_attempt,
                                                                              attempts):
    bench = FakeBench(tmp_path)
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, False))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: True)
    last = _record(point, last_attempt, False)
    assert runner.run_point(bench, arms.REGISTRY["baseline"], point, last=last) is False
    assert [r.attempt for r in _points(bench.store)] == attempts


def test_a_server_the_user_stopped_is_not_restarted_and_ends_the_run(tmp_path, monkeypatch):
    from llmhost.serve import lifecycle

    bench = FakeBench(tmp_path)
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    restarts = []
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, False))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: False)
    monkeypatch.setattr(runner, "restart_server", lambda b, arm: restarts.append(arm) or "")
    bench.cfg.state_dir.mkdir()
    (bench.cfg.state_dir / lifecycle.USER_STOP_MARK).write_text(f"{time.time() + 1}\n")  # what stop() writes
    with pytest.raises(runner.UserStopped) as stopped:
        runner.run_point(bench, arms.REGISTRY["baseline"], point, last=None)
    assert restarts == [] and str(stopped.value).endswith("UTC")
    assert [r.attempt for r in _points(bench.store)] == [1]  # the attempt it was in is recorded, failed
    (bench.cfg.state_dir / lifecycle.USER_STOP_MARK).write_text(f"{time.time() - 60}\n")  # a stop before the run
    assert runner.run_point(bench, arms.REGISTRY["baseline"], point, last=_record(point, 1, False)) is False


def test_eta_and_durations_read_like_the_progress_lines():
    assert runner.fmt_s(190) == "3m10s" and runner.fmt_s(3 * 3600 + 120) == "3h02m"


@pytest.mark.parametrize("text,damage", [
    ('{"schema": 1', "is not readable JSON"),
    ('{"schema": 1, "plan": []}', "is not a manifest run_bench.py wrote (manifest lacks 'created_at')"),
    ('{"schema": 9}', "manifest has schema 9, newer than this toolkit reads (1) — update the toolkit"),
])
def test_resume_and_the_dashboard_say_the_same_one_line_about_a_broken_manifest(tmp_path, capsys, run_bench, text,
                                                                                 damage):
    from llmhost.report import load

    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(SystemExit) as exited:  # refused with the arguments, before any work
        run_bench.main(["--resume", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1 and damage in err
    with pytest.raises(load.LoadError) as dashboard:
        load.load_run(tmp_path)
    assert str(dashboard.value) in err  # the same words (run_bench adds its usage suffix)


def test_a_selection_without_points_ends_with_one_line_instead_of_a_traceback(capsys, run_bench):
    assert run_bench.main(["--quick", "--workloads", "long"]) == 2  # --quick has agent and chat points only
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no points" in err and "--workloads" in err


def test_dry_run_estimate_counts_restarts_only_for_arms_with_points(capsys, run_bench, monkeypatch):
    standin = str(REPO_ROOT / "tests" / "standin")  # its load generator answers --help like SGLang's
    monkeypatch.setenv("SGLANG_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (standin, os.environ.get("PYTHONPATH", "")) if p))
    assert run_bench.main(["--quick", "--workloads", "chat", "--dry-run"]) == 0  # one baseline qps point
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["arms"] == ["baseline"] and doc["points"] == 1
    assert doc["estimate_s"] < runner.arm_overhead_s(True) * 2


def test_sigterm_stops_the_run_and_its_load_generator_like_ctrl_c(tmp_path):
    import socket

    from llmhost.bench.loadgen_process import LoadGenerator
    from standin.harness import standin_env

    hung = socket.socket()  # accepts, never answers: the point runs until stopped
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    point = points.make_point("baseline", "chat", "concurrency", 2, None, 4, 1)
    argv = points.bench_argv(point, points.WORKLOADS["chat"], base_url=f"http://127.0.0.1:{hung.getsockname()[1]}",
                             model_dir="/m", served_model_name="m", seed=1, output_file=tmp_path / "o")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        runner.interrupt_on_sigterm()
        with LoadGenerator(sys.executable, "sglang.benchmark.serving", standin_env(), tmp_path / "log") as gen:
            gen.start()
            child = gen.proc.pid
            # what `kill PID` or timeout(1) sends run_bench.py, once the point is under way
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
            with pytest.raises(KeyboardInterrupt):  # run_bench.py turns this into "interrupted — --resume ..."
                gen.run(argv, tmp_path / "r", limit_s=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
        hung.close()
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_a_full_disk_mid_run_ends_with_one_line_naming_the_resume(tmp_path, capsys, monkeypatch, run_bench, captures):
    from llmhost import files, provenance
    from llmhost.bench import telemetry

    help_text = (captures / "bench_serving_help.txt").read_text()
    monkeypatch.setenv("RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(points, "find_loadgen", lambda python, env: ("sglang.benchmark.serving", help_text))
    monkeypatch.setattr(provenance, "package_versions", lambda python: {})  # no server venv here
    monkeypatch.setattr(telemetry.Sampler, "start", lambda self: self)
    monkeypatch.setattr(telemetry.Sampler, "stop", lambda self: None)
    monkeypatch.setattr(runner, "interrupt_on_sigterm", lambda: None)

    def disk_full(*args: object) -> None:
        raise files.WriteError("cannot write points.jsonl: No space left on device (0 MiB free there)")

    monkeypatch.setattr(runner, "run_arms", disk_full)
    assert run_bench.main(["--quick", "--arms", "baseline", "--workloads", "chat"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("[bench] error: cannot write points.jsonl: No space left on device")
    assert f"--resume {tmp_path / 'bench'}" in last and "Traceback" not in last


def test_the_server_restarts_only_where_the_launch_flags_change_and_each_boot_runs_its_points_shuffled(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from llmhost.bench.records import ServerRecord

    same = arms.parse_user_arm("p16b=--page-size 16")  # the same flags as the built-in page-16 arm
    chosen = [arms.REGISTRY["baseline"], arms.REGISTRY["page-16"], same, arms.REGISTRY["triton"]]
    plan = points.build_plan(chosen, ["agent", "chat"], True, 2)
    run = store.RunStore.create(tmp_path)
    boots, ran, paid = [], [], []

    def restart(b, arm, reason=""):
        boots.append(arm.name)
        b.store.write_server(ServerRecord(arm=arm.name, launch_command=f"launch {' '.join(arm.flags)}",
                                          server_info={}, ready_s=1.0, started_at="2026-01-01T00:00:00Z"))
        return ""

    prepared: list[list[str]] = []

    class Gen:
        def __init__(self, *args: object) -> None:
            self.pid = -1

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def launch(self, prepare: list[list[str]]) -> None:
            prepared.extend(prepare)

        def start(self) -> None:
            self.pid = len(boots)  # after its boot's restart

    monkeypatch.setattr(runner, "restart_server", restart)
    monkeypatch.setattr(runner, "LoadGenerator", Gen)
    monkeypatch.setattr(runner, "check_tools", lambda b, arm: None)
    monkeypatch.setattr(runner, "run_point", lambda b, arm, p, attempt: ran.append((b.loadgen.pid, arm.name, p)))
    cfg = SimpleNamespace(sglang_python="python", base_url="http://h:1", model_dir="/m", served_model_name="q",
                          state_dir=run.root / "state")
    watched: list = []
    bench = SimpleNamespace(store=run, cfg=cfg, module="m", env={}, seed=3,
                            loadgen=None, clock=None, budget_end=None, only_missing=False, check_tool_calls=True,
                            progress=lambda text: None, sampler=SimpleNamespace(watch_client=watched.append),
                            boot_paid=lambda lead, names, started_at, error="": paid.append((lead, set(names))))
    runner.run_arms(bench, chosen, plan, quick=True)
    assert boots == ["baseline", "page-16", "triton"]  # p16b reuses the page-16 boot
    assert len(watched) == 6 and watched[1::2] == [None] * 3  # each boot's load generator sampled, then let go
    assert paid == [("baseline", {"baseline"}), ("page-16", {"page-16", "p16b"}), ("triton", {"triton"})]
    primed = sum(map(points.is_primed, plan))  # a primed point's priming pass has its own dataset
    assert 0 < primed < len(plan)  # the quick plan's agent points (not its chat one)
    assert len(prepared) == len(plan) + primed  # every pass's dataset offered to the load generator before its boot
    assert sorted(p.point_id for _, _, p in ran) == sorted(p.point_id for p in plan)
    assert all(name == p.arm for _, name, p in ran)
    assert {pid for pid, name, _ in ran if name in ("page-16", "p16b")} == {2}  # one load generator for the boot
    shared = [p for _, name, p in ran if name in ("page-16", "p16b")]
    assert shared == points.boot_order(shared, 3) and shared != sorted(shared, key=lambda p: (p.arm, p.repeat))
    copy = json.loads((run.root / "servers" / "p16b.json").read_text())
    assert copy["arm"] == "p16b" and copy["launch_command"] == "launch --page-size 16"


def test_the_load_generator_keeps_its_bytecode_where_the_server_does(monkeypatch, tmp_path):
    """It imports SGLang too: in a shell that forbids writing bytecode, it writes it to BYTECODE_CACHE, and the API
    key reaches it only through its environment."""
    import dataclasses

    from llmhost import config

    key = tmp_path / "key"
    key.write_text("sk-test\n")
    key.chmod(0o600)
    cfg = dataclasses.replace(config.load({}), bytecode_cache=str(tmp_path / "pyc"), api_key_file=str(key))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = runner.loadgen_env(cfg)
    assert (env["PYTHONDONTWRITEBYTECODE"], env["PYTHONPYCACHEPREFIX"]) == ("", str(tmp_path / "pyc"))
    assert env["OPENAI_API_KEY"] == "sk-test"
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert "PYTHONPYCACHEPREFIX" not in runner.loadgen_env(dataclasses.replace(cfg, api_key_file=""))


@pytest.mark.parametrize("ok", [True, False])
def test_with_kernel_profile_an_ok_point_is_profiled_and_a_failed_one_leaves_the_eta_without_its_pass(
        tmp_path, monkeypatch, ok):
    bench = FakeBench(tmp_path)
    bench.kernel_profile = True
    done: list[tuple[str, float]] = []
    bench.clock = SimpleNamespace(point_done=lambda p, wall_s: done.append((p.point_id, wall_s)))
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    profiled = []
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, ok))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: True)
    monkeypatch.setattr(runner, "profile_point", lambda b, p: profiled.append(p.point_id))
    assert runner.run_point(bench, arms.REGISTRY["baseline"], point, last=None) is ok
    assert profiled == ([point.point_id] if ok else [])
    assert done == ([] if ok else [(point.point_id + ".profile", 0.0)])  # profile_point itself counts an ok one
