"""Loads the torch stand-ins of what the shared-prefix patches patch (tests/fixtures_shared_prefix_torch.py), with
torch's CPU build on the path, and runs patches.apply() on them: for the tests that need torch, so that no other test
worker imports it."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

TORCH_DIR = Path(sys.prefix) / "torch-cpu"  # torch's CPU build, where tests/run_cpu.sh installs it: in the test venv


def load(monkeypatch: pytest.MonkeyPatch, check: bool = True) -> ModuleType:
    """The stand-ins module, installed where patches.apply() imports them, with apply() run on them (the check on
    unless asked off)."""
    if not (TORCH_DIR / "torch").is_dir():
        pytest.fail(f"torch's CPU build is not in {TORCH_DIR}: ./tests/run_cpu.sh installs it", pytrace=False)
    monkeypatch.syspath_prepend(str(TORCH_DIR))
    module = importlib.import_module("fixtures_shared_prefix_torch")
    module.install(monkeypatch, check)
    return module
