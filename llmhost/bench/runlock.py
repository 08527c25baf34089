"""One benchmark run per server at a time: a lock held by run_bench.py for the whole run.

Two runs against one server contaminate each other: the second restarts the server under the first, their points
overlap in time, and both would publish the overlap as clean numbers. So a run takes an flock on
$WORK_DIR/server/bench.lock before it restarts anything and keeps it until it exits (the kernel drops it when the
holder dies, even by SIGKILL). The file holds the owner's pid, run directory, command and start time, so a refused
run can name what it waits for. Nothing else is written.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from llmhost.serve.lock import Flock

LOCK_FILE = "bench.lock"


class RunBusy(Exception):
    """Another run holds the server; the message is one line naming it and what to do."""


class RunLock(Flock):
    """Held from acquire() until release() or the process exits."""

    def __init__(self, state_dir: Path):
        super().__init__(state_dir / LOCK_FILE)

    def acquire(self, command: list[str]) -> None:
        """Take the lock at once or raise RunBusy naming its owner (no waiting: a run can last hours)."""
        if not self.try_acquire():
            raise RunBusy(f"another benchmark run holds this server: {owner_line(self.path)} — wait for it to "
                          "end (or stop it: kill its pid; it resumes with --resume), then run again")
        self.record_owner(command, run_dir=None)

    def record_owner(self, command: list[str], run_dir: Path | None) -> None:
        """Rewrite the owner's description (the run directory is known only after the lock is taken)."""
        if self._fd is None:
            return
        owner = {"pid": os.getpid(), "run_dir": str(run_dir) if run_dir else None, "command": command,
                 "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        data = json.dumps(owner).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def owner_line(path: Path) -> str:
    """'pid 4121, run results/bench/X, since 2026-01-01 12:00:00 UTC (run_bench.py --quick)' from the lock file."""
    try:
        owner = json.loads(path.read_text())
        where = f"run {owner['run_dir']}" if owner.get("run_dir") else "run directory not created yet"
        return (f"pid {owner['pid']}, {where}, since {owner['started_at']} "
                f"({' '.join(owner['command'])[:160]})")
    except (OSError, ValueError, KeyError, TypeError):  # being rewritten this instant
        return "owner not readable yet"
