"""Runs of run_bench.py without load points: `--startup` (startups.jsonl) and `--single-stream`
(stream_arms.jsonl). Which kind a run directory is (its manifest says), its records read as tolerantly as a load
run's (a torn or foreign line is skipped and named), and the page each kind draws:

    kind = kind_of(path)           -> SideKind, or None for a run with load points
    run = load(path, kind)         -> SideRun (LoadError, one line, when no record is readable)
    html = kind.page(run)          -> the page (llmhost.report.startup_page, llmhost.report.stream_page)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from llmhost.bench.records import Manifest, StartupRecord, read_records
from llmhost.bench.stream_records import StreamArmRecord
from llmhost.report import startup_page, stream_page
from llmhost.report.load import LoadError, SideRun, run_manifest


@dataclasses.dataclass(frozen=True, slots=True)
class SideKind:
    name: str  # as the user reads it: "a start-up run"
    flag: str  # the run_bench.py option that makes it
    records_file: str
    noun: str  # what one record is, plural
    parse: Callable[[dict[str, Any]], Any]
    is_kind: Callable[[Manifest], bool]
    page: Callable[[SideRun], str]


KINDS = {
    "start-up": SideKind("start-up", "--startup", "startups.jsonl", "restarts", StartupRecord.from_dict,
                         lambda m: m.startup_restarts is not None, startup_page.build),
    "single-stream": SideKind("single-stream", "--single-stream", "stream_arms.jsonl", "arms",
                              StreamArmRecord.from_dict, lambda m: m.single_stream_requests is not None,
                              stream_page.build),
}


def kind_of(path: Path) -> SideKind | None:
    """The kind of run without load points `path` holds; None for a run with load points. LoadError for a run
    directory without a readable manifest."""
    manifest = run_manifest(Path(path).resolve())
    return next((k for k in KINDS.values() if k.is_kind(manifest)), None)


def load(path: Path, kind: SideKind) -> SideRun:
    """The run's manifest and records; LoadError (one line with the way on) when not one record is readable."""
    path = Path(path).resolve()
    loaded = read_records(path / kind.records_file, kind.parse, kind.records_file)
    if not loaded.records:
        why = "; ".join(loaded.warnings) or f"{kind.records_file} is missing or empty"
        raise LoadError(f"{path} is a {kind.name} run with no readable {kind.noun} ({why}) — measure again with "
                        f"./run_bench.py {kind.flag} N")
    return SideRun(path, run_manifest(path), tuple(loaded.records), tuple(loaded.warnings))
