"""The body of the tmux pane: run the recorded launch command in this process group with the recorded
environment, its output (API key redacted) into the pane and server.log; record pid, pgid and started_at.

    python -m llmhost.serve _run $WORK_DIR/server      # started by `start` inside tmux, not by hand
Reads launch.argv0, launch.env, sglang_config.yaml; writes started_at, pid, pgid (last: start waits for it),
server.log (appended), and a closing line with the exit code. With ROUTER=on it runs the members start recorded
instead (llmhost/serve/service.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from llmhost.files import write_text_atomic
from llmhost.serve import serverlog, service
from llmhost.serve.process import read_launch_env
from llmhost.serve.spec import CONFIG_FILE_NAME


def run_pane(state_dir: Path) -> int:
    """Launch, copy the output until the server exits, note its exit code; returns that code."""
    # tmux makes each pane a session leader; setsid guarantees one process group for the server tree anyway
    if os.getpgid(0) != os.getpid():
        os.setsid()
    # Ctrl-C in the pane reaches the server (same group) and ends it; the pane stays to write the closing line.
    # A handler, not SIG_IGN: an ignored signal would stay ignored in the server after exec.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    config = state_dir / CONFIG_FILE_NAME
    secrets = serverlog.key_secrets(config) if config.exists() else []
    write_text_atomic(state_dir / "started_at", time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    with open(state_dir / "server.log", "ab") as log:
        if service.read_members(state_dir):  # ROUTER=on: workers and router as one service
            write_text_atomic(state_dir / "pgid", f"{os.getpid()}\n")
            return service.run_service(state_dir, secrets, service.pane_sinks(log))
        argv = (state_dir / "launch.argv0").read_bytes().decode(errors="surrogateescape").split("\0")[:-1]
        server = subprocess.Popen(argv, env=read_launch_env(state_dir), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        write_text_atomic(state_dir / "pid", f"{server.pid}\n")
        write_text_atomic(state_dir / "pgid", f"{os.getpid()}\n")
        sinks = service.pane_sinks(log)
        serverlog.copy_output(lambda n: os.read(server.stdout.fileno(), n), sinks, secrets)
        code = server.wait()
        code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell reports it
        serverlog.emit(f"[serve] server exited with code {code}\n".encode(), sinks)
    return code
