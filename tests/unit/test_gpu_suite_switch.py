"""The GPU suite's strict switch: on a host that should have the GPU stack, a missing one fails instead of skipping."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_gpu_suite(tmp_path: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "LLMHOST_REQUIRE_GPU"}
    environ.update({"SGLANG_PYTHON": str(tmp_path / "no-such-python"), "GPU_SUITE_OUT": str(tmp_path), **env})
    return subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu/test_1_serve_gpu.py", "-x", "-q",
                           "-p", "no:cacheprovider", *extra], cwd=REPO, env=environ, capture_output=True, text=True,
                          timeout=120)


def test_without_the_switch_a_missing_gpu_stack_skips(tmp_path: Path) -> None:
    out = run_gpu_suite(tmp_path)
    assert out.returncode == 0, out.stdout[-800:]
    assert "skipped" in out.stdout and "failed" not in out.stdout


@pytest.mark.parametrize("how", [("--require-gpu",), ()], ids=["flag", "environment"])
def test_with_the_switch_a_missing_gpu_stack_fails(tmp_path: Path, how: tuple[str, ...]) -> None:
    env = {} if how else {"LLMHOST_REQUIRE_GPU": "1"}
    out = run_gpu_suite(tmp_path, *how, **env)
    assert out.returncode == 1, out.stdout[-800:]
    assert "GPU stack required" in out.stdout and "no-such-python" in out.stdout
