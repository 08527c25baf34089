"""Fixtures of the integration tests: an isolated toolkit setup for run_bench.py (tests/integration/benchrun.py)."""
from __future__ import annotations

import pytest
from benchrun import isolated_env


@pytest.fixture
def bench_env(tmp_path):
    yield from isolated_env(tmp_path)
