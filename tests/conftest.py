"""Shared fixtures: repo paths, captured SGLang transcripts, a free TCP port."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
