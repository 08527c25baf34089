"""One rule for every Python entry point: the checkout's .venv, then SGLANG_PYTHON, then python3 (llmhost/deps.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NO_SITE = "#!/bin/sh\nexec {python} -S \"$@\"\n"  # a host python3 without site-packages: no numpy/pandas/plotly
RECORDING = "#!/bin/sh\necho \"$0\" >> {marker}\nexec {python} \"$@\"\n"


def checkout(tmp_path: Path, repo: Path) -> Path:
    """A copy of the toolkit (package, config.env, make_dashboard.py), so a .venv can be made beside it."""
    root = tmp_path / "checkout"
    shutil.copytree(repo / "llmhost", root / "llmhost", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("config.env", "make_dashboard.py"):
        shutil.copy(repo / name, root / name)
    return root


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def host(tmp_path):
    """(checkout, host python3 lacking plotly, marker file that a recording python appends its path to)."""
    return (checkout(tmp_path, Path(__file__).resolve().parents[2]),
            script(tmp_path / "host" / "python3", NO_SITE.format(python=sys.executable)), tmp_path / "ran-with")


def dashboard(checkout_dir: Path, python: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(checkout_dir / "make_dashboard.py"), "/nonexistent-run"],
                          cwd=checkout_dir, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(checkout_dir),
                               "LLMHOST_CONFIG": "", **env})


def test_the_checkouts_venv_runs_the_script_when_the_host_python3_lacks_plotly(host):
    root, host_python, marker = host
    venv_python = script(root / ".venv" / "bin" / "python", RECORDING.format(marker=marker, python=sys.executable))
    sglang_python = script(root.parent / "sglang-python", RECORDING.format(marker=marker, python=sys.executable))
    proc = dashboard(root, host_python, SGLANG_PYTHON=str(sglang_python))
    assert f"running with {venv_python}" in proc.stderr  # first in the rule, though SGLANG_PYTHON has plotly too
    assert marker.read_text().splitlines()[-1] == str(venv_python)
    assert proc.returncode == 1 and "/nonexistent-run is not a directory" in proc.stderr  # the re-run itself ran


def test_sglang_python_comes_next_and_a_python_without_the_modules_is_passed_over(host):
    root, host_python, marker = host
    script(root / ".venv" / "bin" / "python", NO_SITE.format(python=sys.executable))  # a .venv without plotly
    sglang_python = script(root.parent / "sglang-python", RECORDING.format(marker=marker, python=sys.executable))
    proc = dashboard(root, host_python, SGLANG_PYTHON=str(sglang_python))
    assert f"running with {sglang_python}" in proc.stderr and set(marker.read_text().split()) == {str(sglang_python)}  # probe, run


def test_no_python_with_the_modules_is_one_line_naming_what_was_tried_and_the_real_work_dir(host):
    root, host_python, _ = host
    proc = dashboard(root, host_python, WORK_DIR="/srv/llm", SGLANG_PYTHON="/srv/llm/venv/bin/python",
                     PATH=f"{host_python.parent}:/bin-none")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"'numpy' is missing in {sys.executable}" in proc.stderr and "/srv/llm/venv" in proc.stderr


def test_a_bad_setting_is_named_instead_of_a_missing_module(host):
    root, host_python, _ = host
    proc = dashboard(root, host_python, PORT="x", PATH=f"{host_python.parent}:/bin-none")
    assert proc.returncode == 1 and proc.stderr == "[dashboard] error: environment: PORT=x is not a port (1-65535)\n"


def test_a_venv_python_symlinked_to_the_same_interpreter_still_counts_as_another_python(tmp_path, repo):
    """setup's venv python is a symlink to /usr/bin/python3.12, the shebang's python3 too: compare the paths as
    given (their site-packages differ), not their real files."""
    sys.path.insert(0, str(repo))
    from llmhost import deps

    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    assert str(venv_python) in deps.candidates(str(venv_python))
    assert sys.executable not in deps.candidates(sys.executable)
