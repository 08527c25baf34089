"""What the user sees of the server lifecycle: `[serve]` lines, and the errors that end a command in one line.

Exit codes (serve.sh's interface): 0 ok, 1 ServeError, 2 UsageError, 75 ServerBusy (EX_TEMPFAIL: another
start/stop/restart holds the lock; a caller that must act can wait and retry), 130 interrupted.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import TextIO

EXIT_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_INTERRUPTED = 1, 2, 75, 130


class ServeError(Exception):
    """A failure with a one-line message naming what failed and what to do next (exit 1)."""

    exit_code = EXIT_FAILED


class UsageError(ServeError):
    """A command line that cannot be run (exit 2)."""

    exit_code = EXIT_USAGE


class ServerBusy(ServeError):
    """Another start/stop/restart of this WORK_DIR is running (exit 75): not a failure of the server."""

    exit_code = EXIT_BUSY


@dataclasses.dataclass(frozen=True, slots=True)
class Console:
    """Where progress goes: stdout/stderr by default, a log file for the benchmark runner (both streams)."""

    out: TextIO | None = None  # None = sys.stdout at the time of writing (so tests that capture it see it)
    err: TextIO | None = None

    def info(self, text: str) -> None:
        print(f"[serve] {text}", file=self.out or sys.stdout, flush=True)

    def report(self, text: str) -> None:
        """A `[serve]` line on stderr that is not an error by itself (a log tail, an interruption)."""
        print(f"[serve] {text}", file=self.err or sys.stderr, flush=True)

    def note(self, text: str) -> None:
        print(f"[serve] note: {text}", file=self.err or sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        print(f"[serve] warning: {text}", file=self.err or sys.stderr, flush=True)

    def error(self, text: str) -> None:
        print(f"[serve] error: {text}", file=self.err or sys.stderr, flush=True)
