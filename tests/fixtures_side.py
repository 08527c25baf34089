"""Hand-made run directories of run_bench.py's modes without load points (--startup, --single-stream), for the
report tests: the records run_bench.py writes, through the same record types, and a manifest that names the mode."""
from __future__ import annotations

import json
from pathlib import Path

from fixtures_bench import ARMS, manifest_of

from llmhost.bench.records import StartupRecord
from llmhost.bench.stream_records import StreamArmRecord

PHASES = ("launcher", "scheduler start", "weights", "KV pool", "prefill graphs", "decode graphs",
          "HTTP + tokenizer workers", "first generation")


def startup(arm: str, repeat: int, ready_s: float, scale: float = 1.0, error: str = "") -> StartupRecord:
    """A restart whose phases split ready_s in fixed shares (weights biggest); a failed one with `error`."""
    if error:
        return StartupRecord(arm, repeat, "failed", "2026-11-29T12:00:00Z", 61.5, None, {}, error=error)
    shares = (0.10, 0.05, 0.30, 0.05, 0.15, 0.15, 0.15, 0.05)
    return StartupRecord(arm, repeat, "ok", "2026-11-29T12:00:00Z", ready_s * scale + 2, ready_s,
                         {p: ready_s * s for p, s in zip(PHASES, shares)})


def stream_arm(arm: str, **fields: object) -> StreamArmRecord:
    """A fully measured arm (Qwen3-4B on an H200: floor 1.68 ms), `fields` replacing any measurement."""
    values = {"arm": arm, "status": "ok", "requests_ok": 3, "client_itl_p50_ms": 3.55, "client_itl_p90_ms": 3.9,
              "client_itl_mean_ms": 3.7, "server_step_ms": 3.4, "gpu_forward_ms": 2.9, "occupancy_pct": 85.3,
              "sglang_read_gb_s": 2800.0, "tokenizer_itl_ms": 3.5, "decode_lines": 75,
              "weight_bytes": 8_044_544_000, "peak_gb_s": 4800.0, **fields}
    return StreamArmRecord(**values)  # type: ignore[arg-type]


def write_side_run(root: Path, kind: str, records: list, torn: bool = False, run_id: str = "20261129-140000") -> Path:
    """root/<run_id>-<kind>/ with its manifest and records file (a torn last line with `torn`)."""
    run = root / f"{run_id}-{kind}"
    run.mkdir(parents=True)
    manifest = {**manifest_of(f"{run_id}-{kind}", ARMS[:2], [], 0), "slo": None, "workloads": []}
    manifest["startup_restarts" if kind == "startup" else "single_stream_requests"] = 2
    (run / "manifest.json").write_text(json.dumps(manifest))
    name = "startups.jsonl" if kind == "startup" else "stream_arms.jsonl"
    text = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    (run / name).write_text(text + ('{"arm": "torn' if torn else ""))
    return run
