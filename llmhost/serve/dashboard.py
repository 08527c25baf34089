"""`./serve.sh dashboard [stop]`: RESULTS_DIR served on 127.0.0.1:$DASHBOARD_PORT by Python's http.server, in
its own process group, stopped through its recorded PID. Loopback only: results can name hosts and paths.

Writes $WORK_DIR/server/dashboard.pid and dashboard.log.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from llmhost.config import Config
from llmhost.serve.console import Console, ServeError
from llmhost.serve.process import stop_group
from llmhost.serve.procfs import group_alive, port_holder

SERVER_ARGS = ("-m", "http.server", "--bind", "127.0.0.1")


def running_pid(state_dir: Path) -> int | None:
    """PID of the dashboard server we started, while it runs. After it died (or a reboot) the recorded number
    may belong to someone else's group, so it must still be our http.server."""
    try:
        pid = int((state_dir / "dashboard.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    args = [a.decode(errors="replace") for a in cmdline]
    ours = any(args[i:i + len(SERVER_ARGS)] == list(SERVER_ARGS) for i in range(len(args)))
    return pid if ours and group_alive(pid) else None


def stop(cfg: Config, console: Console) -> None:
    pid = running_pid(cfg.state_dir)
    if pid is None:
        console.info("no dashboard of ours is running")
    else:
        stop_group(pid, 10, console.warn)
        console.info("dashboard stopped")
    (cfg.state_dir / "dashboard.pid").unlink(missing_ok=True)


def start(cfg: Config, console: Console) -> None:
    """Start it unless ours runs; one line with the URL either way."""
    state, directory = cfg.state_dir, cfg.results_path
    directory.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    pid = running_pid(state)
    if pid is None:
        holder = port_holder("127.0.0.1", cfg.dashboard_port)
        if holder:
            raise ServeError(f"port {cfg.dashboard_port} is held by {holder} — set DASHBOARD_PORT=<free port>")
        with open(state / "dashboard.log", "wb") as log:
            pid = subprocess.Popen([sys.executable, *SERVER_ARGS, "--directory", str(directory),
                                    str(cfg.dashboard_port)], stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True).pid
        (state / "dashboard.pid").write_text(f"{pid}\n")
        deadline = time.monotonic() + 10
        while not port_holder("127.0.0.1", cfg.dashboard_port):
            if time.monotonic() >= deadline:
                raise ServeError(f"the dashboard server did not start — see {state / 'dashboard.log'}")
            time.sleep(0.2)
    console.info(f"dashboard: http://127.0.0.1:{cfg.dashboard_port}/ serving {directory} (pid {pid}; "
                 "./serve.sh dashboard stop)")
