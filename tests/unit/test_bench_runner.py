"""The runner's retry rule with the process and HTTP boundaries faked: a failed point is retried once, after a
restart when the server is dead, and recorded as failed when the retry fails too."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from llmhost.bench import arms, points, records, store
from llmhost.bench import runner  # executes runner.py's plan
from llmhost.config import REPO_ROOT
from llmhost.bench.records import PointRecord, PointSummary, RequestRecord


def _points(run: store.RunStore) -> list[PointRecord]:
    return records.read_records(run.points_path, PointRecord.from_dict).records


class FakeBench:
    def __init__(self, root):
        from types import SimpleNamespace

        self.store = store.RunStore.create(root)
        self.cfg = SimpleNamespace(state_dir=root / "state")
        self.started_at = time.time()
        self.done, self.lines, self.boots = 0, [], []

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


class FakeLoadgen:
    """The boot's load generator 'ran' the point: the module's output line (API key in server_info) and one request
    record per entry of `details`, as llmhost.bench.loadgen writes them."""

    def __init__(self, details: dict):
        self.details = details

    def run(self, argv, requests_file, limit_s, watch=None):
        from llmhost.bench import loadgen
        from types import SimpleNamespace

        d = self.details
        out = Path(argv[argv.index("--output-file") + 1])
        out.write_text(json.dumps({**d, "server_info": {"api_key": "sk-secret", "port": 1}}) + "\n")
        outs = [SimpleNamespace(success=not e, error=e, start_time=100.0 + i, latency=0.5, ttft=t, itl=itl,
                                prompt_len=n, output_len=o, cached_tokens=0)
                for i, (e, t, itl, n, o) in enumerate(zip(d["errors"], d["ttfts"], d["itls"], d["input_lens"],
                                                          d["output_lens"]))]
        Path(requests_file).write_text("".join(json.dumps(loadgen.request_row(o, 0.0)) + "\n" for o in outs))
        return {k: float(d[k]) for k in loadgen.SUMMARY_KEYS}, ""


def _fake_attempt_env(tmp_path, monkeypatch, details: dict, alive: bool = True):
    """A Bench whose load generator 'ran' and left `details` as its output."""
    from types import SimpleNamespace

    from llmhost.serve.endpoints import ServerClient

    cfg = SimpleNamespace(sglang_python=sys.executable, base_url="http://127.0.0.1:1", model_dir="/m",
                          served_model_name="qwen3-4b", api_key=lambda: "sk-secret", state_dir=tmp_path / "state")
    bench = SimpleNamespace(store=store.RunStore.create(tmp_path), cfg=cfg, sampler=SimpleNamespace(point_id=None),
                            seed=1, module="sglang.benchmark.serving", env={}, loadgen=FakeLoadgen(details))
    monkeypatch.setattr(ServerClient, "flush_cache", lambda self, **k: True)
    monkeypatch.setattr(runner, "server_alive", lambda cfg: alive)
    return bench


def _details(errors: list[str]) -> dict:
    n = len(errors)
    return {"completed": sum(not e for e in errors), "duration": 1.0, "request_throughput": 1.0,
            "output_throughput": 10.0, "input_throughput": 1.0, "total_throughput": 11.0,
            "ttfts": [0.0 if e else 0.05 for e in errors], "itls": [[0.01, 5.0] if e else [0.01] for e in errors],
            "errors": errors, "input_lens": [8] * n, "output_lens": [0 if e else 2 for e in errors]}


def test_a_point_whose_every_request_failed_is_failed_not_ok(tmp_path, monkeypatch):
    """bench_serving exits 0 when all requests fail: the point must be retried, not recorded as a 0 tok/s 'ok'."""
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["Connection reset"] * 4))
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.status == "failed" and "every request failed (Connection reset)" in record.error


def test_a_server_that_died_during_a_point_fails_it_and_raw_files_hold_no_key(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["", "", "", "boom"]), alive=False)
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.status == "failed" and "stopped answering /health" in record.error
    raw = [p.read_text() for p in bench.store.raw_dir().glob("*.jsonl") if not p.name.endswith(".requests.jsonl")]
    assert raw and all("sk-secret" not in text and "<redacted>" in text for text in raw)


def test_partial_failures_stay_data_and_their_broken_streams_stay_out_of_itl(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["", "", "", "stream broke"]))
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    record = runner.attempt_point(bench, point, 1)
    assert record.status == "ok" and record.summary.failed == 1
    rows = records.read_records(bench.store.root / record.requests_file, RequestRecord.from_dict).records
    assert [r.itl_ms for r in rows] == [(10.0,), (10.0,), (10.0,), ()]  # not the 5,000 ms gap of the broken one


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


def test_a_flush_against_a_stopped_server_says_down_at_once_not_http_400(tmp_path, monkeypatch):
    from standin.harness import free_port

    from llmhost.serve.endpoints import ServerClient

    real_flush = ServerClient.flush_cache
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))
    monkeypatch.setattr(ServerClient, "flush_cache", real_flush)  # the real flush, at a port nothing listens on
    bench.cfg.base_url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert time.monotonic() - started < 10  # not the 120 s a busy server gets
    assert record.status == "failed" and "server down (ConnectionRefusedError" in record.error
    assert "HTTP 400" not in record.error and record.cache_flushed is False


def test_a_point_killed_at_its_limit_keeps_the_requests_that_finished(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))

    def hung_loadgen(argv, requests_file, limit_s, watch=None):
        from types import SimpleNamespace

        from llmhost.bench import loadgen

        done = [SimpleNamespace(success=i != 1, error="" if i != 1 else "reset", start_time=101.0 + i, latency=0.5,
                                ttft=0.05, itl=[0.01] * 3, prompt_len=8, output_len=4, cached_tokens=0)
                for i in range(3)]  # as the load generator appends them, warm-up request left out
        lines = [json.dumps(loadgen.request_row(o, 0.0)) for o in reversed(done)]  # in completion order
        loadgen.completed_file(requests_file).write_text("\n".join(lines) + '\n{"start_s": 10')  # torn by the kill
        return None, f"load generator exceeded {limit_s:.0f}s"

    bench.loadgen.run = hung_loadgen
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 16, 1), 1)
    assert record.status == "failed" and "exceeded" in record.error and "3 requests that finished" in record.error
    assert record.summary.completed == 2 and record.summary.failed == 1
    rows = records.read_records(bench.store.root / record.requests_file, RequestRecord.from_dict).records
    assert [r.start_s for r in rows] == [101.0, 102.0, 103.0] and rows[0].itl_ms == (10.0, 10.0, 10.0)


def test_a_failed_point_names_the_crash_the_server_logged_during_it(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))
    log = bench.cfg.state_dir / "server.log"
    log.parent.mkdir()
    log.write_text("RuntimeError: an old crash, before this point\nfired up\n")

    def crashing_loadgen(argv, requests_file, limit_s, watch=None):
        with log.open("a") as out:  # what SGLang's scheduler writes when it dies (the stand-in copies it)
            out.write("Scheduler hit an exception: Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                      "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                      "Received sigquit from a child process. It usually means the child failed.\n")
        return None, "load generator died: All requests failed"

    bench.loadgen.run = crashing_loadgen
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.error == ("load generator died: All requests failed — server log: RuntimeError: CUDA error: "
                            "an illegal memory access was encountered")


def test_telemetry_that_cannot_be_written_for_a_while_is_a_gap_not_the_end_of_sampling(monkeypatch, capsys):
    from llmhost import files
    from llmhost.bench import telemetry
    from standin.harness import free_port

    written, failures = [], iter([True, True, True])

    def sink(rows):
        if next(failures, False):
            raise files.WriteError("cannot write telemetry.jsonl: No space left on device (0 MiB free there)")
        written.extend(rows)

    sampler = telemetry.Sampler(f"http://127.0.0.1:{free_port()}", sink, interval_s=0.05)
    monkeypatch.setattr(telemetry, "gpu_reader", lambda: lambda t, p: [records.TelemetrySample(t, "gpu", "gpu_util_pct",
                                                                                                 {"gpu": "0"}, 1.0, p)])
    sampler.start()
    deadline = time.monotonic() + 20
    while len(written) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    gaps = [r for r in written if r.source == "gap"]
    assert len(gaps) == 1 and gaps[0].name == telemetry.GAP_NAME and gaps[0].value > 0
    assert "No space left" in gaps[0].labels["error"] and sampler.ticks >= 4 and len(sampler.gaps) == 1
    assert "telemetry has 1 gap(s)" in sampler.gap_warning()
    assert capsys.readouterr().err.count("telemetry not written") == 1  # said once, not every second


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
    cfg = SimpleNamespace(sglang_python="python", base_url="http://h:1", model_dir="/m", served_model_name="q")
    watched: list = []
    bench = SimpleNamespace(store=run, cfg=cfg, module="m", env={}, seed=3,
                            loadgen=None, clock=None, budget_end=None, only_missing=False, check_tool_calls=True,
                            progress=lambda text: None, sampler=SimpleNamespace(watch_client=watched.append),
                            boot_paid=lambda lead, names, started_at, error="": paid.append((lead, set(names))))
    runner.run_arms(bench, chosen, plan, quick=True)
    assert boots == ["baseline", "page-16", "triton"]  # p16b reuses the page-16 boot
    assert len(watched) == 6 and watched[1::2] == [None] * 3  # each boot's load generator sampled, then let go
    assert paid == [("baseline", {"baseline"}), ("page-16", {"page-16", "p16b"}), ("triton", {"triton"})]
    warm = sum(p.pattern == "warm" for p in plan)  # a warm point's priming pass has its own dataset
    assert len(prepared) == len(plan) + warm  # every pass's dataset offered to the load generator before its boot
    assert sorted(p.point_id for _, _, p in ran) == sorted(p.point_id for p in plan)
    assert all(name == p.arm for _, name, p in ran)
    assert {pid for pid, name, _ in ran if name in ("page-16", "p16b")} == {2}  # one load generator for the boot
    shared = [p for _, name, p in ran if name in ("page-16", "p16b")]
    assert shared == points.boot_order(shared, 3) and shared != sorted(shared, key=lambda p: (p.arm, p.repeat))
    copy = json.loads((run.root / "servers" / "p16b.json").read_text())
    assert copy["arm"] == "p16b" and copy["launch_command"] == "launch --page-size 16"
