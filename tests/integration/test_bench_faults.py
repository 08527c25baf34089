"""run_bench.py under faults, against the SGLang stand-in through ./serve.sh (real tmux): torn records, two runs
at once, the user's ./serve.sh stop, a resume that retries failed points, a full disk, a crashing server, and a
point killed at its time limit. Nothing is lost, nothing contaminated, every failure named."""
from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchrun import BENCH, REPO, bench, isolated_env, rows
from llmhost import files
from llmhost.bench import points, salvage
from llmhost.bench.loadgen_process import LoadGenerator
from llmhost.bench.workloads import REGISTRY

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")
ONE_POINT = ("--quick", "--arms", "baseline", "--workloads", "chat")  # baseline.chat.qps.r8.r1: 32 requests


@pytest.fixture
def slow_env(tmp_path):
    """Requests of ~5 s (256 tokens, 20 ms apart): a point lasts long enough to be interrupted."""
    yield from isolated_env(tmp_path, "STANDIN_ITL_MS=20")


@pytest.fixture
def crash_env(tmp_path):
    """A server that dies 8 s after each start with a CUDA error in its log, like a crashing scheduler."""
    yield from isolated_env(tmp_path, "STANDIN_ITL_MS=20 STANDIN_CRASH_AFTER_S=8")


def _run_dirs(env: dict) -> list[Path]:
    return sorted(p for p in (Path(env["RESULTS_DIR"]) / "bench").glob("2*") if p.is_dir())


def _final(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_torn_points_and_telemetry_lines_are_repaired_reported_and_remeasured(bench_env):
    first = bench(bench_env, *ONE_POINT)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    run = Path(_final(first)["run_dir"])
    text = (run / "points.jsonl").read_text()
    (run / "points.jsonl").write_text(text[: len(text) // 2])  # the crash mid-write of its only record
    with open(run / "telemetry.jsonl", "a") as out:
        out.write('{"t": 1.0, "source": "metr')

    again = bench(bench_env, "--resume", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "[bench] resume: 0 of 1 points ok (kept), 0 failed, 1 not yet run" in again.stdout
    assert "[bench] warning: points.jsonl: a torn last line (a crash mid-write) was skipped" in again.stdout
    assert "[bench] warning: telemetry.jsonl: a torn last line" in again.stdout
    assert _final(again)["points_ok"] == 1
    read = files.read_jsonl(run / "points.jsonl")  # the torn line was closed off: the new record is whole
    assert [r["status"] for r in read.rows] == ["ok"] and read.bad_lines == [1] and not read.torn

    dash = subprocess.run([sys.executable, str(REPO / "make_dashboard.py"), str(run)], env=bench_env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert dash.returncode == 0, dash.stderr[-2000:]
    assert "0 warnings" not in dash.stdout and "2 warnings" in dash.stdout
    assert "points.jsonl: 1 unreadable line(s)" in dash.stderr and "telemetry.jsonl: 1 unreadable" in dash.stderr


def test_two_runs_at_once_one_is_refused_naming_the_other_and_nothing_of_it_is_kept(bench_env):
    procs = [subprocess.Popen([*BENCH, *ONE_POINT], env=bench_env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 75], outs
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    refusal = outs[loser][1].strip().splitlines()[-1]
    assert refusal.startswith("[bench] error: another benchmark run holds this server: ")
    assert f"pid {procs[winner].pid}, " in refusal and "--resume" in refusal
    assert "restarting the server" not in outs[loser][0]  # refused before it restarted anything
    run = Path(_final(subprocess.CompletedProcess([], 0, outs[winner][0], ""))["run_dir"])
    assert _run_dirs(bench_env) == [run]  # the refused run created no directory
    assert (run.parent / "latest").resolve() == run.resolve()
    assert [r["status"] for r in rows(run / "points.jsonl")] == ["ok"]


def test_serve_stop_mid_point_ends_the_run_in_one_line_and_resume_retries_the_point(slow_env):
    proc = subprocess.Popen([*BENCH, *ONE_POINT], env=slow_env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # the point's completed-requests file exists from the point's start to its end (llmhost.bench.loadgen)
    while not any(any(d.glob("raw/baseline.chat.qps.r8.r1.a1.*.requests.completed.jsonl"))
                  for d in _run_dirs(slow_env)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(3)  # mid-point: requests are streaming
    stop = subprocess.run([str(REPO / "serve.sh"), "stop"], env=slow_env, cwd=REPO, capture_output=True, timeout=90)
    assert stop.returncode == 0, stop.stderr
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("[bench] the server was stopped with ./serve.sh stop at ") and "leaves it stopped" in last
    run = _run_dirs(slow_env)[0]
    assert f"./run_bench.py --resume {run}" in last
    after_start = out.split("baseline.chat.qps.r8.r1: running")[-1]  # the point's own start line onwards
    assert "restarting" not in after_start and "HTTP 400" not in out + err, out + err
    running = subprocess.run([str(REPO / "serve.sh"), "running"], env=slow_env, cwd=REPO, timeout=30)
    assert running.returncode != 0  # still stopped: the user's stop won
    assert [(r["attempt"], r["status"]) for r in rows(run / "points.jsonl")] == [(1, "failed")]

    again = bench(slow_env, "--resume", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "[bench] resume: 0 of 1 points ok (kept), 1 failed (tried again: baseline.chat.qps.r8.r1), 0 not yet " \
           "run" in again.stdout
    assert [(r["attempt"], r["status"]) for r in rows(run / "points.jsonl")] == [(1, "failed"), (2, "ok")]
    assert not (Path(slow_env["WORK_DIR"]) / "server" / "stopped_by_user").exists()  # the start ended the stop


def test_a_full_disk_ends_with_one_line_naming_the_file_and_leaves_no_litter(bench_env):
    def small_files() -> None:  # a write beyond 1 KiB fails with EFBIG, like ENOSPC on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    # No bytecode written under the limit: CPython keeps a short write as a truncated .pyc, which would break every
    # later import of that module from the suite's shared BYTECODE_CACHE ("marshal data too short").
    env = {**bench_env, "BYTECODE_CACHE": "", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*BENCH, *ONE_POINT], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("[bench] error: cannot write ") and "manifest.json: File too large (" in last
    assert "MiB free there)" in last
    results = Path(bench_env["RESULTS_DIR"])
    assert not list(results.rglob("*.tmp")) and _run_dirs(bench_env) == []
    assert not (results / "bench" / "latest").exists()


def test_a_failed_point_names_the_crash_from_the_server_log(crash_env):
    proc = bench(crash_env, *ONE_POINT)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    attempts = rows(_run_dirs(crash_env)[0] / "points.jsonl")
    assert [(r["attempt"], r["status"]) for r in attempts] == [(1, "failed"), (2, "failed")]
    cause = "server log: RuntimeError: CUDA error: an illegal memory access was encountered (stand-in crash)"
    assert all(r["error"].endswith(cause) for r in attempts), [r["error"] for r in attempts]


def test_a_point_killed_at_its_limit_keeps_the_requests_that_finished(tmp_path, free_port):
    from standin.harness import launch, standin_env

    point = points.make_point("baseline", "chat", "concurrency", 1, None, 16, 1)
    requests_file = tmp_path / "p.requests.jsonl"
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "10"}) as srv, \
            LoadGenerator(sys.executable, "sglang.benchmark.serving", standin_env(), tmp_path / "log") as gen:
        argv = points.bench_argv(point, REGISTRY["chat"], base_url=srv.url, model_dir=str(tmp_path),
                                 served_model_name="qwen3-4b", seed=1, output_file=tmp_path / "o.jsonl")
        gen.start()
        totals, error = gen.run(argv, requests_file, limit_s=15)
    assert totals is None and error == "load generator exceeded 15s"  # 16 requests of ~2.6 s one at a time: ~42 s
    assert not requests_file.exists() and not (tmp_path / "o.jsonl").exists()  # the module itself wrote nothing
    kept = salvage.completed_requests(requests_file)
    assert 1 <= len(kept) < 16 and all(r.ok and r.output_tokens > 0 and r.ttft_ms > 0 for r in kept)
    assert [r.start_s for r in kept] == sorted(r.start_s for r in kept) and all(r.end_s for r in kept)
    summary = salvage.summarize(kept, None)
    assert summary.completed == len(kept) and summary.output_throughput > 0
