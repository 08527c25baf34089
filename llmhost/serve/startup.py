"""Where a server start spends its time, read from SGLang's own log: one line such as

    ready in 141 s: launcher 23 s, scheduler start 24 s, weights 2 s, KV pool 2 s, prefill graphs 44 s,
    decode graphs 6 s, HTTP + tokenizer workers 33 s, first generation 8 s

Each phase ends at a line SGLang 0.5.17 logs (timestamps to the second, in the host's local time, as SGLang's
logging writes them); a phase whose line is absent (e.g. prefill graphs with --disable-piecewise-cuda-graph) is
folded into the next one, so the phases always add up to the launch-to-ready time.
"""
from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# SGLang's stamp; a scheduler of several ranks adds its ranks (" TP0", " DP0 TP1"), SGLANG_LOG_MS milliseconds
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: [^\]]*)?\] (.*)")

KV_POOL_LINE = "Memory pool end"  # SGLang 0.5.17, once the KV cache is allocated

# (phase, the log line that ends it, whether the LAST such line counts: the tokenizer workers start one by one)
MARKERS: tuple[tuple[str, str, bool], ...] = (
    ("launcher", "server_args=ServerArgs(", False),  # python -m sglang.launch_server: imports, argument parsing
    ("scheduler start", "Init torch distributed begin", False),  # scheduler process spawned, its imports
    ("weights", "Load weight end", False),
    ("KV pool", KV_POOL_LINE, False),
    ("prefill graphs", "Capture target prefill CUDA graph end", False),
    ("decode graphs", "Capture target decode CUDA graph end", False),
    ("HTTP + tokenizer workers", "Application startup complete", True),
)

EARLIER = "earlier workers"  # ROUTER=on: a worker launched only once the one before it on its GPU held its KV pool
ROUTED_END = "router + first generation"  # ROUTER=on: the router starts once every worker answers HTTP
PHASE_ORDER = (EARLIER, *(name for name, _, _ in MARKERS), "first generation", ROUTED_END)  # every phase, in order


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    seconds: float


def log_epoch(stamp: str) -> float:
    """SGLang's '%Y-%m-%d %H:%M:%S' (local time) as a Unix time."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


def utc_epoch(stamp: str) -> float:
    """The pane's started_at ('%Y-%m-%dT%H:%M:%SZ', UTC) as a Unix time."""
    return float(calendar.timegm(time.strptime(stamp.strip(), "%Y-%m-%dT%H:%M:%SZ")))


def marker_times(lines: list[str]) -> dict[str, float]:
    """Phase name -> Unix time of the log line that ends it (first occurrence, or last where MARKERS says so)."""
    found: dict[str, float] = {}
    for line in lines:
        match = STAMP.match(line)
        if not match:
            continue
        for name, needle, last in MARKERS:
            if needle in match.group(2) and (last or name not in found):
                found[name] = log_epoch(match.group(1))
    return found


def phases(lines: list[str], launched: float, ready: float) -> list[Phase]:
    """The start split at the markers found, then 'first generation' up to `ready`; empty when nothing matched."""
    found = marker_times(lines)
    out: list[Phase] = []
    previous = launched
    for name, _, _ in MARKERS:
        if name in found and launched <= found[name] <= ready:
            out.append(Phase(name, max(0.0, found[name] - previous)))
            previous = max(previous, found[name])
    if out:
        out.append(Phase("first generation", max(0.0, ready - previous)))
    return out


@dataclass(frozen=True, slots=True)
class Timeline:
    """One start: launch (the pane's start) to ready, and the phases it split into (empty when the log told none)."""

    ready_s: float
    phases: tuple[Phase, ...]

    def line(self) -> str | None:
        """'ready in N s: phase X s, ...', or None without phases."""
        if not self.phases:
            return None
        body = ", ".join(f"{p.name} {p.seconds:.0f} s" for p in self.phases)
        return f"ready in {self.ready_s:.0f} s: {body}"


def read_timeline(log: Path, started_at: str | None, ready: float,
                  workers: Sequence[tuple[Path, float | None]] = (), router: bool = False) -> Timeline | None:
    """The start logged in `log` that began at `started_at` (UTC) and was ready at `ready` (Unix time); None when
    the start time or a log cannot be read. With several servers (ROUTER=on: `workers`, each one's own log and the
    Unix time of its launch, None when unknown) the phases are those of the worker whose start-up ended last,
    counted from its own launch: what it waited for the workers before it (a shared GPU) is 'earlier workers', and
    behind a `router` the last phase is 'router + first generation'."""
    if not started_at:
        return None
    try:
        launched = utc_epoch(started_at)
        runs = [(p.read_text(encoding="utf-8", errors="replace").splitlines(), own)
                for p, own in (workers or [(log, None)])]
    except (OSError, ValueError):
        return None
    best: list[Phase] = []
    best_start, best_end = launched, -math.inf
    for lines, own in runs:
        start = math.floor(own) if own is not None and launched <= own <= ready else launched  # log stamps: seconds
        found = phases(lines, start, ready)
        end = start + sum(p.seconds for p in found[:-1]) if found else -math.inf  # "first generation" is last
        if end > best_end:
            best, best_start, best_end = found, start, end
    if best and best_start > launched:
        best.insert(0, Phase(EARLIER, best_start - launched))
    if best and router:
        best[-1] = Phase(ROUTED_END, best[-1].seconds)
    return Timeline(ready - launched, tuple(best))


def timeline_line(log: Path, started_at: str | None, ready: float) -> str | None:
    """'ready in N s: phase X s, ...' for the start logged in `log`, or None when it cannot be told."""
    timeline = read_timeline(log, started_at, ready)
    return timeline.line() if timeline else None
