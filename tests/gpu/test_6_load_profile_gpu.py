"""Where a loaded forward pass's GPU time goes, on a CUDA host: `run_bench.py --kernel-profile` at agent c=64 against
the real SGLang, asserting that SGLang's profiler answered, that the trace's passes were told apart into decode steps
and extends (the kernel names FlashInfer gives them on this GPU are what the split reads: a silent miss would call
every pass a decode step) and that the parts are physically possible. Its numbers are recorded, not judged.

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu/test_6_load_profile_gpu.py -v --require-gpu

Adds the step load_profile to $GPU_SUITE_OUT/gpu_suite.json.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_2_measure_gpu import REPO, run

from llmhost.bench import load_profile, points

pytestmark = pytest.mark.gpu


def test_a_loaded_step_is_split_into_decode_steps_and_extends(gpu_env, record, tmp_path):
    env = {**gpu_env, "RESULTS_DIR": str(tmp_path / "results")}
    summary, seconds = run(env, "run_bench.py", "--arms", "baseline", "--workloads", "agent", "--patterns",
                           "concurrency", "--concurrency", "64", "--repeat", "1", "--kernel-profile", timeout=900)
    assert summary["points_failed"] == 0, summary
    [rec] = [json.loads(line) for line in (Path(summary["run_dir"]) / "point_kernels.jsonl").read_text().splitlines()]
    record.step("load_profile", wall_s=seconds, **{k: v for k, v in rec.items() if k != "top"})
    assert rec["status"] == "ok", rec["error"]
    steps = load_profile.profile_steps(points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1))
    assert rec["steps"] == steps and rec["decode_steps"] + rec["extend_passes"] == steps
    # a window longer than a request's output holds the extends of the requests that replaced finished ones
    assert rec["extend_passes"] > 0, "no extend told apart: FlashInfer's kernel names on this GPU are not matched"
    assert rec["decode_step_ms"] is not None and rec["extend_pass_ms"] is not None, "passes not told apart"
    # an extend prefills tens of tokens per request over their cached prompts: longer than a decode step, whose
    # attention over ~64 contexts of 4.4k tokens is most of it
    assert rec["extend_pass_ms"] > rec["decode_step_ms"] > rec["decode_attention_ms"] > 0.3 * rec["decode_step_ms"]
    assert rec["span_ms"] >= rec["kernel_ms"] > 0
    subprocess.run([str(REPO / "serve.sh"), "stop"], env=env, cwd=REPO, capture_output=True, timeout=180)
