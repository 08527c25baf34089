"""Files that survive a crash: atomic replaces, append-only JSONL with torn-line repair, one-line write errors.

Every phase writes through here, so a kill at any instant leaves either the old or the new file (never half of
one), a JSONL file whose damaged last line is reported and repaired before the next append, and no `.tmp` litter.
A failed write (disk full, permissions) raises WriteError, whose message names the path and the free space.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_APPEND_LOCK = threading.Lock()  # telemetry appends from its own thread
_UMASK_LOCK = threading.Lock()


class WriteError(OSError):
    """A write that failed for an environmental reason; str() is the one line to show the user."""


def write_error(path: Path, err: OSError) -> WriteError:
    """`err` as a WriteError whose one line names the path, the reason and the free space there."""
    try:
        free = shutil.disk_usage(path.parent if path.parent.exists() else Path("/")).free
        room = f"{free / 2**20:.0f} MiB free there"
    except OSError:
        room = "free space unknown"
    reason = err.strerror or err.__class__.__name__
    error = WriteError(f"cannot write {path}: {reason} ({room})")
    error.errno = err.errno
    return error


ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


def as_write_error(err: OSError, fallback: Path) -> WriteError | None:
    """An OSError from writing (disk full, quota, file too large, read-only, permissions) as a WriteError naming
    its file (or `fallback`); None for any other OSError, which is a bug and keeps its traceback."""
    if isinstance(err, WriteError):
        return err
    if err.errno not in ENVIRONMENT_ERRNOS:
        return None
    return write_error(Path(err.filename) if err.filename else fallback, err)


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace `path` with `text` via a temp file in the same folder; `mode` None = the umask's default."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json_atomic(path: Path, data: Any, mode: int | None = None) -> None:
    """Replace `path` with `data` as indented JSON (NaN refused: it is not JSON)."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n", mode)


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` via a temp file in the same folder; `mode` None = the umask's default.

    The temp file is created 0600 and only then given `mode`, so a secret written with mode 0o600 is never
    readable by others, not even for an instant."""
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if mode is None:
            mode = 0o666 & ~_umask()  # mkstemp creates 0600; results are shared like any other file
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise write_error(path, err) from err
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    """The process umask, read from /proc where Linux has it: reading it with os.umask means setting it, which
    races other threads (the trace hook writes from a thread inside the server) and can leave it at 0."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        umask = os.umask(0)
        os.umask(umask)
    return umask


def writable_dir_problem(path: Path) -> str | None:
    """Why a directory cannot be created or written at `path` (None when it can): checked before any work, so a
    results folder that is a file, or a read-only one, is one line at the start instead of a traceback at the end."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:  # the nearest part that exists decides
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


@dataclass(slots=True)
class JsonlRead:
    """The records of a JSONL file and what was skipped: `torn` = an unterminated last line (a crash mid-write)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    torn: bool = False
    bad_lines: list[int] = field(default_factory=list)  # 1-based numbers of complete lines that are not JSON objects

    def warnings(self, path: Path) -> list[str]:
        out = []
        if self.torn:
            out.append(f"{path}: a torn last line (a crash mid-write) was skipped")
        if self.bad_lines:
            out.append(f"{path}: {len(self.bad_lines)} unreadable line(s) skipped (line {self.bad_lines[0]} first)")
        return out


def read_jsonl(path: Path) -> JsonlRead:
    """Every JSON object line of `path` (missing file = none), reporting a torn tail and unreadable lines."""
    path = Path(path)
    result = JsonlRead()
    if not path.is_file():
        return result
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    tail = lines.pop()  # "" when the file ends with a newline, else the unterminated last line
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = _parse(line)
        if row is None:
            result.bad_lines.append(number)
        else:
            result.rows.append(row)
    if tail.strip():
        row = _parse(tail)
        if row is None:
            result.torn = True
        else:
            result.rows.append(row)  # complete JSON whose newline was lost: keep it
    return result


def _parse(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def has_torn_tail(path: Path) -> bool:
    """Whether `path` ends in an unterminated line (a crash mid-append); reads one byte, so it suits big files."""
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


def jsonl_text(rows: list[dict[str, Any]]) -> str:
    """Rows as JSONL: one JSON object per line, each line ended (NaN refused: it is not JSON)."""
    return "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)


def write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace `path` with `rows` as JSONL (a file that is rewritten whole, never appended to)."""
    write_text_atomic(path, jsonl_text(rows))


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append whole lines, fsynced before returning; an unterminated last line is first closed off.

    A crash mid-append leaves a partial last line; appending straight after it would glue the next record onto
    it and lose that record too. Ending the partial line first keeps the damage to the line that was torn.
    """
    if not rows:
        return
    path = Path(path)
    text = jsonl_text(rows)
    with _APPEND_LOCK:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a+b") as out:
                if out.tell() > 0:
                    out.seek(-1, os.SEEK_END)
                    if out.read(1) != b"\n":
                        out.write(b"\n")
                out.write(text.encode("utf-8"))
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            raise write_error(path, err) from err
