"""The real stack on a CUDA host: serve.sh start with the real config (LOAD_FORMAT=dummy works without weights),
the smoke test, status, a restart that adds an API key, stop -> GPU memory released. Steps run in order (-x).

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu -x -v --require-gpu

Writes $GPU_SUITE_OUT/gpu_suite.json (default results/gpu_suite/): per step its seconds, outcome and the numbers
worth quoting (startup, test reply, KV pool tokens, GPU memory before/after stop).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmhost import config
from llmhost.serve import gpu, graphs, metrics, procfs
from llmhost.serve.endpoints import ServerClient
from llmhost.serve import spec as launch_spec
from llmhost.serve.spec import CONFIG_FILE_NAME

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
KEY = "sk-gpu-suite-5e0c7b1d"


def serve(env: dict[str, str], *args: str, timeout: float = 1200) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    out = subprocess.run([str(REPO / "serve.sh"), *args], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    sys.stdout.write(out.stdout + out.stderr)  # visible with -s / on failure
    return out, round(time.monotonic() - start, 1)


def cfg_of(env: dict[str, str]) -> config.Config:
    return config.load(env)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def key_env(gpu_env, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("key") / "api_key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    return {**gpu_env, "API_KEY_FILE": str(key_file)}


def test_start_serves_the_real_model_with_the_articles_features(gpu_env, record):
    out, seconds = serve(gpu_env, "start")
    ready = re.search(r"ready after (\d+)s", out.stdout)
    reply = re.search(r"test reply in ([\d.]+) s", out.stdout)
    record.step("start", rc=out.returncode, wall_s=seconds, ready_s=int(ready.group(1)) if ready else None,
                test_reply_s=float(reply.group(1)) if reply else None, stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    cfg = cfg_of(gpu_env)
    reply = ServerClient.for_config(cfg).server_info()
    assert reply.ok, reply.text
    info = reply.json()
    features = {k: info.get(k) for k in ("attention_backend", "disable_radix_cache", "chunked_prefill_size",
                                         "tokenizer_worker_num", "enable_dynamic_batch_tokenizer", "enable_metrics",
                                         "enable_cache_report", "mem_fraction_static", "tool_call_parser",
                                         "reasoning_parser")}
    record.step("start", server_info=features, version=info.get("version"))
    assert features["attention_backend"] == "flashinfer" and features["disable_radix_cache"] is False
    assert features["enable_metrics"] is True and features["enable_cache_report"] is True
    if cfg.tokenizer_worker_num == "auto":  # four tokenizer processes encoding prompts in batches (one with a key)
        assert features["tokenizer_worker_num"] == launch_spec.tokenizer_processes(cfg)
        assert features["enable_dynamic_batch_tokenizer"] is True
    if cfg.scheduler_preload == "standby":  # every process SGLang started, uvicorn's tokenizer workers too, a standby
        argv = json.loads((cfg.state_dir / "launch_command.json").read_text())["argv"]
        group = procfs.group_pids(int((cfg.state_dir / "pgid").read_text()))
        lines = {pid: _cmdline(pid) for pid in group}
        standbys = [pid for pid, line in lines.items() if "standby_main" in line]
        spawned = [pid for pid, line in lines.items() if "spawn_main" in line]
        record.step("start", standbys=len(standbys), spawned_without_standby=len(spawned))
        assert len(standbys) == int(argv[argv.index("--standby") + 1]) and spawned == [], lines
    assert (cfg.state_dir / "launch_command.txt").read_text().strip() == json.loads(
        (cfg.state_dir / "launch_command.json").read_text())["command"]
    # SGLang captured exactly the CUDA graphs config.env asks for (its own capture log lines)
    log = (cfg.state_dir / "server.log").read_text(errors="replace")
    captured = {kind: [int(x) for x in sizes.split(",")] for kind, sizes in re.findall(
        r"Capture target (prefill|decode) CUDA graph begin\..*?(?:num_tokens|bs)=\[([\d, ]+)\]", log)}
    total = (gpu.free_total_mib() or (None, None))[1]
    wanted = {"prefill": graphs.prefill_sizes(graphs.sizes(cfg.cuda_graph_prefill_tokens), cfg.chunked_prefill_size),
              "decode": graphs.decode_sizes(graphs.sizes(cfg.cuda_graph_decode_batches), total, cfg.tp_size)}
    record.step("start", graphs_captured={k: len(v) for k, v in captured.items()})
    for kind, sizes in wanted.items():
        if sizes:
            assert captured.get(kind) == sizes, (kind, captured.get(kind))


def test_smoke_test_passes_with_forced_tool_calls(gpu_env, record):
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(REPO / "smoke_test.py"), "--tool-mode", "forced", "--json"],
                         env=gpu_env, cwd=REPO, capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        summary = None
    record.step("smoke_test", rc=out.returncode, wall_s=round(time.monotonic() - start, 1), summary=summary,
                stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert summary is not None
    assert summary["weights"] == "random", summary["weights_source"]  # read from the real /server_info


def test_status_shows_the_kv_pool_from_live_metrics(gpu_env, record):
    out, seconds = serve(gpu_env, "status", timeout=120)
    scrape = ServerClient.for_config(cfg_of(gpu_env)).metrics(timeout=10)
    samples = metrics.parse(scrape.text) if scrape.ok else []
    pool = metrics.value(samples, "sglang:max_total_num_tokens", tp_rank="0")
    startup = {s.labels.get("phase", "?"): round(s.value, 1) for s in metrics.select(samples, "sglang:startup_time_seconds")}
    record.step("status", rc=out.returncode, wall_s=seconds, kv_pool_tokens=pool, sglang_startup_s=startup,
                gpus=[f"{d.name} {d.total_mib / 1024:.0f} GiB" for d in gpu.devices()], output=out.stdout)
    assert out.returncode == 0, out.stderr
    assert pool and pool > 0 and f"KV pool      : {pool:,.0f} tokens" in out.stdout
    assert "GPU memory   : gpu" in out.stdout


def test_restart_with_an_api_key_requires_it_and_never_logs_it(key_env, record):
    cfg = cfg_of(key_env)
    old_pgid = int((cfg.state_dir / "pgid").read_text())
    out, seconds = serve(key_env, "restart")
    record.step("restart_with_key", rc=out.returncode, wall_s=seconds, stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    assert not procfs.group_alive(old_pgid)
    assert ServerClient.for_config(cfg).get("/v1/models").status == 401
    assert ServerClient.for_config(cfg, KEY).get("/v1/models").status == 200
    leaks = [str(p) for p in Path(cfg.work_dir).rglob("*")
             if p.is_file() and p.name != CONFIG_FILE_NAME and p.stat().st_size < 50_000_000
             and KEY in p.read_text(errors="replace")]
    log = (cfg.state_dir / "server.log").read_text(errors="replace")
    record.step("restart_with_key", key_leaks=leaks, log_redacted="api_key='***'" in log)
    assert leaks == [] and KEY not in out.stdout + out.stderr
    assert "api_key='***'" in log  # SGLang logs server_args; the redactor caught it


def test_stop_releases_the_gpu_memory(key_env, record):
    cfg = cfg_of(key_env)
    pgid = int((cfg.state_dir / "pgid").read_text())
    pids = procfs.group_pids(pgid)
    held_before = sum(p.used_mib or 0 for p in gpu.held_by(pids))  # 0 where NVML shows other PID namespaces
    used_before = gpu.devices()[0].used_mib
    out, seconds = serve(key_env, "stop", timeout=180)
    released = gpu.wait_released(pids, timeout_s=60)
    expected_drop = 0.5 * (held_before or used_before)
    deadline = time.monotonic() + 60
    while (used_after := gpu.devices()[0].used_mib) > used_before - expected_drop and time.monotonic() < deadline:
        time.sleep(1)
    record.step("stop", rc=out.returncode, wall_s=seconds, released=released, held_by_server_mib=held_before,
                gpu0_used_mib_before=used_before, gpu0_used_mib_after=used_after)
    assert out.returncode == 0, out.stderr
    assert not procfs.group_alive(pgid) and released
    assert used_after <= used_before - expected_drop, f"GPU memory {used_before:.0f} -> {used_after:.0f} MiB"
