"""The router on a CUDA host: two SGLang workers sharing GPU 0 (each an equal half of its pool) behind sglang-router
start as one service, pass the smoke test through the router, report per worker, run a small benchmark arm, and stop
together, freeing the GPU.
Skipped where SGLANG_PYTHON cannot import sglang_router (a separate package: pip install sglang-router).

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu/test_3_router_gpu.py -x -v --require-gpu

Adds the steps router_start, router_smoke_test, router_status, router_bench_quick, router_stop to
$GPU_SUITE_OUT/gpu_suite.json.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standin.harness import free_port
from test_1_serve_gpu import REPO, cfg_of, serve

from llmhost.serve import gpu, procfs, service

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def router_env(gpu_env):
    python = shutil.which(cfg_of(gpu_env).sglang_python) or sys.executable
    if subprocess.run([python, "-c", "import sglang_router"], capture_output=True, timeout=120).returncode != 0:
        pytest.skip(f"sglang_router not importable by {python} (pip install sglang-router)")
    # One tokenizer process per worker and no prefill graphs: this file tests the router path, and that keeps each
    # of its two service starts (start, and the benchmark's restart) near a minute instead of three
    return {**gpu_env, "ROUTER": "on", "GPUS": "0,0", "DP_SIZE": "2", "API_KEY_FILE": "",
            "ROUTER_METRICS_PORT": str(free_port()), "TOKENIZER_WORKER_NUM": "1",
            "SERVER_EXTRA_ARGS": "--cuda-graph-backend-prefill disabled"}


def test_two_workers_on_one_gpu_and_the_router_start_as_one_service(router_env, record):
    out, seconds = serve(router_env, "start")
    ready = re.search(r"ready after (\d+)s", out.stdout)
    layout = service.layout(cfg_of(router_env).state_dir)
    record.step("router_start", rc=out.returncode, wall_s=seconds, ready_s=int(ready.group(1)) if ready else None,
                layout=layout, launch=[ln for ln in out.stdout.splitlines() if "launching" in ln],
                stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    assert "the router routes to all 2 workers, and each generated" in out.stdout
    assert [m["gpus"] for m in layout] == ["0", "0", None]


def test_the_smoke_test_passes_through_the_router(router_env, record):
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(REPO / "smoke_test.py"), "--tool-mode", "forced", "--json"],
                         env=router_env, cwd=REPO, capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    record.step("router_smoke_test", rc=out.returncode, wall_s=round(time.monotonic() - start, 1), summary=summary,
                stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_status_reports_each_worker_and_its_kv_pool(router_env, record):
    out, seconds = serve(router_env, "status", timeout=120)
    pools = [int(p.replace(",", "")) for p in re.findall(r"KV pool      : ([\d,]+) tokens", out.stdout)]
    record.step("router_status", rc=out.returncode, wall_s=seconds, kv_pool_tokens=pools,
                gpus=gpu.describe(gpu.devices()), output=out.stdout)
    assert out.returncode == 0, out.stderr
    assert len(pools) == 2 and all(p > 0 for p in pools)
    assert "/readiness -> 200" in out.stdout


def test_a_small_benchmark_arm_runs_behind_the_router(router_env, record, tmp_path):
    env = {**router_env, "RESULTS_DIR": str(tmp_path / "results")}
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(REPO / "run_bench.py"), "--quick", "--arms", "baseline"], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    lines = out.stdout.strip().splitlines()
    final = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    run_dir = Path(final.get("run_dir", tmp_path))
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()] \
        if (run_dir / "points.jsonl").exists() else []
    record.step("router_bench_quick", rc=out.returncode, wall_s=round(time.monotonic() - start, 1),
                **{k: final.get(k) for k in ("points_planned", "points_ok", "points_failed")},
                points={p["point_id"]: {"status": p["status"], "completed": (p["summary"] or {}).get("completed"),
                                        "output_tok_s": (p["summary"] or {}).get("output_throughput")}
                        for p in points},
                stderr_tail=out.stderr[-2000:])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert final["points_planned"] > 0 and final["points_ok"] == final["points_planned"] and not final["points_failed"]
    server = json.loads((run_dir / "servers" / "baseline.json").read_text())
    assert [(m["name"], m["gpus"]) for m in server["layout"]] == [("worker0", "0"), ("worker1", "0"), ("router", None)]
    # a worker's own arguments: sglang-router's /get_server_info holds only its counts
    assert "model_path" in server["server_info"] and "router_manager" not in server["server_info"]
    samples = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()
               if line.strip().endswith("}")]
    assert {s["labels"].get("worker") for s in samples if s["name"] == "sglang:num_running_reqs"} == \
        {"worker0", "worker1"}  # both workers' own /metrics were sampled


def test_stop_ends_every_member_and_frees_the_gpu(router_env, record):
    cfg = cfg_of(router_env)
    pgid = int((cfg.state_dir / "pgid").read_text())
    pids = procfs.group_pids(pgid)
    used_before = gpu.devices()[0].used_mib
    out, seconds = serve(router_env, "stop", timeout=180)
    released = gpu.wait_released(pids, timeout_s=60)
    record.step("router_stop", rc=out.returncode, wall_s=seconds, released=released, gpu0_used_mib_before=used_before,
                gpu0_used_mib_after=gpu.devices()[0].used_mib)
    assert out.returncode == 0, out.stderr
    assert not procfs.group_alive(pgid) and released
