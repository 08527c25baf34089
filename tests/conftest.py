"""Shared fixtures: repo paths, captured SGLang transcripts, a free TCP port."""
from __future__ import annotations

from pathlib import Path

import pytest
from standin import harness

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "tests" / "captures"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def captures() -> Path:
    return CAPTURES


@pytest.fixture
def free_port() -> int:
    return harness.free_port()
