"""Run a top-level script under a Python that has the modules it needs: one rule for every Python entry point.

`./run_bench.py`, `./make_dashboard.py` and `./smoke_test.py` start with whatever `python3` is first on PATH, which
usually lacks openai, pandas and plotly. A script missing a module re-executes itself, once, with the first of

    1. the checkout's own venv   .venv/bin/python (./tests/run_cpu.sh creates it)
    2. SGLANG_PYTHON             $WORK_DIR/venv/bin/python (./setup_host.sh creates it)
    3. python3 on PATH

that has every module (probed without importing them), or ends with one line naming what it tried and the real
WORK_DIR. run_phase4.sh's python_with applies the same order. Stdlib only, Python 3.9: smoke_test.py runs on laptops.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

from llmhost import config

REEXEC_ENV = "LLMHOST_REEXEC"  # set on the re-executed process: never loop
_PROBE = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"


def missing(modules: Tuple[str, ...]) -> Optional[str]:
    """The first module of `modules` that this Python cannot find (the probe the other Pythons get; nothing is
    imported, so a script checks its arguments without paying for pandas or openai first); None when all are there."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: a module blocked with sys.modules[name] = None
            found = False
        if not found:
            return name
    return None


def rule_pythons(sglang_python: str) -> List[str]:
    """The rule's Pythons that exist, in order, without repeats."""
    found: List[str] = []
    for name in (str(config.REPO_ROOT / ".venv" / "bin" / "python"), sglang_python, "python3"):
        path = shutil.which(name) if name else None
        # abspath, not realpath: a venv's python is a symlink to the same interpreter as the host's python3
        if path and os.path.abspath(path) not in {os.path.abspath(p) for p in found}:
            found.append(path)
    return found


def candidates(sglang_python: str) -> List[str]:
    """The rule's Pythons other than this very interpreter (those a script can re-run itself with)."""
    return [p for p in rule_pythons(sglang_python) if os.path.abspath(p) != os.path.abspath(sys.executable)]


def has_modules(python: str, modules: Tuple[str, ...]) -> bool:
    try:
        return subprocess.run([python, "-c", _PROBE, *modules], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def first_with(modules: Tuple[str, ...], sglang_python: str) -> Optional[str]:
    """The rule's first Python (not this one) that has every module of `modules`; None when none has."""
    return next((python for python in candidates(sglang_python) if has_modules(python, modules)), None)


def rerun_elsewhere(script: str, modules: Tuple[str, ...], prefix: str) -> None:
    """When a module of `modules` does not import here, exec `script` under the rule's first Python that has them
    all; return when none does (or this already is the re-run)."""
    gone = missing(modules)
    if gone is None or os.environ.get(REEXEC_ENV):
        return
    try:
        sglang_python = config.load().sglang_python
    except config.ConfigError:  # the script reports it, with its own prefix, when it loads the config
        sglang_python = ""
    python = first_with(modules, sglang_python)
    if python:
        print(f"[{prefix}] '{gone}' is not in {sys.executable}: running with {python}", file=sys.stderr, flush=True)
        os.execve(python, [python, os.path.abspath(script), *sys.argv[1:]], {**os.environ, REEXEC_ENV: "1"})


def ensure(script: str, modules: Tuple[str, ...], prefix: str) -> None:
    """Return when `modules` import here; else re-run under the rule's first Python that has them; else exit 1 with
    one line naming the Pythons tried and the real WORK_DIR (or the configuration problem that hides it)."""
    rerun_elsewhere(script, modules, prefix)
    gone = missing(modules)
    if gone is None:
        return
    try:
        cfg = config.load()
    except config.ConfigError as exc:
        print(f"[{prefix}] error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    tried = candidates(cfg.sglang_python)
    print(f"[{prefix}] error: python module '{gone}' is missing in {sys.executable}"
          f"{' and in ' + ', '.join(tried) if tried else ''} — run ./setup_host.sh (it installs it into "
          f"{cfg.work_dir}/venv, SGLANG_PYTHON) or ./tests/run_cpu.sh (the checkout's .venv)", file=sys.stderr)
    raise SystemExit(1)


def main(argv: List[str]) -> int:
    """`python3 -m llmhost.deps MODULE...`: the rule's first Python (this one included) with every MODULE, else
    SGLANG_PYTHON, whose own error then names what is missing. For the shell scripts (run_phase4.sh)."""
    try:
        sglang_python = config.load().sglang_python
    except config.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    modules = tuple(argv)
    print(next((p for p in rule_pythons(sglang_python) if has_modules(p, modules)), sglang_python))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
