"""Read one benchmark run directory through its typed records (llmhost.bench.records) into a Run.

Tolerant by design, because runs get killed: a torn last JSONL line, an unreadable line or a line of the wrong shape
is skipped and named in Run.warnings (the dashboard shows them); missing optional files (telemetry, tool calls,
servers, request files) become empty data the report explains. Only a missing, unreadable or newer-schema
manifest.json is fatal (LoadError, one line for the user).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from llmhost import stats
from llmhost.bench import reckoning
from llmhost.bench.arms import Arm
from llmhost.bench.records import (Manifest, Point, PointRecord, RecordError, RequestRecord, ServerRecord,
                                   TelemetrySample, ToolCallCase, ToolCallSkipped, WorkloadRecord, read_records,
                                   toolcall_from_dict)
from llmhost.bench.store import read_manifest


class LoadError(Exception):
    """A run directory that cannot be read; the message is one line naming the problem and the fix."""


@dataclasses.dataclass(frozen=True, slots=True)
class Requests:
    """Per-request samples of one point as arrays (ttft nan when the request produced no token)."""

    start_s: np.ndarray
    ok: np.ndarray
    errors: tuple[str, ...]
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_ms: np.ndarray
    itl_mean_ms: np.ndarray  # per request TPOT: (e2e - ttft) / (output tokens - 1) (nan with < 2 output tokens)
    itl_all_ms: np.ndarray  # every ITL gap of every request, pooled (what bench_serving's ITL percentiles use)
    itl_count: np.ndarray  # how many of those gaps each request has (in order), so gaps() can pick requests'
    e2e_ms: np.ndarray
    cached_tokens: np.ndarray  # nan: not recorded
    headers_ms: np.ndarray  # time to the response headers (llmhost.bench.loadgen); nan: not recorded

    @property
    def n(self) -> int:
        return int(self.ok.size)

    def gaps(self, chosen: np.ndarray) -> np.ndarray:
        """The ITL gaps of the requests at the indices `chosen` (any order), pooled."""
        ends = np.cumsum(self.itl_count)
        return np.concatenate([np.array([], float)] + [self.itl_all_ms[ends[i] - self.itl_count[i]:ends[i]]
                                                       for i in np.asarray(chosen, int)])

    @staticmethod
    def concat(parts: list["Requests"]) -> "Requests":
        if not parts:
            return requests_from_records([])
        names = [f.name for f in dataclasses.fields(Requests)]
        merged = {k: np.concatenate([getattr(p, k) for p in parts]) for k in names if k != "errors"}
        return Requests(errors=tuple(e for p in parts for e in p.errors), **merged)


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    path: Path
    manifest: Manifest
    slo: stats.Slo | None
    points: tuple[PointRecord, ...]  # the latest attempt of each point
    requests: dict[str, Requests]
    telemetry: tuple[TelemetrySample, ...]
    toolcalls: tuple[ToolCallCase | ToolCallSkipped, ...]
    servers: dict[str, ServerRecord]
    warnings: tuple[str, ...]
    reckoning: reckoning.Reckoning | None = None  # time vs the run's estimate, ETA swing; None: none recorded

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.path.name

    @property
    def arms(self) -> tuple[Arm, ...]:
        return self.manifest.arms

    @property
    def workloads(self) -> tuple[WorkloadRecord, ...]:
        return self.manifest.workloads

    @property
    def plan(self) -> tuple[Point, ...]:
        return self.manifest.plan

    @property
    def t0(self) -> float:
        """Run start on the shared clock (first point start), for time axes."""
        starts = [p.started_at for p in self.points if p.started_at > 0]
        starts += [t.t for t in self.telemetry[:1]]
        return min(starts) if starts else 0.0

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        return Arm(name, name, "#7f7f7f", (), "(not in manifest)", False)


@dataclasses.dataclass(frozen=True, slots=True)
class SideRun:
    """A run of run_bench.py without load points (--startup, --single-stream): llmhost.report.side_runs."""

    path: Path
    manifest: Manifest
    records: tuple[Any, ...]  # StartupRecord or StreamArmRecord, in the order they were written
    warnings: tuple[str, ...]  # lines skipped on reading

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.path.name

    def arm_label(self, name: str) -> str:
        return next((a.label for a in self.manifest.arms if a.name == name), name)


def _tpot(r: RequestRecord) -> float:
    """bench_serving's TPOT of one request: (e2e - ttft) / (output tokens - 1). Not the mean of the ITL list: the
    chat endpoint's chunks can carry several tokens (and tool-call deltas carry none), which inflated that mean.
    Falls back to the mean gap without a TTFT."""
    if r.output_tokens >= 2 and r.ttft_ms is not None and r.e2e_ms >= r.ttft_ms:
        return (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)
    return sum(r.itl_ms) / len(r.itl_ms) if r.itl_ms else math.nan


def requests_from_records(rows: list[RequestRecord]) -> Requests:
    """Columns of a point's request records."""
    return Requests(
        start_s=np.array([r.start_s for r in rows], float),
        ok=np.array([r.ok for r in rows], bool),
        errors=tuple(r.error for r in rows if not r.ok),
        prompt_tokens=np.array([r.prompt_tokens for r in rows], float),
        output_tokens=np.array([r.output_tokens for r in rows], float),
        ttft_ms=np.array([math.nan if r.ttft_ms is None else r.ttft_ms for r in rows], float),
        itl_mean_ms=np.array([_tpot(r) for r in rows], float),
        itl_all_ms=np.array([g for r in rows for g in r.itl_ms], float),
        itl_count=np.array([len(r.itl_ms) for r in rows], int),
        e2e_ms=np.array([r.e2e_ms for r in rows], float),
        cached_tokens=np.array([math.nan if r.cached_tokens is None else r.cached_tokens for r in rows], float),
        headers_ms=np.array([math.nan if r.headers_ms is None else r.headers_ms for r in rows], float),
    )


def run_manifest(path: Path) -> Manifest:
    """The run directory's manifest; LoadError (one line) when there is none or it cannot be read."""
    if not path.is_dir():
        raise LoadError(f"{path} is not a directory — pass a run directory such as results/bench/latest")
    if not (path / "manifest.json").is_file() and (path / "latest").is_dir():
        raise LoadError(f"{path / 'manifest.json'} is missing — did you mean {path / 'latest'}?")
    try:
        return read_manifest(path / "manifest.json")
    except RecordError as exc:  # the same words run_bench.py --resume uses for the same manifest
        raise LoadError(str(exc)) from None


def _slo(raw: dict[str, float] | None) -> stats.Slo | None:
    try:
        return stats.Slo(raw["ttft_ms"], raw["itl_ms"], raw["pct"]) if raw else None
    except KeyError:
        return None


def _servers(path: Path, warnings: list[str]) -> dict[str, ServerRecord]:
    out: dict[str, ServerRecord] = {}
    for file in sorted((path / "servers").glob("*.json")):
        try:
            record = ServerRecord.from_dict(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:  # RecordError is a ValueError
            warnings.append(f"servers/{file.name} skipped: {exc}")
            continue
        out[record.arm] = record
    return out


def _latest_points(path: Path, warnings: list[str]) -> list[PointRecord]:
    """The last line per point_id (a retry supersedes the failed attempt), in first-seen order."""
    loaded = read_records(path / "points.jsonl", PointRecord.from_dict, "points.jsonl")
    warnings += loaded.warnings
    return list({p.point_id: p for p in loaded.records}.values())


def _gap_warnings(samples: list[TelemetrySample]) -> list[str]:
    """Telemetry the sampler could not write (a full disk for a while): a hole in the timelines, said once."""
    gaps = [t for t in samples if t.source == "gap"]
    if not gaps:
        return []
    return [f"telemetry.jsonl: {len(gaps)} gap(s), {sum(g.value for g in gaps):.0f} s of samples not written "
            f"(first: {gaps[0].labels.get('error', 'no reason recorded')})"]


def load_run(path: Path) -> Run:
    """Everything the report needs from one run directory (follows the `latest` symlink)."""
    path = Path(path).resolve()
    manifest = run_manifest(path)
    warnings: list[str] = []
    points = _latest_points(path, warnings)
    requests: dict[str, Requests] = {}
    for point in points:
        if point.status != "ok":
            continue
        if not (path / point.requests_file).is_file():
            warnings.append(f"{point.requests_file} is missing (point {point.point_id} has no request data)")
        loaded = read_records(path / point.requests_file, RequestRecord.from_dict, point.requests_file)
        warnings += loaded.warnings
        requests[point.point_id] = requests_from_records(loaded.records)
    telemetry = read_records(path / "telemetry.jsonl", TelemetrySample.from_dict, "telemetry.jsonl")
    toolcalls = read_records(path / "toolcalls.jsonl", toolcall_from_dict, "toolcalls.jsonl")
    warnings += telemetry.warnings + toolcalls.warnings + _gap_warnings(telemetry.records)
    servers = _servers(path, warnings)
    tally = reckoning.of_run(path, manifest)
    warnings += tally.warnings if tally else ()
    return Run(path=path, manifest=manifest, slo=_slo(manifest.slo), points=tuple(points), requests=requests,
               telemetry=tuple(telemetry.records), toolcalls=tuple(toolcalls.records), servers=servers,
               warnings=tuple(warnings), reckoning=tally)
