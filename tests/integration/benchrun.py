"""run_bench.py as a subprocess against the SGLang stand-in: an isolated toolkit setup and the helpers the
benchmark integration tests share (the `bench_env` fixture in conftest.py is `isolated_env`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from llmhost import files
from standin.harness import free_port

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "standin"
BENCH = [sys.executable, str(REPO / "run_bench.py")]
QWEN3_4B = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
            "torch_dtype": "bfloat16"}  # config.json of the model: the single-stream floor's weight bytes


def isolated_env(tmp_path: Path, server_env: str = "") -> Iterator[dict[str, str]]:
    """Own WORK_DIR, results, port, tmux socket; the stand-in as server (with `server_env` added to its
    SERVER_ENV) and as load generator. Stops the server and the tmux server afterwards."""
    tmux_dir = Path(tempfile.mkdtemp(prefix="tmb", dir="/tmp"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    port = free_port(block=3)  # ROUTER=on tests put two workers after it
    server = f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=0.5 STANDIN_ITL_MS=1 STANDIN_PREFILL_US_PER_TOKEN=5 {server_env}"
    env = {**os.environ, "TMUX_TMPDIR": str(tmux_dir), "WORK_DIR": str(tmp_path / "work"), "MODEL_DIR": str(model),
           "RESULTS_DIR": str(tmp_path / "results"), "HOME": str(tmp_path / "home"),
           "SGLANG_PYTHON": sys.executable, "HOST": "127.0.0.1",
           "PORT": str(port), "DASHBOARD_PORT": str(free_port()), "TMUX_SESSION": f"b{os.getpid()}{port}",
           "SERVER_ENV": server.strip(), "API_KEY_FILE": "", "READY_TIMEOUT_S": "60", "SERVER_EXTRA_ARGS": "",
           "LOAD_FORMAT": "dummy", "LLMHOST_CONFIG": "", "BENCH_USER_ARMS": "",
           "PYTHONPATH": os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("TMUX", None)
    yield env
    subprocess.run([str(REPO / "serve.sh"), "stop"], env=env, cwd=REPO, capture_output=True, timeout=90)
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=10)
    shutil.rmtree(tmux_dir, ignore_errors=True)


def rows(path: Path) -> list[dict]:
    return files.read_jsonl(path).rows


def bench(env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*BENCH, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def kill_mid_point(env: dict, kill) -> tuple[str, int, list[dict]]:
    """A one-point chat run (20 s of Poisson arrivals) whose server `kill(state_dir)` hits 3 s into the point ->
    (output, exit code, the run's points.jsonl rows)."""
    proc = subprocess.Popen([*BENCH, "--quick", "--arms", "baseline", "--workloads", "chat", "--rates", "2",
                             "--duration-s", "20"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "baseline.chat.qps.r2.r1: running" in line:
            break
    time.sleep(3)  # into the 20 s of arrivals
    kill(Path(env["WORK_DIR"]) / "server")
    out, _ = proc.communicate(timeout=180)
    run = (Path(env["RESULTS_DIR"]) / "bench" / "latest").resolve()
    return "".join(lines) + out, proc.returncode, rows(run / "points.jsonl")
