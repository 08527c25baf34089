"""Read one benchmark run directory (the Phase 3 results format) into frozen dataclasses.

Tolerant by design, because runs get killed: a torn last JSONL line is ignored silently, a corrupt line elsewhere is
skipped with a warning, missing optional files (telemetry, tool calls, servers, request files) become empty data the
report explains. Only a missing or damaged manifest.json is fatal (LoadError, one line for the user; a damaged one
is judged by llmhost.bench.store.load_manifest, as run_bench.py --resume judges it).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from llmhost import stats
from llmhost.bench import store
from llmhost.bench.arms import Arm  # the manifest's arms, as run_bench.py wrote them

PATTERNS = ("concurrency", "qps", "long", "burst", "cold", "warm")


class LoadError(Exception):
    """A run directory that cannot be read; the message is one line naming the problem and the fix."""


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    name: str
    kind: str
    description: str
    params: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class PointRecord:
    """The latest recorded attempt of one benchmark point (points.jsonl line)."""

    point_id: str
    arm: str
    workload: str
    pattern: str
    concurrency: int | None
    request_rate: float | None
    num_prompts: int
    repeat: int
    attempt: int
    status: str
    error: str | None
    started_at: float
    ended_at: float
    cache_flushed: bool
    summary: dict[str, Any]
    requests_file: str

    @property
    def load(self) -> float | None:
        """The x-axis value of the point: request rate for qps, else concurrency (None = all at once)."""
        return self.request_rate if self.pattern == "qps" else self.concurrency

    @property
    def group_key(self) -> tuple:
        """Identity of the point across repeats and runs (what --compare matches)."""
        return (self.arm, self.workload, self.pattern, self.concurrency, self.request_rate, self.num_prompts)


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
    e2e_ms: np.ndarray

    @property
    def n(self) -> int:
        return int(self.ok.size)

    @staticmethod
    def concat(parts: list["Requests"]) -> "Requests":
        if not parts:
            return requests_from_rows([])
        names = [f.name for f in dataclasses.fields(Requests)]
        merged = {k: np.concatenate([getattr(p, k) for p in parts]) for k in names if k != "errors"}
        return Requests(errors=tuple(e for p in parts for e in p.errors), **merged)


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    path: Path
    manifest: dict[str, Any]
    arms: tuple[Arm, ...]
    workloads: tuple[Workload, ...]
    slo: stats.Slo | None
    plan: tuple[dict[str, Any], ...]
    points: tuple[PointRecord, ...]
    requests: dict[str, Requests]
    telemetry: tuple[dict[str, Any], ...]
    toolcalls: tuple[dict[str, Any], ...]
    servers: dict[str, dict[str, Any]]
    warnings: tuple[str, ...]

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def t0(self) -> float:
        """Run start on the shared clock (first point start), for time axes."""
        starts = [p.started_at for p in self.points if p.started_at > 0]
        starts += [float(t["t"]) for t in self.telemetry[:1] if isinstance(t.get("t"), (int, float))]
        return min(starts) if starts else 0.0

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        return Arm(name, name, "#7f7f7f", (), "(not in manifest)", False)


def read_jsonl(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """JSON objects of a JSONL file; torn last line ignored, other bad lines skipped with a warning."""
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").split("\n")
    out: list[dict[str, Any]] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i != last:
                warnings.append(f"{path.name}: line {i + 1} is not JSON (skipped)")
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _float(value: Any) -> float:
    """A number, or nan for anything missing or malformed (a bad field must not sink the whole report)."""
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _tpot(row: dict[str, Any], gaps: list[float]) -> float:
    """bench_serving's TPOT of one request: (e2e - ttft) / (output tokens - 1). Not the mean of the ITL list: the
    chat endpoint's chunks can carry several tokens (and tool-call deltas carry none), which inflated that mean.
    Falls back to the mean gap when a field is missing."""
    e2e, ttft, out = _float(row.get("e2e_ms")), _float(row.get("ttft_ms")), _float(row.get("output_tokens"))
    if out >= 2 and not math.isnan(e2e) and not math.isnan(ttft) and e2e >= ttft:
        return (e2e - ttft) / (out - 1)
    return sum(gaps) / len(gaps) if gaps else math.nan


def requests_from_rows(rows: list[dict[str, Any]]) -> Requests:
    """Arrays from contract rows (missing keys become nan/empty, so a partial writer never crashes the report)."""
    itl_lists = [[g for g in map(_float, r.get("itl_ms") or []) if not math.isnan(g)]
                 if isinstance(r.get("itl_ms"), list) else [] for r in rows]
    return Requests(
        start_s=np.array([_float(r.get("start_s")) for r in rows], float),
        ok=np.array([bool(r.get("ok")) for r in rows], bool),
        errors=tuple(str(r.get("error") or "") for r in rows if not r.get("ok")),
        prompt_tokens=np.array([_float(r.get("prompt_tokens")) for r in rows], float),
        output_tokens=np.array([_float(r.get("output_tokens")) for r in rows], float),
        ttft_ms=np.array([_float(r.get("ttft_ms")) for r in rows], float),
        itl_mean_ms=np.array([_tpot(r, g) for r, g in zip(rows, itl_lists)], float),
        itl_all_ms=np.array([g for gaps in itl_lists for g in gaps], float),
        e2e_ms=np.array([_float(r.get("e2e_ms")) for r in rows], float),
    )


def _point(d: dict[str, Any]) -> PointRecord:
    return PointRecord(
        point_id=str(d["point_id"]), arm=str(d["arm"]), workload=str(d["workload"]), pattern=str(d["pattern"]),
        concurrency=None if d.get("concurrency") is None else int(d["concurrency"]),
        request_rate=None if d.get("request_rate") is None else float(d["request_rate"]),
        num_prompts=int(d.get("num_prompts") or 0), repeat=int(d.get("repeat") or 0),
        attempt=int(d.get("attempt") or 1), status=str(d.get("status") or "failed"), error=d.get("error"),
        started_at=float(d.get("started_at") or 0.0), ended_at=float(d.get("ended_at") or 0.0),
        cache_flushed=bool(d.get("cache_flushed")), summary=dict(d.get("summary") or {}),
        requests_file=str(d.get("requests_file") or f"requests/{d['point_id']}.jsonl"))


def latest_points(lines: list[dict[str, Any]], warnings: list[str]) -> list[PointRecord]:
    """The last line per point_id (a retry supersedes the failed attempt), in first-seen order."""
    latest: dict[str, PointRecord] = {}
    for line in lines:
        try:
            point = _point(line)
        except (KeyError, TypeError, ValueError) as exc:
            warnings.append(f"points.jsonl: a line lacks a field ({exc}) (skipped)")
            continue
        latest[point.point_id] = point
    return list(latest.values())


def _manifest(path: Path) -> dict[str, Any]:
    file = path / "manifest.json"
    if not path.is_dir():
        raise LoadError(f"{path} is not a directory — pass a run directory such as results/bench/latest")
    if not file.is_file():
        hint = f"did you mean {path / 'latest'}?" if (path / "latest").is_dir() else \
            "pass a run directory of run_bench.py (results/bench/<run_id>)"
        raise LoadError(f"{file} is missing — {hint}")
    try:
        manifest = store.load_manifest(path)  # the same verdict as run_bench.py --resume
    except store.ManifestError as exc:
        raise LoadError(str(exc)) from None
    return manifest


def _slo(raw: Any) -> stats.Slo | None:
    try:
        return stats.Slo(float(raw["ttft_ms"]), float(raw["itl_ms"]), float(raw["pct"]))
    except (KeyError, TypeError, ValueError):
        return None


def _servers(path: Path, warnings: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for file in sorted((path / "servers").glob("*.json")):
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError):
            warnings.append(f"servers/{file.name} is not JSON (skipped)")
            continue
        out[str(data.get("arm") or file.stem)] = data
    return out


def load_run(path: Path) -> Run:
    """Everything the report needs from one run directory (follows the `latest` symlink)."""
    path = Path(path).resolve()
    manifest = _manifest(path)
    warnings: list[str] = []
    points = latest_points(read_jsonl(path / "points.jsonl", warnings), warnings)
    requests: dict[str, Requests] = {}
    for point in points:
        file = path / point.requests_file
        if point.status == "ok":
            if not file.is_file():
                warnings.append(f"{point.requests_file} is missing (point {point.point_id} has no request data)")
            requests[point.point_id] = requests_from_rows(read_jsonl(file, warnings))
    try:
        arms, workloads = _arms(manifest), _workloads(manifest)
    except (KeyError, TypeError, AttributeError) as exc:
        raise LoadError(f"{path / 'manifest.json'}: an arms/workloads entry lacks {exc} — "
                        "was it written by run_bench.py?") from None
    return Run(path=path, manifest=manifest, arms=arms, workloads=workloads, slo=_slo(manifest.get("slo")),
               plan=tuple(manifest.get("plan") or ()), points=tuple(points), requests=requests,
               telemetry=tuple(read_jsonl(path / "telemetry.jsonl", warnings)),
               toolcalls=tuple(read_jsonl(path / "toolcalls.jsonl", warnings)),
               servers=_servers(path, warnings), warnings=tuple(warnings))


def _arms(manifest: dict[str, Any]) -> tuple[Arm, ...]:
    return tuple(Arm(str(a["name"]), str(a.get("label") or a["name"]), str(a.get("color") or "#7f7f7f"),
                     tuple(a.get("flags") or ()), str(a.get("description") or ""), bool(a.get("is_baseline")))
                 for a in manifest.get("arms") or [])


def _workloads(manifest: dict[str, Any]) -> tuple[Workload, ...]:
    return tuple(Workload(str(w["name"]), str(w.get("kind") or ""), str(w.get("description") or ""),
                          dict(w.get("params") or {})) for w in manifest.get("workloads") or [])
