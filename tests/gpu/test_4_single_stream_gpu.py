"""Where one stream's time per token goes, on a CUDA host: `run_bench.py --single-stream` against the real SGLang,
asserting that SGLang's own instruments answered (every part of the breakdown measured) and that the parts are
physically possible (no forward faster than the weight-read floor, no step shorter than its forward). Its numbers are
the evidence the single-stream ITL question is answered with; they are recorded, not judged against a target.

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu/test_4_single_stream_gpu.py -v --require-gpu

Adds the step single_stream to $GPU_SUITE_OUT/gpu_suite.json (the closing JSON of the run, per arm).
"""
from __future__ import annotations

import subprocess

import pytest
from test_2_measure_gpu import REPO, run

pytestmark = pytest.mark.gpu


def test_one_stream_is_split_into_floor_gpu_cpu_and_streaming(gpu_env, record, tmp_path):
    env = {**gpu_env, "RESULTS_DIR": str(tmp_path / "results")}
    closing, seconds = run(env, "run_bench.py", "--single-stream", "2", timeout=900)
    record.step("single_stream", wall_s=seconds, **closing)
    arm = closing["arms"]["baseline"]
    assert arm["status"] == "ok" and arm["requests_ok"] == 2 and arm["decode_lines"] >= 10, arm
    missing = [k for k in ("client_itl_p50_ms", "server_step_ms", "gpu_forward_ms", "floor_ms", "cpu_gap_ms",
                           "streaming_ms", "sglang_read_gb_s", "tokenizer_itl_ms") if arm[k] is None]
    assert not missing, f"not measured: {missing} (SGLang's instruments did not answer)"
    # a forward reads every weight once: it cannot beat the floor (a few % for the datasheet's rounding)
    assert arm["gpu_forward_ms"] >= 0.95 * arm["floor_ms"], arm
    assert arm["server_step_ms"] >= arm["gpu_forward_ms"] - 0.05, arm  # occupancy is capped at 100%
    assert 0 < arm["client_itl_p50_ms"] < 50 and 0.5 < arm["floor_ms"] < 20, arm  # a ~4B model on a datacenter GPU
    # SGLang's profiler over 100 forward passes: the kernels of a pass add up to about the GPU forward, mostly GEMMs
    kernels = closing["kernels"]["baseline"]
    assert kernels.get("kernel_ms") and "error" not in kernels, kernels
    assert 0.5 * arm["gpu_forward_ms"] <= kernels["kernel_ms"] <= 1.5 * arm["gpu_forward_ms"], (kernels, arm)
    assert max(kernels["by_category_ms"], key=kernels["by_category_ms"].get) == "GEMM", kernels
    subprocess.run([str(REPO / "serve.sh"), "stop"], env=env, cwd=REPO, capture_output=True, timeout=180)
