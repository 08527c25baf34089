"""Top-level scripts started by the host python3 re-run themselves under the toolkit venv's Python."""
from __future__ import annotations

import subprocess
import sys


def test_a_script_missing_its_modules_reruns_under_the_toolkit_python(tmp_path, repo):
    """The host python3 has no openai/plotly; setup's venv does: the script re-executes itself there, once."""
    marker = tmp_path / "ran-with"
    fake_venv_python = tmp_path / "venv-python"
    fake_venv_python.write_text(f"#!/bin/sh\necho \"$0 $LLMHOST_REEXEC\" > {marker}\nexit 7\n")
    fake_venv_python.chmod(0o755)
    code = ("import sys; sys.modules['plotly'] = None; from llmhost import deps; "
            "deps.ensure('make_dashboard.py', ('plotly',), 'dashboard')")
    env = {"PATH": "/usr/bin:/bin", "SGLANG_PYTHON": str(fake_venv_python), "LLMHOST_CONFIG": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and marker.read_text().split() == [str(fake_venv_python), "1"], proc.stderr
    again = subprocess.run([sys.executable, "-c", code], cwd=repo, env={**env, "LLMHOST_REEXEC": "1"},
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "'plotly' is missing" in again.stderr


def test_a_venv_python_symlinked_to_the_same_interpreter_still_counts_as_another_python(tmp_path, repo):
    """setup's venv python is a symlink to /usr/bin/python3.12, the shebang's python3 too: compare the paths as
    given (their site-packages differ), not their real files."""
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    code = ("import sys; sys.modules['plotly'] = None; from llmhost import deps; "
            "deps.ensure('make_dashboard.py', ('plotly',), 'dashboard')")
    env = {"PATH": "/usr/bin:/bin", "SGLANG_PYTHON": str(venv_python), "LLMHOST_CONFIG": ""}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert f"running with {venv_python}" in proc.stderr
    assert proc.returncode == 2 and "usage: make_dashboard.py" in proc.stderr  # the re-run itself ran (no RUN_DIR)
