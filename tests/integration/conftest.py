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
def host(repo, tmp_path) -> Iterator[Host]:
    from setup_fakes import fake_host  # uv and the local package indexes: only the setup tests load them

    yield from fake_host(repo, tmp_path)
