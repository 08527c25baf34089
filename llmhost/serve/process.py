"""The server's process group and its state files in $WORK_DIR/server: which group is ours, how to stop it, and
the environment it is launched with.

State files: pid (the server), pgid (the tmux pane's group, written last), started_at (UTC), launch.env (0600,
NUL-separated), launch.argv0 and launch_command.{txt,json} (llmhost/serve/spec.py). Stdlib only.
"""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from llmhost.config import REPO_ROOT
from llmhost.files import write_bytes_atomic
from llmhost.serve.procfs import group_alive, pgid_of, pid_alive
from llmhost.settings import SECRET_ENV_NAME

STATE_FILES = ("pid", "pgid", "started_at")


def read_state(state_dir: Path, names: tuple[str, ...] = STATE_FILES) -> dict[str, str]:
    """pid, pgid, started_at (or the other files named) as the pane recorded them ({} when nothing was started)."""
    out = {}
    for name in names:
        try:
            out[name] = (state_dir / name).read_text().strip()
        except OSError:
            continue
    return out


def server_gone(state_dir: Path) -> str:
    """'' while the recorded server process lives (or none is recorded); else one line saying it is gone. Its
    HTTP workers can outlive it (SGLang's tokenizer workers keep accepting requests that never finish after the
    launcher is killed -9), so /health alone cannot tell."""
    pid = read_state(state_dir).get("pid", "")
    if not pid.isdigit() or pid_alive(int(pid)):
        return ""
    return f"the server process (PID {pid}) is gone"


def clear_state(state_dir: Path) -> None:
    for name in STATE_FILES:
        (state_dir / name).unlink(missing_ok=True)


def recorded_group(state_dir: Path) -> int | None:
    """The process group recorded in STATE/pgid while it is still the one start launched: its leader runs
    `llmhost.serve _run STATE` (the tmux pane), or the recorded server PID (STATE/pid) is in it. None when
    nothing was started, the group is gone, or the number now belongs to someone else (a reboot, PID reuse).
    The one ownership rule: start, stop, running and status all ask this."""
    state = read_state(state_dir)
    pgid, pid = state.get("pgid", ""), state.get("pid", "")
    if not pgid.isdigit() or not group_alive(int(pgid)):
        return None
    try:
        leader = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        leader = ""
    if f"_run {state_dir}" in leader or (pid.isdigit() and pgid_of(int(pid)) == int(pgid)):
        return int(pgid)
    return None


def recorded_port(state_dir: Path) -> int | None:
    """--port of the command start recorded; None when none was recorded."""
    try:
        argv = json.loads((state_dir / "launch_command.json").read_text())["argv"]
        return int(argv[argv.index("--port") + 1])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def stop_group(pgid: int, timeout_s: float, warn: Callable[[str], None]) -> bool:
    """SIGTERM the whole group, wait, then SIGKILL what is left; False when it survived even that."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if _wait_gone(pgid, timeout_s):
        return True
    warn(f"process group {pgid} ignored SIGTERM for {timeout_s:.0f}s — sending SIGKILL")
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    return _wait_gone(pgid, 10)


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def launch_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the server's environment, secret-looking names left out): THIS shell's environment, not that of a tmux
    server started days ago elsewhere. serve.sh put the toolkit first on PYTHONPATH to find llmhost; that entry
    is taken off again, and tmux's own variables stay out."""
    env = {k: v for k, v in environ.items() if k not in ("TMUX", "TMUX_PANE")}
    dropped = [k for k in env if SECRET_ENV_NAME.fullmatch(k)]
    for name in dropped:
        del env[name]
    paths = env.get("PYTHONPATH", "").split(os.pathsep)
    if paths and os.path.realpath(paths[0]) == str(REPO_ROOT):
        rest = os.pathsep.join(paths[1:])
        env.pop("PYTHONPATH")
        if rest:
            env["PYTHONPATH"] = rest
    return env, dropped


def write_launch_env(state_dir: Path, env: Mapping[str, str]) -> None:
    """0600, NUL-separated KEY=VALUE records (values may hold newlines)."""
    records = "".join(f"{k}={v}\0" for k, v in env.items())
    write_bytes_atomic(state_dir / "launch.env", records.encode(errors="surrogateescape"), 0o600)


def read_launch_env(state_dir: Path) -> dict[str, str]:
    records = (state_dir / "launch.env").read_bytes().decode(errors="surrogateescape").split("\0")
    return dict(r.split("=", 1) for r in records if "=" in r)
