"""The winner's launch flags as config.local.env lines, and the one writer that puts them there (`--apply`).

    lines = winner_lines(arm, server_extra_args="--foo 1")   # ["CHUNKED_PREFILL_SIZE=4096", "SERVER_EXTRA_ARGS=..."]
    apply(path, lines, run_id="20260101-120000-tune", note="...")

A flag the server lifecycle owns through a setting (--chunked-prefill-size) becomes that setting; any other flag
joins SERVER_EXTRA_ARGS, replacing the same flag there and keeping the rest of the user's value. The file is
rewritten atomically: the user's other lines stay as they were, earlier lines of the keys written are dropped, and
the new lines follow a comment naming the run. config.env itself is never edited.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from llmhost import files
from llmhost.bench.arms import Arm, server_overrides


def _groups(tokens: list[str]) -> list[list[str]]:
    """'--a 1 --b' -> [['--a', '1'], ['--b']] (a leading non-flag token stays a group of its own)."""
    groups: list[list[str]] = []
    for token in tokens:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def winner_lines(arm: Arm, server_extra_args: str) -> list[str]:
    """KEY=value lines that make the server start with the arm's flags (settings first, then SERVER_EXTRA_ARGS)."""
    flags, settings = server_overrides(arm)
    out = [f"{key}={value}" for key, value in settings.items()]
    if flags:
        new = _groups(flags)
        names = {g[0].split("=", 1)[0] for g in new}
        kept = [g for g in _groups(shlex.split(server_extra_args)) if g[0].split("=", 1)[0] not in names]
        out.append(f"SERVER_EXTRA_ARGS={shlex.join([t for g in [*kept, *new] for t in g])}")
    return out


def updated_text(old: str, lines: list[str], comment: str) -> str:
    """The file's text with earlier lines of these keys dropped and the commented block appended."""
    keys = {line.split("=", 1)[0] for line in lines}
    kept = [ln for ln in old.splitlines() if ln.strip().startswith("#") or ln.split("=", 1)[0].strip() not in keys]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join([*kept, *([""] if kept else []), f"# {comment}", *lines]) + "\n"


def apply(path: Path, lines: list[str], comment: str) -> None:
    """Write the lines into `path` (created if absent) atomically; files.WriteError (one line) when that fails."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    mode = path.stat().st_mode & 0o777 if path.is_file() else None  # a file the user made private stays private
    files.write_text_atomic(path, updated_text(old, lines, comment), mode)
