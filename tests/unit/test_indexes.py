"""Asking package indexes: the real uv against real PEP 503 indexes on 127.0.0.1 (tests/fixtures_index.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fixtures_index import LocalIndex, dead_url, publish_sglang
from uv import find_uv_bin

from llmhost.setup import indexes
from llmhost.setup import versions

UV = find_uv_bin()
TARGET = indexes.target_args(None)


@pytest.fixture
def index(tmp_path, monkeypatch):
    """(LocalIndex, base URL) stocked like the real indexes for SGLang 0.5.17, uv's cache in tmp_path."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    local = LocalIndex(tmp_path / "www")
    publish_sglang(local)
    with local.serve() as base:
        yield local, base


def check(base_or_url: str, requirement: str, **options) -> indexes.Finding:
    name, version = requirement.split("==")
    return indexes.check(UV, name, version, indexes.Source(base_or_url), TARGET, **options)


def test_a_version_on_the_index_resolves_with_every_pin(index):
    _, base = index
    finding = check(f"{base}/pypi", "sglang==0.5.17")
    assert finding.state == "resolves"
    assert dict(finding.pins) == {"sglang": "0.5.17", "flashinfer-python": "0.6.15.post1"}
    assert finding.text() == f"{base}/pypi: resolves (2 packages)"


def test_the_jit_cache_pin_without_local_tag_resolves_to_the_cuda_build(index):
    _, base = index
    finding = check(f"{base}/flashinfer/cu130", "flashinfer-jit-cache==0.6.15.post1", no_deps=True)
    assert finding.pins == (("flashinfer-jit-cache", "0.6.15.post1+cu130"),)


def test_a_missing_version_names_the_newest_the_index_has(index):
    _, base = index
    finding = check(f"{base}/pypi", "flashinfer-cubin==0.6.15.post1", no_deps=True)
    assert (finding.state, finding.detail) == ("missing", "version 0.6.15.post1 (newest there: 0.6.13)")


def test_a_project_the_index_lacks_is_missing(index):
    _, base = index
    finding = check(f"{base}/pypi", "flashinfer-jit-cache==0.6.15.post1", no_deps=True)
    assert (finding.state, finding.detail) == ("missing", "(no flashinfer-jit-cache project there)")


def test_an_index_that_does_not_answer_is_unreachable():
    url = dead_url()
    finding = check(url, "flashinfer-cubin==0.6.15.post1", no_deps=True)
    assert finding.state == "unreachable" and "refused" in finding.detail.lower()
    assert finding.text().startswith(f"{url}: unreachable (")


def test_a_listed_version_that_cannot_resolve_carries_uvs_reason(index):
    local, base = index
    local.add("pypi", "broken", "1.0", requires=["flashinfer-python==9.9"])
    finding = check(f"{base}/pypi", "broken==1.0")
    assert finding.state == "fails" and "flashinfer-python" in finding.detail


def test_a_wheelhouse_is_a_source_too(index, tmp_path):
    local, _ = index
    wheelhouse = local.root / "pypi" / "flashinfer-cubin"  # a folder of wheels: 0.6.13 only
    source = indexes.Source(str(wheelhouse), is_wheelhouse=True)
    assert indexes.check(UV, "flashinfer-cubin", "0.6.13", source, TARGET, no_deps=True).state == "resolves"
    missing = indexes.check(UV, "flashinfer-cubin", "0.6.15.post1", source, TARGET, no_deps=True)
    assert missing.state == "missing" and "0.6.15.post1" in missing.detail


@pytest.mark.parametrize(("filename", "version"), [
    ("flashinfer_jit_cache-0.6.15.post1+cu130-cp39-abi3-manylinux_2_28_x86_64.whl", "0.6.15.post1+cu130"),
    ("flashinfer_cubin-0.6.13-py3-none-any.whl", "0.6.13"),
    ("flashinfer_python-0.6.15.post1.tar.gz", "0.6.15.post1"),
    ("flashinfer-bench-0.1.2.tar.gz", None),  # another project's sdist on the same page
    ("README.md", None),
])
def test_file_versions_from_pep503_file_names(filename, version):
    assert indexes._file_version(filename, "flashinfer-python" if "tar" in filename else "x") == version


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmhost.setup.indexes", *args, "--uv", UV], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


def test_cli_check_prints_the_verdict_then_the_pins_and_exits_0_only_when_it_resolves(index):
    _, base = index
    ok = cli("check", "--index", f"{base}/pypi", "--show", "flashinfer-python", "sglang==0.5.17")
    assert ok.returncode == 0
    assert ok.stdout.splitlines() == [f"{base}/pypi: resolves (2 packages: flashinfer-python 0.6.15.post1)",
                                      "pin flashinfer-python 0.6.15.post1", "pin sglang 0.5.17"]
    missing = cli("check", "--index", f"{base}/pypi", "sglang==0.5.99")
    assert missing.returncode == 1 and "missing version 0.5.99 (newest there: 0.5.17)" in missing.stdout
    bad = cli("check", "--index", f"{base}/pypi", "sglang>=0.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_cli_flashinfer_plan_before_the_venv_exists_places_each_addon(index):
    _, base = index
    env = {"PYPI_INDEX_URL": f"{base}/pypi", "FLASHINFER_INDEX_URL": dead_url()}
    proc = cli("flashinfer-plan", "--planned-base", "0.6.15.post1", "--cuda", "13.0", env=env)
    assert proc.returncode == 0, proc.stderr
    plan = proc.stdout.splitlines()
    assert plan[:2] == ["cuda cu130 13.0", "ok flashinfer-python 0.6.15.post1 pinned by sglang (0.6.15.post1)"]
    skips = [line for line in plan if line.startswith("skip ")]
    assert [line.split()[1] for line in skips] == ["flashinfer-cubin", "flashinfer-jit-cache"]
    assert f"{env['FLASHINFER_INDEX_URL']}/cu130: unreachable" in skips[1]
    assert versions.FLASHINFER_BASE not in " ".join(skips)
