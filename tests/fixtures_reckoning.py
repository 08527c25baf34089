"""One planned point of a run, its manifest with an estimate, and its attempts: what the reckoning tests build on."""
from __future__ import annotations

import dataclasses

from llmhost.bench import points
from llmhost.bench.records import Estimate, Manifest, PointRecord
from llmhost.provenance import Gpu, Provenance

PROVENANCE = Provenance(created_at="2026-12-01T10:00:00Z", command=("run_bench.py",), git_commit=None,
                        versions={}, gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)
POINT = points.make_point("baseline", "chat", "concurrency", 64, None, 256, 1)


def manifest(estimate_s: float) -> Manifest:
    return Manifest("r", PROVENANCE, {}, 1, None, (), (), (POINT,),
                    estimate=Estimate(estimate_s, True, "calibrated on ...", 1, None))


def attempt(started_at: float, ended_at: float) -> PointRecord:
    return PointRecord.of(dataclasses.replace(POINT), attempt=1, status="ok", error=None, started_at=started_at,
                          ended_at=ended_at, cache_flushed=True, summary=None, requests_file="requests/x.jsonl")
