"""Two GPUs of one host: tensor parallel (one server, every layer over GPUs 0 and 1) and data parallel behind the
router (one worker per GPU) each start as one service, pass the smoke test unchanged, load both GPUs, and stop
together, freeing both. On a host with fewer than two GPUs this file is skipped (a failure with --require-gpu); the
router layout is skipped where SGLANG_PYTHON cannot import sglang_router.

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu/test_5_two_gpus_gpu.py -x -v --require-gpu

The comparison under load (one GPU, TP=2 and DP=2 at agent c=64 and c=128, paired repeats) is a benchmark run:

    ROUTER=on GPUS=0,1 ./run_bench.py --arms baseline --arm tp2="--tp-size 2" --arm dp2="--dp-size 2" \
        --workloads agent --patterns concurrency --concurrency 64,128 --repeat 3 --tag gpus2

Adds the steps <layout>_start, <layout>_smoke_test, <layout>_gpus, <layout>_stop (layout tp2 or dp2_router) to
$GPU_SUITE_OUT/gpu_suite.json.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest
from gpu_required import unavailable
from standin.harness import free_port
from test_1_serve_gpu import REPO, cfg_of, serve

from llmhost.serve import gpu, procfs, service

pytestmark = pytest.mark.gpu
LOADED_MIB = 10 * 1024  # a GPU holding a share of the model and its KV pool; an idle H200 holds < 1 GiB

# layout name -> (its settings, the members start must record as (name, CUDA_VISIBLE_DEVICES, TP size))
LAYOUTS = {
    "tp2": ({"TP_SIZE": "2", "GPUS": "0,1"}, [("server", "0,1", 2)]),
    "dp2_router": ({"ROUTER": "on", "DP_SIZE": "2", "GPUS": "0,1", "ROUTER_METRICS_PORT": str(free_port())},
                   [("worker0", "0", 1), ("worker1", "1", 1), ("router", None, None)]),
}


@pytest.fixture(scope="module")
def two_gpus(gpu_env, request):
    found = gpu.devices()
    if len(found) < 2:
        unavailable(request, f"this file needs two GPUs; nvidia-smi lists {len(found)}")
    return gpu_env


def layout_env(base: dict[str, str], name: str) -> dict[str, str]:
    settings, _ = LAYOUTS[name]
    if settings.get("ROUTER") == "on":
        python = shutil.which(cfg_of(base).sglang_python) or sys.executable
        if subprocess.run([python, "-c", "import sglang_router"], capture_output=True, timeout=120).returncode:
            pytest.skip(f"sglang_router not importable by {python} (pip install sglang-router)")
    # One tokenizer process and no prefill graphs: this file tests the layouts, and that keeps each start near a
    # minute and a half instead of three
    return {**base, **settings, "API_KEY_FILE": "", "TOKENIZER_WORKER_NUM": "1",
            "SERVER_EXTRA_ARGS": "--cuda-graph-backend-prefill disabled"}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_layout_serves_on_both_gpus_passes_the_smoke_test_and_stops_freeing_both(two_gpus, record, name):
    env = layout_env(two_gpus, name)
    out, seconds = serve(env, "start")
    ready = re.search(r"ready after (\d+)s", out.stdout)
    members = service.layout(cfg_of(env).state_dir)
    record.step(f"{name}_start", rc=out.returncode, wall_s=seconds, ready_s=int(ready.group(1)) if ready else None,
                layout=members, stderr_tail=out.stderr[-2000:])
    try:
        assert out.returncode == 0, out.stderr
        assert [(m["name"], m["gpus"], m["tp_size"]) for m in members] == LAYOUTS[name][1]

        start = time.monotonic()
        smoke = subprocess.run([sys.executable, str(REPO / "smoke_test.py"), "--tool-mode", "forced", "--json"],
                               env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        lines = smoke.stdout.strip().splitlines()
        record.step(f"{name}_smoke_test", rc=smoke.returncode, wall_s=round(time.monotonic() - start, 1),
                    summary=json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None,
                    stderr_tail=smoke.stderr[-2000:])
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]

        status, _ = serve(env, "status", timeout=120)
        used = [d.used_mib for d in gpu.devices()[:2]]
        record.step(f"{name}_gpus", used_mib=used, status=status.stdout)
        assert status.returncode == 0, status.stderr
        assert all(u is not None and u > LOADED_MIB for u in used), used  # both GPUs hold their share
    finally:
        pgid = int((cfg_of(env).state_dir / "pgid").read_text()) if (cfg_of(env).state_dir / "pgid").exists() else 0
        pids = procfs.group_pids(pgid) if pgid else []
        stop, seconds = serve(env, "stop", timeout=300)
        released = gpu.wait_released(pids, timeout_s=90)
        after = [d.used_mib for d in gpu.devices()[:2]]
        record.step(f"{name}_stop", rc=stop.returncode, wall_s=seconds, released=released, used_mib_after=after)
    assert stop.returncode == 0, stop.stderr
    assert released and not (pgid and procfs.group_alive(pgid))
    assert all(u is not None and u < LOADED_MIB for u in after), after
