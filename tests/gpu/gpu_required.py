"""A GPU stack that is missing: a skip with its reason on a machine not meant to run the GPU suite, a FAILURE with
--require-gpu (or LLMHOST_REQUIRE_GPU=1), so a broken GPU host never exits 0."""
from __future__ import annotations

import os

import pytest


def gpu_required(config: pytest.Config) -> bool:
    return bool(config.getoption("--require-gpu")) or os.environ.get("LLMHOST_REQUIRE_GPU", "") not in ("", "0")


def unavailable(request: pytest.FixtureRequest, reason: str) -> None:
    """Skip, or fail when the run was told the GPU stack must be there."""
    if gpu_required(request.config):
        pytest.fail(f"GPU stack required (--require-gpu) but {reason}", pytrace=False)
    pytest.skip(reason)
