"""Where one stream's time per output token goes: pure arithmetic over what `run_bench.py --single-stream`
measured (llmhost.bench.single_stream), the table and the closing JSON.

Per arm, milliseconds per output token, each a difference of two measured medians (None = not measured, never
guessed):

    floor              weight bytes / datasheet bandwidth (llmhost.bench.floor)
    GPU above floor    GPU forward - floor: the kernels at batch 1 not reaching peak bandwidth
    CPU gap            server step - GPU forward: scheduling, sampling outside the graph, launch
    streaming          client ITL mean - server step: detokenize, HTTP, the client

    server step  = 1000 / SGLang's gen throughput at one running request (its Decode log line): the mean step of
                   a window of 40, so streaming subtracts it from the client's mean gap, not from its p50 (on a
                   skewed gap distribution a p50 under the mean would make streaming look negative)
    GPU forward  = server step x fwd occupancy / 100 (SGLang's device timer)
    BW share     = floor / GPU forward: the peak bandwidth the forward reaches on the weights
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from llmhost import stats
from llmhost.bench.decode_log import DecodeLine
from llmhost.bench.floor import Floor
from llmhost.bench.stream_records import StreamArmRecord, StreamRequestRecord


@dataclasses.dataclass(frozen=True, slots=True)
class Breakdown:
    arm: str
    client_itl_p50_ms: float | None
    client_itl_p90_ms: float | None
    client_itl_mean_ms: float | None
    server_step_ms: float | None
    gpu_forward_ms: float | None
    floor_ms: float | None
    gpu_above_floor_ms: float | None
    cpu_gap_ms: float | None
    streaming_ms: float | None
    bandwidth_share_pct: float | None
    sglang_read_gb_s: float | None
    tokenizer_itl_ms: float | None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def summarize_arm(arm: str, requests: list[StreamRequestRecord], lines: list[DecodeLine],
                  tokenizer_itl_ms: float | None, floor: Floor | None, floor_note: str,
                  error: str = "") -> StreamArmRecord:
    """The arm's record from its requests and its steady one-request Decode lines (decode_log.single_stream);
    `error`: why the arm failed before its requests (a restart that failed)."""
    ok = [r for r in requests if r.ok]
    gaps = [g for r in ok for g in r.itl_ms]
    p50, p90 = (stats.percentile(gaps, p) for p in (50, 90)) if gaps else (math.nan, math.nan)
    gpu = [d.step_ms * d.occupancy_pct / 100 for d in lines if d.step_ms is not None and d.occupancy_pct is not None]
    errors = [r.error for r in requests if not r.ok]
    error = error or ("" if ok else (errors[0] if errors else "no request ran"))
    return StreamArmRecord(
        arm=arm, status="failed" if error else "ok", requests_ok=len(ok),
        client_itl_p50_ms=p50 if gaps else None, client_itl_p90_ms=p90 if gaps else None,
        client_itl_mean_ms=statistics.fmean(gaps) if gaps else None,
        server_step_ms=_median([d.step_ms for d in lines]), gpu_forward_ms=_median(gpu),
        occupancy_pct=_median([d.occupancy_pct for d in lines]), sglang_read_gb_s=_median([d.read_gb_s for d in lines]),
        tokenizer_itl_ms=tokenizer_itl_ms, decode_lines=len(lines),
        weight_bytes=floor.weight_bytes if floor else None, peak_gb_s=floor.peak_gb_s if floor else None,
        floor_note=floor_note, error=error)


def breakdown(rec: StreamArmRecord) -> Breakdown:
    """The four parts and the bandwidth share of one arm's record (see the module docstring)."""
    floor_ms = Floor(rec.weight_bytes, rec.peak_gb_s, None).ms if rec.weight_bytes else None
    share = floor_ms / rec.gpu_forward_ms * 100 if floor_ms is not None and rec.gpu_forward_ms else None
    return Breakdown(rec.arm, rec.client_itl_p50_ms, rec.client_itl_p90_ms, rec.client_itl_mean_ms,
                     rec.server_step_ms, rec.gpu_forward_ms, floor_ms, _minus(rec.gpu_forward_ms, floor_ms),
                     _minus(rec.server_step_ms, rec.gpu_forward_ms), _minus(rec.client_itl_mean_ms, rec.server_step_ms),
                     share, rec.sglang_read_gb_s, rec.tokenizer_itl_ms)


def missing_notes(rec: StreamArmRecord) -> list[str]:
    """One line per instrument that gave nothing for this arm, and why."""
    notes = []
    if rec.error:
        notes.append(f"failed: {rec.error}")
    if rec.decode_lines == 0:
        notes.append("no steady one-request Decode lines in the server log: server step, GPU forward, CPU gap "
                     "and streaming not measured")
    elif rec.occupancy_pct is None:
        notes.append("no 'fwd occupancy' in the Decode lines (the server ignored SGLANG_ENABLE_METRICS_DEVICE_TIMER"
                     "): GPU forward, above floor and CPU gap not measured")
    if rec.decode_lines and rec.sglang_read_gb_s is None:
        notes.append("no 'est. read BW' in the Decode lines (--enable-mfu-metrics needs --enable-metrics)")
    if rec.floor_note:
        notes.append(f"floor not stated: {rec.floor_note}")
    return notes


COLUMNS = ("arm", "client ITL p50 (p90)", "mean", "server step", "GPU fwd", "floor", "GPU>floor", "CPU gap",
           "streaming", "BW share", "SGLang read GB/s")


def table_cells(rows: list[Breakdown]) -> list[list[str]]:
    """The table's cells per arm, one per COLUMNS entry, ms per output token; '-' = not measured."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    return [[b.arm, "-" if b.client_itl_p50_ms is None else f"{b.client_itl_p50_ms:.2f} ({ms(b.client_itl_p90_ms)})",
             ms(b.client_itl_mean_ms), ms(b.server_step_ms), ms(b.gpu_forward_ms), ms(b.floor_ms),
             ms(b.gpu_above_floor_ms), ms(b.cpu_gap_ms), ms(b.streaming_ms),
             "-" if b.bandwidth_share_pct is None else f"{b.bandwidth_share_pct:.0f}%",
             "-" if b.sglang_read_gb_s is None else f"{b.sglang_read_gb_s:.0f}"] for b in rows]


def table_lines(rows: list[Breakdown]) -> list[str]:
    """The terminal's fixed-width table of table_cells."""
    body = table_cells(rows)
    widths = [max(len(row[i]) for row in (COLUMNS, *body)) for i in range(len(COLUMNS))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in (COLUMNS, *body)]


def closing(run_dir: str, run_id: str, requests: int, recs: list[StreamArmRecord]) -> dict:
    """The last stdout line: per arm the breakdown, ms to 0.001 (the records keep them whole)."""
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return {"run_dir": run_dir, "run_id": run_id, "single_stream_requests": requests,
            "arms": {rec.arm: {"status": rec.status, "requests_ok": rec.requests_ok, "decode_lines": rec.decode_lines,
                               **{k: r(v) for k, v in dataclasses.asdict(breakdown(rec)).items() if k != "arm"}}
                     for rec in recs}}
