"""Shared-prefix decode on a CUDA host: the agent workload at c=64 with SHARED_PREFIX_DECODE=on and its check
(LLMHOST_SHARED_PREFIX_CHECK=1: every two-level decode graph also runs SGLang's own decode on layer 0), asserting from
the server's log that SGLang loaded the plugin, that most steps ran the two-level graph with most rows in groups, and
that the two levels matched SGLang's decode; then the chat workload (no prompt shared), where every step must replay
SGLang's own graph. Throughput is the benchmark's business (README, "Why these defaults"), not this test's.

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy WORK_DIR=/tmp/llmhost-gpu \
        python3 -m pytest -m gpu tests/gpu/test_7_shared_prefix_gpu.py -v --require-gpu

Adds the steps shared_prefix and shared_prefix_chat to $GPU_SUITE_OUT/gpu_suite.json.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_2_measure_gpu import REPO, run

from llmhost import config

pytestmark = pytest.mark.gpu
GROUPED = re.compile(r"shared-prefix decode: (\d+) decode steps, ([\d.]+)% of rows in groups.*; ([\d.]+)% of steps "
                     r"in two levels")
CHECKED = re.compile(r"largest \|two levels - SGLang's decode\| on layer 0 so far: ([\d.e+-]+)")


def _bench(env: dict, workload: str, check: bool, seconds: int) -> tuple[dict, float, str]:
    """One c=64 point of `workload` with the plugin on; the run's summary, seconds and server log."""
    env = {**env, "SHARED_PREFIX_DECODE": "on"}
    if check:
        env["SERVER_ENV"] = f"{env.get('SERVER_ENV', '')} LLMHOST_SHARED_PREFIX_CHECK=1".strip()
    summary, seconds = run(env, "run_bench.py", "--arms", "baseline", "--workloads", workload, "--patterns",
                           "concurrency", "--concurrency", "64", "--repeat", "1", "--duration-s", str(seconds),
                           timeout=600)
    log = (config.load(env).state_dir / "server.log").read_text(errors="replace")
    subprocess.run([str(REPO / "serve.sh"), "stop"], env=env, cwd=REPO, capture_output=True, timeout=180)
    assert summary["points_failed"] == 0, summary
    assert "shared-prefix decode: on (SGLang" in log, "SGLang did not load the plugin: " + Path(
        config.load(env).state_dir, "launch_command.txt").read_text()
    return summary, seconds, log


def test_agents_on_shared_prompts_decode_in_groups_and_match_sglangs_decode(gpu_env, record, tmp_path):
    env = {**gpu_env, "RESULTS_DIR": str(tmp_path / "results")}
    summary, seconds, log = _bench(env, "agent", check=True, seconds=10)
    grouped = [(int(steps), float(rows), float(two)) for steps, rows, two in GROUPED.findall(log)]
    checked = [float(x) for x in CHECKED.findall(log)]
    record.step("shared_prefix", wall_s=seconds,
                points_failed=summary["points_failed"], grouped=grouped[-1:],
                largest_difference=max(checked, default=None))
    # 16 prompts under 64 agents: all but the requests just arrived share theirs (94% of the rows on an H200); the
    # steps of the start-up wave, with few requests decoding, replay SGLang's graph (two levels in 66% of the steps)
    assert grouped and grouped[-1][1] > 50 and grouped[-1][2] > 50, grouped
    # bf16 outputs of the same sums in another order: far below one bf16 step of the outputs (~1e-2)
    assert checked and max(checked) < 1e-3, checked


def test_requests_sharing_no_prompt_replay_sglangs_own_decode_graph(gpu_env, record, tmp_path):
    env = {**gpu_env, "RESULTS_DIR": str(tmp_path / "results")}
    summary, seconds, log = _bench(env, "chat", check=False, seconds=20)  # >1,000 steps: a stats line
    grouped = [(int(steps), float(rows), float(two)) for steps, rows, two in GROUPED.findall(log)]
    record.step("shared_prefix_chat", wall_s=seconds, points_failed=summary["points_failed"], grouped=grouped[-1:])
    # chat conversations share no prompt: no step pays for a second level (H200: 0.0% of 8,000 steps)
    assert grouped and grouped[-1][2] == 0.0, grouped
