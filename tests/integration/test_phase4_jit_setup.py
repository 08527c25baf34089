"""fi_jit_setup.sh against a serving site-packages that has prebuilt kernel packages (a directory with the same
package layout: torch, flashinfer + flashinfer-python dist-info, flashinfer_jit_cache, flashinfer_cubin)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _package(site: Path, module: str, dist: str, version: str) -> None:
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def _serving_python(tmp_path: Path, prebuilt: bool) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site-packages"
    _package(site, "torch", "torch", "2.11.0")
    _package(site, "flashinfer", "flashinfer-python", "0.6.15.post1")
    if prebuilt:
        _package(site, "flashinfer_jit_cache", "flashinfer-jit-cache", "0.6.15.post1+cu130")
        _package(site, "flashinfer_cubin", "flashinfer-cubin", "0.6.15.post1")
    python = tmp_path / "serving-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "SGLANG_PYTHON": str(python), "WORK_DIR": str(tmp_path / "work")}
    env.pop("PYTHONPATH", None)
    return python, env


def _setup(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "fi_jit_setup.sh"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_view_method_hides_prebuilt_packages_and_writes_an_empty_cache_env(tmp_path):
    _, env = _serving_python(tmp_path, prebuilt=True)
    stale = tmp_path / "work/fi-jit-clean/cache/.cache/flashinfer/x/m.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\0")
    proc = _setup(env)
    assert proc.returncode == 0, proc.stderr
    assert "method view" in proc.stdout and "flashinfer-jit-cache present" in proc.stdout
    clean = tmp_path / "work/fi-jit-clean"
    assert not stale.exists() and (clean / "cache").is_dir()  # re-running empties the cache
    view = {p.name for p in (clean / "view").iterdir()}
    assert "torch" in view and "flashinfer" in view and not any(n.startswith("flashinfer_jit_cache") for n in view)
    env_sh = (clean / "env.sh").read_text()
    assert f"PY={clean}/venv/bin/python" in env_sh and f"FLASHINFER_WORKSPACE_BASE={clean}/cache" in env_sh
    probe = subprocess.run([str(clean / "venv/bin/python"), "-c", "import importlib.util as u, flashinfer; "
                            "print(flashinfer.__version__, u.find_spec('flashinfer_jit_cache'))"],
                           capture_output=True, text=True, env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    assert probe.stdout.split() == ["0.6.15.post1", "None"]


def test_reuse_method_when_the_serving_python_has_no_prebuilt_kernels(tmp_path):
    python, env = _serving_python(tmp_path, prebuilt=False)
    proc = _setup(env)
    assert proc.returncode == 0, proc.stderr
    assert "method reuse" in proc.stdout and f"PY={python}" in proc.stdout
    assert not (tmp_path / "work/fi-jit-clean/venv").exists()


def test_dry_run_changes_nothing_and_bad_arguments_exit_2(tmp_path):
    _, env = _serving_python(tmp_path, prebuilt=True)
    proc = _setup(env, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would run: rm -rf" in proc.stdout and "would link" in proc.stdout
    assert not (tmp_path / "work").exists()
    assert _setup(env, "--bogus").returncode == 2
    missing = _setup({**env, "SGLANG_PYTHON": str(tmp_path / "nope")})
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
