"""Fixtures of the integration tests: an isolated toolkit setup for run_bench.py (tests/integration/benchrun.py)
and a fake host for setup_host.sh (tests/integration/setup_fakes.py)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from benchrun import isolated_env

if TYPE_CHECKING:
    from setup_fakes import Host


@pytest.fixture
def bench_env(tmp_path):
    yield from isolated_env(tmp_path)


@pytest.fixture
def paced_env(tmp_path):
    """5 ms a token: a closed loop at c=8 whose steady window spans several telemetry ticks, even on a busy machine.
    100 ms of prefill a request: a busy machine's few ms of scheduling delay stay well inside the steadiness check's
    TTFT drift tolerance (a 12 ms TTFT drifts by 20% on one busy second, and a repeat that is not steady has no
    steady-window fields)."""
    yield from isolated_env(tmp_path, "STANDIN_ITL_MS=5 STANDIN_TTFT_MS=100")


@pytest.fixture
def host(repo, tmp_path) -> Iterator[Host]:
    from setup_fakes import fake_host  # uv and the local package indexes: only the setup tests load them

    yield from fake_host(repo, tmp_path)
