"""The tmux session holding the server: start tags the session it makes with its state directory, so a session
of the same name that the user made for something else is never killed or taken.

tmux is run with exact-name targets (`=NAME`): a plain `-t llm` would also match a session called `llmhost`.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from llmhost.serve.console import ServeError

STATE_OPTION = "@llmhost_state"  # a user option on the session: the state directory of the start that made it


def _tmux(*args: str) -> subprocess.CompletedProcess:
    """Run tmux; without tmux installed every query answers "no such session" (stop must still work)."""
    try:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        return subprocess.CompletedProcess(["tmux", *args], 127, "", str(exc))


def require() -> None:
    if shutil.which("tmux") is None:
        raise ServeError("'tmux' not found — install it: sudo apt-get install -y tmux")


def exists(name: str) -> bool:
    return _tmux("has-session", "-t", f"={name}").returncode == 0


def is_ours(name: str, state_dir: Path) -> bool:
    """The session exists and start tagged it with this state directory."""
    if not exists(name):
        return False
    shown = _tmux("display-message", "-p", "-t", f"={name}:", f"#{{{STATE_OPTION}}}")
    return shown.returncode == 0 and shown.stdout.strip() == str(state_dir)


def kill(name: str) -> None:
    _tmux("kill-session", "-t", f"={name}")


def new_session(name: str, argv: Sequence[str], state_dir: Path, cwd: Path) -> None:
    """A detached 200x50 session running argv (no shell in between), tagged with state_dir in the same call."""
    made = _tmux("new-session", "-d", "-s", name, "-x", "200", "-y", "50", "-c", str(cwd), "--", *argv,
                 ";", "set-option", STATE_OPTION, str(state_dir))
    if made.returncode != 0:
        raise ServeError(f"tmux could not start session {name}: {made.stderr.strip()[:200]}")
