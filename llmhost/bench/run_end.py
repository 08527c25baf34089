"""How a benchmark run ends: early, with one line on stderr and the exit code, the same for a plan run and a start-up
run (run_bench.py, llmhost.bench.startup_bench); or whole, saying which flags the server is left serving."""
from __future__ import annotations

from pathlib import Path

from llmhost import files
from llmhost.bench.arms import Arm
from llmhost.bench.runner import UserStopped


def ended_by(exc: BaseException, root: Path, again: str) -> tuple[str, int] | None:
    """(line, exit code) for a run ended by Ctrl-C or SIGTERM, by ./serve.sh stop, or by a write failure (disk
    full, permissions: what was recorded so far is intact); None for anything else (a bug: keep its traceback).
    `again`: how to continue, e.g. './run_bench.py --resume DIR'."""
    if isinstance(exc, KeyboardInterrupt):
        return f"[bench] interrupted — continue with {again}", 130
    if isinstance(exc, UserStopped):  # the user's stop wins: the server stays down
        return (f"[bench] the server was stopped with ./serve.sh stop at {exc} — the run ends here and leaves it "
                f"stopped; continue later with {again} (it starts the server again)"), 1
    if isinstance(exc, OSError):
        problem = files.as_write_error(exc, root)
        return (f"[bench] error: {problem} — fix that, then {again}", 1) if problem else None
    return None


def left_serving(arm: Arm | None) -> str | None:
    """The line that says which launch flags the run leaves the server on (each arm restarts it and nothing
    restarts it at the end, which would cost a boot); None when this sitting started no server."""
    if arm is None:
        return None
    if not arm.flags:
        return f"the server is left running with your settings (arm {arm.name})"
    return (f"the server is left running with arm {arm.name}'s flags ({' '.join(arm.flags)}): ./serve.sh restart "
            f"serves your settings again")
