"""A line now and then while a benchmark's server start runs longer than this run's boots take.

    with BootWatch(say, expected_s=35.0, log=cfg.state_dir / "server.log"):
        restart_server(...)

The restart writes its own progress to raw/serve-<arm>.log, so a start that compiles for minutes (an arm with
--enable-torch-compile autotuned 7 minutes of GEMMs on an H200) would otherwise show nothing but an ETA counting
down to zero. Past `expected_s` (and never before FIRST_S: an ordinary start says nothing), and every EVERY_S after,
`say` gets how long the start has run, how long it was expected to take and the server log's last line.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from llmhost.bench.eta import fmt_s
from llmhost.serve import serverlog

FIRST_S = 60.0  # the earliest line: H200 starts with warm caches take 30-50 s
EVERY_S = 60.0  # then one a minute


class BootWatch:
    def __init__(self, say: Callable[[str], None], expected_s: float, log: Path,
                 first_s: float | None = None, every_s: float | None = None):
        self.say, self.expected_s, self.log = say, expected_s, log
        self.first_s = max(FIRST_S if first_s is None else first_s, expected_s)
        self.every_s = EVERY_S if every_s is None else every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bootwatch", daemon=True)
        self._started = 0.0

    def __enter__(self) -> BootWatch:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def line(self, elapsed_s: float) -> str:
        text = f"the server is still starting after {fmt_s(elapsed_s)} (expected ~{fmt_s(self.expected_s)})"
        last = serverlog.last_line(self.log)
        return f"{text} | log: {last}" if last else text

    def _watch(self) -> None:
        due = self.first_s
        while not self._done.wait(max(0.0, due - (time.monotonic() - self._started))):
            self.say(self.line(time.monotonic() - self._started))
            due += self.every_s
