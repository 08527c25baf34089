"""run_phase4.sh: stages that really fail or succeed on a CPU machine (fi_bench.py sparse without torch fails with
its one-line error; fi_bench.py report builds the placeholder page), the summary table and the exit code."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, free_port: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RESULTS_DIR": str(tmp_path / "results"), "WORK_DIR": str(tmp_path / "work"),
           "SGLANG_PYTHON": sys.executable, "MODEL_DIR": str(tmp_path / "no-model"), "PORT": str(free_port)}
    return subprocess.run([str(REPO / "run_phase4.sh"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def _table(stdout: str) -> dict[str, tuple[str, int]]:
    rows = re.findall(r"^(kernels|jit|trace|report)\s+(ok|FAILED)\s+(\d+)$", stdout, re.M)
    return {name: (status, int(secs)) for name, status, secs in rows}


def test_a_failed_stage_does_not_stop_the_next_and_the_run_exits_1(tmp_path, free_port):
    proc = _run(tmp_path, free_port, "kernels", "report")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _table(proc.stdout).keys() == {"kernels", "report"}
    assert _table(proc.stdout)["kernels"][0] == "FAILED" and _table(proc.stdout)["report"][0] == "ok"
    out = tmp_path / "results" / "fi"
    assert (out / "fi_report.html").exists() and (out / "fi_summary.json").exists()
    logs = list(out.glob("phase4-*.log"))
    assert len(logs) == 1 and "stage kernels: FAILED" in logs[0].read_text()


def test_successful_stages_exit_0(tmp_path, free_port):
    proc = _run(tmp_path, free_port, "report")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(_table(proc.stdout)) == ["report"] and _table(proc.stdout)["report"][0] == "ok"


def test_dry_run_of_all_prints_every_stage_command_and_usage_errors_exit_2(tmp_path, free_port):
    proc = _run(tmp_path, free_port, "all", "--quick", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(status == "ok" for status, _ in _table(proc.stdout).values())
    assert "fi_bench.py sparse" in proc.stdout and "--quick" in proc.stdout
    assert "fi_jit_setup.sh" in proc.stdout and "--variants decode_base" in proc.stdout
    assert "fi_trace.py capture" in proc.stdout and "--duration-s 20" in proc.stdout
    assert list(_table(proc.stdout)) == ["kernels", "jit", "trace", "report"]
    assert re.search(r"^all\s+\d+$", proc.stdout, re.M)  # the whole run's seconds under the table
    full = _run(tmp_path, free_port, "jit", "trace", "--jit-jobs", "2", "--dry-run")
    assert "--jobs 2" in full.stdout and "--duration-s 40" in full.stdout  # full size: 40 s of trace traffic
    assert _run(tmp_path, free_port, "jit", "--jit-jobs", "0").returncode == 2
    assert _run(tmp_path, free_port, "bogus").returncode == 2
    assert _run(tmp_path, free_port).returncode == 2
    assert "kernels" in _run(tmp_path, free_port, "--help").stdout


def test_ctrl_c_during_a_stage_starts_the_paused_server_again(tmp_path, free_port):
    """An interrupted run used to leave the server it stopped for the kernel benchmarks down."""
    import shutil
    import signal
    import tempfile
    import time

    import pytest

    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed (tests/run_cpu.sh installs it)")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    python = tmp_path / "python"  # the server's Python; as the benchmark's Python it "benchmarks" for a minute
    python.write_text(f'#!/bin/sh\ncase "$1" in *fi_bench.py) exec sleep 60 ;; esac\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    tmux_dir = Path(tempfile.mkdtemp(prefix="tmx", dir="/tmp"))
    env = {**os.environ, "RESULTS_DIR": str(tmp_path / "results"), "WORK_DIR": str(tmp_path / "work"),
           "SGLANG_PYTHON": str(python), "MODEL_DIR": str(model), "PORT": str(free_port), "HOST": "127.0.0.1",
           "TMUX_TMPDIR": str(tmux_dir), "TMUX_SESSION": f"p4{free_port}", "READY_TIMEOUT_S": "60",
           "SERVER_ENV": f"PYTHONPATH={REPO / 'tests' / 'standin'}", "API_KEY_FILE": "", "SERVER_EXTRA_ARGS": "",
           "LLMHOST_CONFIG": ""}
    env.pop("TMUX", None)
    serve = lambda *a: subprocess.run([str(REPO / "serve.sh"), *a], env=env, cwd=REPO,  # noqa: E731
                                      capture_output=True, text=True, timeout=120)
    try:
        assert serve("start").returncode == 0
        proc = subprocess.Popen([str(REPO / "run_phase4.sh"), "kernels"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while serve("running").returncode == 0 and time.monotonic() < deadline:  # wait until it paused the server
            time.sleep(0.3)
        time.sleep(1)  # the "benchmark" is running now
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does: the whole foreground group
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out
        assert "starting the server again" in out and serve("running").returncode == 0
        assert serve("status").returncode == 0
    finally:
        serve("stop")
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
        shutil.rmtree(tmux_dir, ignore_errors=True)
