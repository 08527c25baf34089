"""Shared fixtures: repo paths, captured SGLang transcripts, a free TCP port, run_bench.py as a module."""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest
from standin import harness

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    # Here, not in tests/gpu/conftest.py: pytest reads options only from the root conftest at start-up.
    parser.addoption("--require-gpu", action="store_true", default=False,
                     help="GPU suite: fail (instead of skip) when CUDA, sglang or the model is missing")


def pytest_configure(config: pytest.Config) -> None:
    """One bytecode cache (BYTECODE_CACHE) for every server and load generator the tests start, as a user's WORK_DIR
    keeps one: in a shell that forbids writing bytecode, a cache per test's WORK_DIR would compile the venv's
    packages again at each start. A test of the default path sets its own."""
    os.environ.setdefault("BYTECODE_CACHE", str(Path(tempfile.gettempdir()) / f"llmhost-tests-bytecode-{os.getuid()}"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end runs first, so that none starts last. xdist's load scheduling gives each worker a run of
    consecutive tests at first, so they share the first worker, one after another (~4 min of the suite's ~6), while
    the other workers take the rest. Mark only runs of over a minute: with the slow runs spread over every worker at
    once, the tuner's run met five others, and its repeats disagreed too much to tell its winner."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


@pytest.fixture
def site_python(tmp_path):
    """make(dists) -> a `python` whose sys.path starts with a site dir holding only those dist-infos:
    {name: (version, [Requires-Dist lines])}. Metadata-level fakes of sglang/flashinfer/torch installs."""
    import sys

    def make(dists: dict[str, tuple[str, list[str]]]) -> str:
        site = tmp_path / f"site{len(list(tmp_path.glob('site*')))}"
        for name, (version, requires) in dists.items():
            info = site / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir(parents=True)
            lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                     *(f"Requires-Dist: {r}" for r in requires)]
            (info / "METADATA").write_text("\n".join(lines) + "\n")
        script = site.with_suffix(".python")
        script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
        script.chmod(0o755)
        return str(script)

    return make


@pytest.fixture
def run_bench(monkeypatch):
    """run_bench.py imported as a module (its main(argv) called in-process)."""
    spec = importlib.util.spec_from_file_location("run_bench_cli", REPO / "run_bench.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "run_bench_cli", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
