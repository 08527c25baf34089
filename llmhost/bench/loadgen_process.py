"""The load-generator process of one server boot, seen from run_bench.py: start it, send it points, stop it.

    with LoadGenerator(python, module, env, log_file) as gen:      # imports SGLang's benchmark module once
        gen.launch(prepare=[argv, ...])                             # optional: build datasets while the server boots
        gen.start()                                                 # ready (and prepared)
        summary, error = gen.run(argv, requests_file, limit_s=300)  # one point, in that process

The process (llmhost/bench/loadgen.py) lives in its own session, so a terminal's Ctrl-C reaches only run_bench.py;
run_bench.py stops it on Ctrl-C/SIGTERM (KeyboardInterrupt), and Linux SIGKILLs it when run_bench.py is killed -9
(PR_SET_PDEATHSIG). A point over its time limit kills the process group; the next point starts a fresh process.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llmhost.bench.loadgen import PARENT_ENV

START_LIMIT_S = 300.0  # imports + API check; ~12 s on an H200, minutes on a cold disk cache
PREPARE_LIMIT_S = 900.0  # building a boot's agent datasets: 60 prompts/s on the H200 host, ~1,700 prompts at most


class LoadgenError(Exception):
    """No usable load generator; the message is one line naming the fix."""


class LoadGenerator:
    def __init__(self, python: str, module: str, env: dict[str, str], log_file: Path):
        self.python, self.module, self.log_file = python, module, log_file
        repo = str(Path(__file__).resolve().parents[2])
        self.env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p),
                    PARENT_ENV: str(os.getpid())}
        self.cwd = repo
        self.proc: subprocess.Popen[bytes] | None = None
        self.version = ""
        self.event_loop = ""
        self._buffer = b""
        self._preparing = False  # a prepare command was sent and its answer is still to be read

    def __enter__(self) -> "LoadGenerator":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # Ctrl-C or an error between points: no grace period
            self.kill()

    def pid(self) -> int | None:
        """The running process's PID; None when there is none (not launched yet, or it ended)."""
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def launch(self, prepare: Sequence[list[str]] = ()) -> None:
        """Start the process without waiting for it; `prepare`: the points whose datasets it builds (through the
        module's own cache) before it takes a point, which start() then waits for."""
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen([self.python, "-m", "llmhost.bench.loadgen", self.module],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self.env,
                                         cwd=self.cwd, start_new_session=True)
        self._buffer = b""
        self._preparing = bool(prepare)
        if prepare:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps({"prepare": list(prepare)}) + "\n").encode())
            self.proc.stdin.flush()

    def start(self) -> None:
        """Launch the process unless launched, wait for its ready line (and its prepared datasets); LoadgenError
        (one line) when it cannot drive points. A failed prepare is only a warning in the log: each point then
        builds its own dataset."""
        if self.proc is None:
            self.launch()
        try:
            hello = self._reply(time.monotonic() + START_LIMIT_S)
            prepared = self._reply(time.monotonic() + PREPARE_LIMIT_S) if self._preparing and hello \
                and hello.get("ready") else None
        except BaseException:
            self.kill()
            raise
        if hello is None or not hello.get("ready"):
            self.kill()
            why = hello.get("error") if hello else f"no ready line within {START_LIMIT_S:.0f} s"
            raise LoadgenError(str(why or f"it exited: {last_line(self.log_file)}"))
        self.version = str(hello.get("version", ""))
        self.event_loop = str(hello.get("event_loop", ""))  # uvloop when installed (llmhost.bench.loadgen)
        if self._preparing:
            self._preparing = False
            if not (isinstance(prepared, dict) and prepared.get("ok")):
                why = prepared.get("error") if prepared else "no answer"
                print(f"[bench] warning: building the datasets ahead failed ({why}) — each point builds its own",
                      flush=True)
                if not prepared:  # over its limit, or it died: the points get a fresh process
                    self.kill()
                    self.start()

    def run(self, argv: list[str], requests_file: Path, limit_s: float,
            watch: Callable[[], str] | None = None) -> tuple[dict[str, float] | None, str]:
        """One point -> (the module's totals, '') or (None, one-line error). Ctrl-C kills the process and
        propagates; over limit_s, or as soon as `watch` (asked every second) names a reason such as a dead
        server, the process is killed (a fresh one serves the next point)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.kill()  # it died between points: reaped, and a fresh one serves this point
        if self.proc is None:
            try:
                self.start()
            except LoadgenError as exc:
                return None, f"load generator did not start: {exc}"
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"argv": argv, "requests_file": str(requests_file)}) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._reply(time.monotonic() + limit_s, watch or (lambda: ""))
        except BrokenPipeError:
            reply = {}
        except BaseException:
            self.kill()  # Ctrl-C, SIGTERM: never leave it loading the server on its own
            raise
        if isinstance(reply, str):
            self.kill()
            return None, reply
        if reply is None:
            self.kill()
            return None, f"load generator exceeded {limit_s:.0f}s"
        if not reply:
            self.kill()
            return None, f"load generator died: {last_line(self.log_file)}"
        if not reply.get("ok"):
            return None, one_line(str(reply.get("error") or "no error text"))
        return {k: float(v) for k, v in reply["summary"].items()}, ""

    def _reply(self, deadline: float, watch: Callable[[], str] = lambda: "") -> dict[str, Any] | str | None:
        """The next protocol line as JSON; None at the deadline, {} when the process closed its end, the
        watch's reason when it gives one."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([fd], [], [], min(left, 1.0))[0]:
                reason = watch()
                if reason:
                    return reason
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return {}
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return {"ok": False, "error": f"unreadable load-generator answer: {line[:200]!r}"}

    def kill(self) -> None:
        """SIGKILL the process group we started (the load generator and nothing else)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """End of the boot: close its input (it exits at EOF); killed if it has not exited within 10 s."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def one_line(error: str) -> str:
    """An error as one line: a message that embeds a traceback (SGLang's "Warmup failed ... Error: Traceback")
    keeps its head and the traceback's last line (the exception), at most 500 characters."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return (lines[0] if lines else "no error text")[:500]
    head = lines[0].split("Traceback (most recent call last)")[0].strip()
    return f"{head} … {lines[-1]}"[:500] if head and head != lines[-1] else lines[-1][:500]


def last_line(path: Path) -> str:
    """Last non-empty line of a log (the error the module printed), trimmed to 300 characters."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"
