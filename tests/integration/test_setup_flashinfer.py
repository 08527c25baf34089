"""setup_host.sh's flashinfer phase and the dry run's rehearsals on a fake host (tests/integration/setup_fakes.py):
the real uv resolves and installs from real package indexes on 127.0.0.1 (tests/fixtures_index.py), "pypi" and
FlashInfer's, stocked as a fresh box meets them (flashinfer-cubin 0.6.15.post1 only on FlashInfer's); stale,
mismatched, missing or unreachable add-ons, a wheelhouse, and a dry run without uv on PATH."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_index import dead_url
from setup_fakes import Host
from uv import find_uv_bin

from llmhost.setup import versions


def real_venv(host: Host, stale: list[str] = ()) -> Path:
    """WORK_DIR/venv as the sglang phase leaves it: the stub sglang, flashinfer-python and torch (CUDA 13.0)
    installed by the real uv from the local "pypi", `stale` add-ons from the local "stale" index, uv beside them."""
    venv = host.work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    os.symlink(find_uv_bin(), venv / "bin" / "uv")
    env = {**os.environ, "UV_CACHE_DIR": str(host.tmp / "uv-cache")}
    install = [find_uv_bin(), "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
    subprocess.run([*install, "--index-url", host.pypi, "sglang==0.5.17", "torch==2.11.0"], check=True, env=env)
    if stale:
        subprocess.run([*install, "--no-deps", "--index-url", host.pypi.replace("/pypi", "/stale"), *stale],
                       check=True, env=env)
    return venv


def addons(venv: Path) -> dict[str, str]:
    packages = versions.probe(str(venv / "bin" / "python"))["packages"]
    return {name: packages[name] for name in ("flashinfer-cubin", "flashinfer-jit-cache") if name in packages}


def test_the_cubin_comes_from_flashinfers_index_when_pypi_stopped_publishing_it(host):
    venv = real_venv(host)
    proc = host.run("--only", "flashinfer")
    assert proc.returncode == 0, proc.stderr
    assert addons(venv) == {"flashinfer-cubin": "0.6.15.post1", "flashinfer-jit-cache": "0.6.15.post1+cu130"}
    assert "flashinfer-jit-cache 0.6.15.post1+cu130, all equal (cu130)" in proc.stdout
    assert proc.stderr == ""


def test_stale_addons_are_replaced_with_exact_versions(host):
    host.index.add("stale", "flashinfer-cubin", "0.6.15")
    host.index.add("stale", "flashinfer-jit-cache", "0.6.15.post1+cu129")
    venv = real_venv(host, ["flashinfer-cubin==0.6.15", "flashinfer-jit-cache==0.6.15.post1+cu129"])
    proc = host.run("--only", "flashinfer")
    assert proc.returncode == 0, proc.stderr
    assert addons(venv) == {"flashinfer-cubin": "0.6.15.post1", "flashinfer-jit-cache": "0.6.15.post1+cu130"}


def test_an_index_serving_another_cuda_build_is_caught_after_the_install(host):
    """A mirror that filed the cu129 JIT cache under cu130: uv installs it (== ignores +local), the re-check fails."""
    host.index.add("mirror", "flashinfer-cubin", "0.6.15.post1")
    host.index.add("mirror/cu130", "flashinfer-jit-cache", "0.6.15.post1+cu129")
    host.env["FLASHINFER_INDEX_URL"] = host.pypi.replace("/pypi", "/mirror")
    real_venv(host)
    proc = host.run("--only", "flashinfer")
    assert proc.returncode == 1 and "still inconsistent" in proc.stderr and "+cu129" in proc.stderr


def test_flashinfers_index_down_is_one_warning_and_setup_goes_on_without_the_addons(host):
    host.env["FLASHINFER_INDEX_URL"] = dead_url()
    venv = real_venv(host)
    proc = host.run("--only", "flashinfer")
    assert proc.returncode == 0, proc.stderr
    assert addons(venv) == {}
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "going on without flashinfer-cubin flashinfer-jit-cache" in proc.stderr
    assert f"{host.env['FLASHINFER_INDEX_URL']}: unreachable" in proc.stderr and "JIT-compiles" in proc.stderr
    assert "without flashinfer-cubin flashinfer-jit-cache (JIT-compiled instead)" in proc.stdout


def test_a_version_no_index_publishes_is_one_line_naming_it(host):
    host.index.add("old", "flashinfer-cubin", "0.6.14")
    host.index.add("old/cu130", "flashinfer-jit-cache", "0.6.15.post1+cu130")
    host.env["FLASHINFER_INDEX_URL"] = host.pypi.replace("/pypi", "/old")
    venv = real_venv(host)
    proc = host.run("--only", "flashinfer")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "flashinfer-cubin==0.6.15.post1 is on none of its indexes" in proc.stderr
    assert "missing version 0.6.15.post1 (newest there: 0.6.14)" in proc.stderr
    assert "missing version 0.6.15.post1 (newest there: 0.6.13)" in proc.stderr  # PyPI, tried second
    assert addons(venv) == {}


def test_a_wheelhouse_without_the_addons_warns_and_one_with_them_installs_them(host, tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    (wheelhouse / "sglang.whl").parent.mkdir()
    for wheel in (host.index.root / "pypi").glob("*/*.whl"):
        (wheelhouse / wheel.name).write_bytes(wheel.read_bytes())
    (wheelhouse / "flashinfer_cubin-0.6.13-py3-none-any.whl").unlink()
    venv = real_venv(host)
    proc = host.run("--wheelhouse", str(wheelhouse), "--only", "flashinfer")
    assert proc.returncode == 0, proc.stderr
    assert f"not in the wheelhouse {wheelhouse}" in proc.stderr and addons(venv) == {}
    for wheel in (host.index.root / "flashinfer").glob("**/*.whl"):
        (wheelhouse / wheel.name).write_bytes(wheel.read_bytes())
    proc = host.run("--wheelhouse", str(wheelhouse), "--only", "flashinfer")
    assert proc.returncode == 0, proc.stderr
    assert addons(venv) == {"flashinfer-cubin": "0.6.15.post1", "flashinfer-jit-cache": "0.6.15.post1+cu130"}


def test_dry_run_resolves_sglang_and_names_where_each_addon_would_come_from(host):
    sglang = host.run("--dry-run", "--only", "sglang")
    assert sglang.returncode == 0, sglang.stdout + sglang.stderr
    assert f"sglang==0.5.17 from {host.pypi}: resolves (2 packages: flashinfer-python 0.6.15.post1)" in sglang.stdout
    proc = host.run("--dry-run", "--only", "flashinfer")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flashinfer = host.env["FLASHINFER_INDEX_URL"]
    assert f"would install flashinfer-cubin==0.6.15.post1 from {flashinfer}\n" in proc.stdout
    assert f"would install flashinfer-jit-cache==0.6.15.post1 from {flashinfer}/cu130\n" in proc.stdout
    assert f"{host.pypi}: missing version 0.6.15.post1 (newest there: 0.6.13)" in proc.stdout
    assert not host.work.exists()


def test_dry_run_with_flashinfers_index_down_says_so_and_would_go_on(host):
    host.env["FLASHINFER_INDEX_URL"] = dead_url()
    proc = host.run("--dry-run", "--only", "flashinfer")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"flashinfer-jit-cache==0.6.15.post1 from {host.env['FLASHINFER_INDEX_URL']}/cu130: unreachable (" \
        in proc.stdout
    assert "going on without flashinfer-cubin flashinfer-jit-cache" in proc.stderr


@pytest.mark.parametrize(("setting", "phase", "message"), [
    ({"SGLANG_VERSION": "0.5.99"}, "sglang", "missing version 0.5.99 (newest there: 0.5.17)"),
    ({"FLASHINFER_INDEX_URL": "OLD"}, "flashinfer", "flashinfer-cubin==0.6.15.post1 is on none of its indexes"),
])
def test_dry_run_stops_on_a_pin_no_index_can_meet(host, setting, phase, message):
    host.index.add("old", "flashinfer-cubin", "0.6.14")
    host.env.update({k: host.pypi.replace("/pypi", "/old") if v == "OLD" else v for k, v in setting.items()})
    proc = host.run("--dry-run", "--only", phase)
    assert proc.returncode == 1 and message in proc.stderr, proc.stdout + proc.stderr
    assert f"1 phase(s) would stop a real run: {phase}" in proc.stdout


def without_uv(host: Host) -> None:
    """No uv on PATH, no pip configuration of this machine: the dry run has to install uv itself."""
    (host.bin / "uv").unlink()
    host.shim("python3.12", "exit 0")  # the venv a real run would create: not created in a dry run
    host.env.update(PATH=f"{host.bin}:/usr/bin:/bin", PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="")


def test_dry_run_without_uv_installs_one_from_the_index_into_a_throwaway_venv(host):
    """pip installs uv from PYPI_INDEX_URL (here a stand-in wheel that runs the real uv), as the python phase will."""
    without_uv(host)
    script = f'#!/bin/sh\nexec "{find_uv_bin()}" "$@"\n'
    host.index.add("pypi", "uv", "0.13.8", files={"uv-0.13.8.data/scripts/uv": script})
    proc = host.run("--dry-run", "--only", "python")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(pip installed it from {host.pypi} into a throwaway venv)" in proc.stdout


def test_dry_run_stops_at_the_python_phase_when_the_index_has_no_uv(host):
    without_uv(host)
    proc = host.run("--dry-run", "--only", "python")
    assert proc.returncode == 1 and f"pip cannot install uv from {host.pypi}" in proc.stderr, proc.stderr
