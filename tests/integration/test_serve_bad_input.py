"""Bad serve settings through ./serve.sh: refused before any work, in one line that names the setting and where
it came from, exit 1, no traceback; a busy lock is exit 75. No server is started here."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str, **overrides: str) -> subprocess.CompletedProcess:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    if not (model / "config.json").exists():
        (model / "config.json").write_text("{}")
    env = {**os.environ, "WORK_DIR": str(tmp_path / "work"), "MODEL_DIR": str(model), "SGLANG_PYTHON": sys.executable,
           "HOST": "127.0.0.1", "PORT": "39999", "TMUX_SESSION": "llmhost-bad-input", "API_KEY_FILE": "",
           "READY_TIMEOUT_S": "60", "LOAD_FORMAT": "auto", "LLMHOST_CONFIG": "", "TMUX_TMPDIR": str(tmp_path)}
    env.update(overrides)
    return subprocess.run([str(REPO / "serve.sh"), *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def refused(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


@pytest.mark.parametrize("key, value, expected", [
    ("HOST", "my host", "environment: HOST='my host' is not a host name or IP address"),
    ("HOST", "", "environment: HOST=''"),
    ("TMUX_SESSION", "llm:host", "environment: TMUX_SESSION=llm:host must be a name without ':' or '.'"),
    ("TMUX_SESSION", "llm.host", "tmux would rewrite it"),
    ("READY_TIMEOUT_S", "-5", "environment: READY_TIMEOUT_S=-5 must be"),
    ("READY_TIMEOUT_S", "0", "environment: READY_TIMEOUT_S=0 must be >= 1 seconds"),
    ("READY_TIMEOUT_S", "soon", "READY_TIMEOUT_S="),
    ("LOAD_FORMAT", "dumy", "environment: LOAD_FORMAT=dumy is not one of SGLang's load formats"),
])
def test_a_setting_that_cannot_work_is_refused_before_anything_starts(tmp_path, key, value, expected):
    refused(serve(tmp_path, "start", **{key: value}), expected)
    assert not (tmp_path / "work").exists()  # before any work: not even the state directory


def test_a_work_dir_that_is_a_file_is_named(tmp_path):
    work = tmp_path / "work"
    work.write_text("not a directory")
    refused(serve(tmp_path, "start", WORK_DIR=str(work)), f"environment: WORK_DIR={work} is a file, not a directory")
    refused(serve(tmp_path, "status", WORK_DIR=str(work)), "is a file")


def test_an_api_key_file_others_can_read_is_refused_like_ssh_refuses_a_loose_key(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    key.chmod(0o644)
    result = serve(tmp_path, "start", API_KEY_FILE=str(key))
    refused(result, f"environment: API_KEY_FILE={key} may be read by other users (mode 0644) — run chmod 600 {key}")
    assert "sk-test" not in result.stderr
    key.chmod(0o600)
    assert "API_KEY_FILE" not in serve(tmp_path, "print-command", API_KEY_FILE=str(key)).stderr
    refused(serve(tmp_path, "start", API_KEY_FILE=str(tmp_path / "missing")), "cannot be read")


def test_the_message_names_the_config_file_and_line_that_set_it(tmp_path):
    local = tmp_path / "local.env"
    local.write_text("# mine\nTMUX_SESSION=my.session\n")
    env_without = {k: v for k, v in os.environ.items() if k != "TMUX_SESSION"}
    result = subprocess.run(
        [str(REPO / "serve.sh"), "stop"], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**env_without, "WORK_DIR": str(tmp_path / "work"), "LLMHOST_CONFIG": str(local), "API_KEY_FILE": ""})
    refused(result, f"{local}:2: TMUX_SESSION=my.session must be a name without ':' or '.'")


def test_another_start_or_stop_holding_the_lock_is_exit_75(tmp_path):
    state = tmp_path / "work" / "server"
    state.mkdir(parents=True)
    with open(state / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = serve(tmp_path, "stop")
    assert busy.returncode == 75 and busy.stderr.count("\n") == 1
    assert f"another ./serve.sh start/stop/restart is running for {state} — wait for it" in busy.stderr
    assert serve(tmp_path, "stop").returncode == 0


TWO_H200S = """#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.used,memory.total) printf '0, NVIDIA H200, 1, 143771\\n1, NVIDIA H200, 70000, 143771\\n' ;;
  --query-gpu=index,gpu_uuid) printf '0, GPU-aaaa\\n1, GPU-bbbb\\n' ;;
  --query-compute-apps=pid,gpu_uuid,used_memory) echo "4121, GPU-bbbb, 69990" ;;
  *) exit 9 ;;
esac
"""


@pytest.mark.parametrize("settings, expected", [
    ({"TP_SIZE": "3"}, "TP_SIZE=3 does not divide the model's 32 attention heads — use a divisor of 32"),
    ({"TP_SIZE": "2", "DP_SIZE": "2"}, "TP_SIZE=2 x DP_SIZE=2 needs 4 GPUs per node but this host has 2"),
    ({"TP_SIZE": "2"}, "gpu1 is busy: 68.4 of 140.4 GiB used (by pid 4121)"),
    ({"DP_SIZE": "2", "GPUS": "0,5"}, "GPUS=0,5 names GPU 5, which this host lacks (it has: gpu0, gpu1)"),
    ({"NNODES": "2", "TP_SIZE": "2"}, "NNODES=2 needs DIST_INIT_ADDR=<node 0's address>:<free port>"),
])
def test_a_tp_dp_layout_the_gpus_or_the_model_cannot_hold_is_refused_before_launch(tmp_path, settings, expected):
    smi = tmp_path / "bin" / "nvidia-smi"  # the driver's view at the process boundary: two H200s, gpu1 in use
    smi.parent.mkdir()
    smi.write_text(TWO_H200S)
    smi.chmod(0o755)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"num_attention_heads": 32, "num_key_value_heads": 8}')
    result = serve(tmp_path, "start", PATH=f"{smi.parent}{os.pathsep}{os.environ['PATH']}", **settings)
    refused(result, expected)
    assert not (tmp_path / "work" / "server" / "launch_command.txt").exists()  # nothing was launched


def test_print_command_prints_each_nodes_command_from_one_config(tmp_path):
    nodes = {"NNODES": "2", "TP_SIZE": "2", "DIST_INIT_ADDR": "10.0.0.1:25000"}
    for rank in (0, 1):
        printed = serve(tmp_path, "print-command", "--node-rank", str(rank), **nodes)
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.rstrip().endswith(f"--tp-size 2 --nnodes 2 --node-rank {rank} "
                                                "--dist-init-addr 10.0.0.1:25000")
        # host N runs the printed command itself: the plugin folder on its PYTHONPATH is there (SHARED_PREFIX_DECODE);
        # node 0's own print-command writes nothing (its start does)
        plugins = tmp_path / "work" / "server" / "sglang-plugins"
        assert f"PYTHONPATH={plugins}:" in printed.stdout
        assert bool(list(plugins.glob("*.dist-info/entry_points.txt"))) is (rank == 1)
    refused(serve(tmp_path, "print-command", "--node-rank", "2", **nodes), "--node-rank 2 is not a node of NNODES=2")
    usage = serve(tmp_path, "print-command", "--node-rank", "one", **nodes)
    assert usage.returncode == 2 and "./serve.sh print-command [--node-rank N]" in usage.stderr


def test_the_router_without_sglang_router_installed_is_refused_before_launch(tmp_path):
    refused(serve(tmp_path, "start", ROUTER="on", WORKER_URLS="http://10.0.0.2:30000"),
            f"ROUTER=on but SGLANG_PYTHON={sys.executable} cannot import sglang_router — install it there")
