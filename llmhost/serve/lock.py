"""One start/stop/restart at a time per WORK_DIR (two starts at once moved each other's log away).

An flock on $WORK_DIR/server/.lock: the kernel drops it when the holder dies, so a killed start never leaves
it stuck. The descriptor is not inherited (Python opens files close-on-exec), so the tmux server a start
launches cannot hold it forever. A start holds it only while launching, so `stop` can end a slow start.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Self

from llmhost.serve.console import ServerBusy


class Flock:
    """An exclusive flock on one file, taken at once or not at all; held until release() or the holder dies."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take it if free, at once; False when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ServeLock(Flock):
    """Held between acquire() and release(); a busy lock is ServerBusy (exit 75) after `wait_s` seconds."""

    def __init__(self, state_dir: Path):
        super().__init__(state_dir / ".lock")
        self.state_dir = state_dir

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take it, polling for up to wait_s seconds (0 = one try); ServerBusy when it stays held."""
        deadline = time.monotonic() + wait_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait_s:.0f}s" if wait_s else ""
                raise ServerBusy(f"another ./serve.sh start/stop/restart is running for {self.state_dir}{waited} "
                                 "— wait for it")
            time.sleep(0.5)
