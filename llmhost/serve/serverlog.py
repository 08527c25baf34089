"""The server log: the API key redacted on the way in, the last line / tail read on the way out.

The tmux pane (llmhost/serve/pane.py) copies the server's output through `copy_output` into the pane and
$WORK_DIR/server/server.log, with the key (from the 0600 YAML) replaced by ***. Nothing else is written here.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

CHUNK = 64 * 1024


def key_secrets(config_file: Path) -> list[bytes]:
    """The key as written, and as repr() escapes it inside ServerArgs(...) (backslashes and quotes escaped).

    SGLang 0.5.17 logs `server_args=ServerArgs(... api_key='<key>' ...)` at startup, even when the key came
    from --config, so the pane and server.log only ever see the filtered stream."""
    key = json.loads(config_file.read_text().split(":", 1)[1].strip())
    return sorted({s.encode() for s in (key, repr(key)[1:-1]) if s}, key=len, reverse=True)


def redact(data: bytes, secrets: Sequence[bytes]) -> bytes:
    for secret in secrets:
        data = data.replace(secret, b"***")
    return data


def copy_output(read: Callable[[int], bytes], sinks: Sequence[Callable[[bytes], object]],
                secrets: Sequence[bytes] = ()) -> None:
    """Copy until EOF, redacted, as soon as a line ends: at '\\n' or at '\\r' (progress bars redraw with '\\r'
    and never end a line until they finish). A key holds neither, so cutting there never splits one; a very
    long run without either keeps its last len(key) - 1 bytes back until more arrives."""
    keep = max((len(s) for s in secrets), default=1) - 1
    pending = b""
    while chunk := read(CHUNK):
        pending += chunk
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
        if cut == 0 and len(pending) > CHUNK:
            cut = len(pending) - keep
        if cut:
            emit(redact(pending[:cut], secrets), sinks)
            pending = pending[cut:]
    if pending:
        emit(redact(pending, secrets), sinks)


def emit(data: bytes, sinks: Sequence[Callable[[bytes], object]]) -> None:
    """Write to every sink; one that fails (the pane's terminal went away) does not stop the others."""
    for write in sinks:
        try:
            write(data)
        except OSError:
            continue


def fd_writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        while data:
            data = data[os.write(fd, data):]
    return write


def last_line(log: Path) -> str:
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 4096))
            lines = [ln for ln in handle.read().decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:160] if lines else ""


def tail(log: Path, lines: int = 30) -> str:
    """The last `lines` lines of the server log (already redacted on the way in)."""
    try:
        text = log.read_bytes()[-256 * 1024:].decode(errors="replace").replace("\r", "\n")
    except OSError:
        return f"(no log at {log})"
    return "\n".join(text.splitlines()[-lines:])


EXCEPTION_LINE = re.compile(r"\b\w+(Error|Exception): ")  # the last line of a Python traceback
ERROR_WORDS = re.compile(r"error|exception|out of memory|killed|sigquit|fatal", re.IGNORECASE)


def size(log: Path) -> int:
    """The log's size now (0 when absent): the offset from which a later error_cause looks."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def error_cause(log: Path, since: int, patterns: tuple[re.Pattern, ...] = (EXCEPTION_LINE, ERROR_WORDS)) -> str:
    """The server-side cause of a failure, from what the log gained since byte `since`: the last exception line
    (a crash's `RuntimeError: CUDA error: ...`), else the last line naming an error (`patterns`, in that order);
    '' when there is none. A log shorter than `since` was rotated by a restart and is read from its start."""
    try:
        with log.open("rb") as handle:
            handle.seek(since if size(log) >= since else 0)
            text = handle.read()[-256 * 1024:].decode(errors="replace").replace("\r", "\n")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in patterns:
        found = [ln for ln in lines if pattern.search(ln)]
        if found:
            return found[-1][:200]
    return ""
