"""Run a top-level script under the Python that has the toolkit's dependencies.

setup_host.sh installs openai, pandas and plotly into the venv of SGLANG_PYTHON, not into the host python3 that
`./run_bench.py` or `./make_dashboard.py` start with. A script missing a module re-executes itself once with
SGLANG_PYTHON, or ends with one line saying what to run.
"""
from __future__ import annotations

import os
import shutil
import sys

REEXEC_ENV = "LLMHOST_REEXEC"  # set on the re-executed process: never loop


def missing(modules: tuple[str, ...]) -> str | None:
    """The first module of `modules` that does not import here; None when all do."""
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            return name
    return None


def ensure(script: str, modules: tuple[str, ...], prefix: str) -> None:
    """Return when `modules` import; else exec `script` with SGLANG_PYTHON, else exit 1 with one line."""
    gone = missing(modules)
    if gone is None:
        return
    from llmhost import config

    try:
        python = shutil.which(config.load().sglang_python) or ""
    except (config.ConfigError, OSError):
        python = ""
    # abspath, not realpath: setup's venv python is a symlink to the same /usr/bin/python3.12 as the shebang's
    if python and os.path.abspath(python) != os.path.abspath(sys.executable) and not os.environ.get(REEXEC_ENV):
        print(f"[{prefix}] '{gone}' is not in {sys.executable}: running with {python}", file=sys.stderr, flush=True)
        os.execve(python, [python, os.path.abspath(script), *sys.argv[1:]], {**os.environ, REEXEC_ENV: "1"})
    print(f"[{prefix}] error: python module '{gone}' is missing in {sys.executable} — run ./setup_host.sh (its venv "
          f"has it) or run this script with the toolkit venv's python (SGLANG_PYTHON)", file=sys.stderr)
    raise SystemExit(1)
