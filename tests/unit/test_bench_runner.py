"""The runner's retry rule with the process and HTTP boundaries faked: a failed point is retried once, after a
restart when the server is dead, and recorded as failed when the retry fails too."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from llmhost import arms, points, store
from llmhost import runner  # executes runner.py's plan


class FakeBench:
    def __init__(self, root):
        self.store = store.RunStore.create(root)
        self.cfg = None
        self.done, self.lines = 0, []

    def progress(self, text: str) -> None:
        self.lines.append(text)

    def spend(self, estimate_s: float) -> None:
        pass


def _record(point, attempt, ok):
    summary = {"completed": 4, "failed": 0, "output_throughput": 1.0, "client_bound": False} if ok else {}
    return {**point.as_plan(), "attempt": attempt, "status": "ok" if ok else "failed",
            "error": None if ok else "load generator exited 1: refused", "started_at": 1.0, "ended_at": 2.0,
            "cache_flushed": True, "summary": summary, "requests_file": "requests/x.jsonl"}


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
    calls = {"restart": 0}
    results = iter(outcomes)
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, next(results)))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: alive)
    monkeypatch.setattr(runner, "restart_server", lambda b, arm: calls.__setitem__("restart", calls["restart"] + 1) or "")
    ok = runner.run_point(bench, arms.REGISTRY["baseline"], point, first_attempt=1)
    lines = store.read_jsonl(bench.store.points_path)
    assert [r["status"] for r in lines] == final and [r["attempt"] for r in lines] == list(range(1, len(final) + 1))
    assert ok == (final[-1] == "ok") and calls["restart"] == restarts and bench.done == 1
    assert bench.store.done_points() == {point.point_id}


def test_a_resumed_point_that_already_failed_once_gets_only_its_retry(tmp_path, monkeypatch):
    bench = FakeBench(tmp_path)
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    monkeypatch.setattr(runner, "attempt_point", lambda b, p, attempt: _record(p, attempt, False))
    monkeypatch.setattr(runner, "server_alive", lambda cfg: True)
    assert runner.run_point(bench, arms.REGISTRY["baseline"], point, first_attempt=2) is False
    assert [r["attempt"] for r in store.read_jsonl(bench.store.points_path)] == [2]


def test_eta_and_durations_read_like_the_progress_lines():
    assert runner.fmt_s(190) == "3m10s" and runner.fmt_s(3 * 3600 + 120) == "3h02m"


@pytest.fixture
def run_bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("run_bench_cli", Path(runner.REPO) / "run_bench.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "run_bench_cli", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text", ['{"schema": 1', '{"schema": 1, "plan": []}'])
def test_resume_of_a_directory_with_a_broken_manifest_ends_with_one_line(tmp_path, capsys, run_bench, text):
    (tmp_path / "manifest.json").write_text(text)
    assert run_bench.main(["--resume", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest.json is not a run_bench.py manifest" in err


def test_a_selection_without_points_ends_with_one_line_instead_of_a_traceback(capsys, run_bench):
    assert run_bench.main(["--quick", "--workloads", "long"]) == 2  # --quick has agent and chat points only
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no points" in err and "--workloads" in err


def test_dry_run_estimate_counts_restarts_only_for_arms_with_points(capsys, run_bench):
    assert run_bench.main(["--quick", "--workloads", "chat", "--dry-run"]) == 0  # one baseline qps point
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["arms"] == ["baseline"] and doc["points"] == 1
    assert doc["estimate_s"] < runner.arm_overhead_s(True) * 2


def test_sigterm_stops_the_run_and_its_load_generator_like_ctrl_c(tmp_path):
    pid_file = tmp_path / "pid"
    stmt = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def terminate_once_started() -> None:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill PID` or timeout(1) sends run_bench.py

    previous = signal.getsignal(signal.SIGTERM)
    try:
        runner.interrupt_on_sigterm()
        threading.Thread(target=terminate_once_started, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):  # run_bench.py turns this into "interrupted — --resume ..."
            points.run_loadgen(sys.executable, "timeit", ["-n", "1", stmt], starts_file=tmp_path / "starts",
                               log_file=tmp_path / "log", env=dict(os.environ), limit_s=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
