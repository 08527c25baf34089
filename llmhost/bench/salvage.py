"""What a point killed at its time limit leaves behind: the requests that finished before the kill.

bench_serving writes its results only when it ends, so a hung point killed at its limit used to leave an empty
summary. The load-generator wrapper (llmhost.bench.points.loadgen_main) also appends each request to
<stem>.completed.jsonl the moment it finishes; this module turns those lines into the point's request records and
a summary of what completed. Nothing is written here.
"""
from __future__ import annotations

from pathlib import Path

from llmhost import files
from llmhost.bench import points
from llmhost.bench.records import PointSummary, RequestRecord


def warmup_requests(argv: list[str]) -> int:
    """--warmup-requests of a load-generator command line (bench_serving's default: 1)."""
    return int(argv[argv.index("--warmup-requests") + 1]) if "--warmup-requests" in argv else 1


def completed_requests(path: Path, warmups: int) -> list[RequestRecord]:
    """Request records of the lines in `path` (a torn last line from the kill is skipped), warm-up requests
    (the first `warmups` sequence numbers) left out, in start order."""
    rows = [r for r in files.read_jsonl(path).rows if int(r.get("seq", -1)) >= warmups]
    out = []
    for row in sorted(rows, key=lambda r: r["start_s"]):
        ok = bool(row["ok"])
        itl_ms = tuple(x * 1000.0 for x in row["itl_s"]) if ok else ()
        ttft_ms = row["ttft_s"] * 1000.0 if ok and (row["ttft_s"] or not row["output_len"]) else None
        out.append(RequestRecord(start_s=float(row["start_s"]), ok=ok, error=str(row["error"]),
                                 prompt_tokens=int(row["prompt_len"]), output_tokens=int(row["output_len"]),
                                 ttft_ms=ttft_ms, itl_ms=itl_ms, e2e_ms=float(row["latency_s"]) * 1000.0))
    return out


def summarize(rows: list[RequestRecord], request_rate: float | None) -> PointSummary:
    """The summary bench_serving would have printed over these requests (first start to last end)."""
    ok = [r for r in rows if r.ok]
    duration_s = max((r.start_s + r.e2e_ms / 1000.0 for r in rows), default=0.0) - min(
        (r.start_s for r in rows), default=0.0)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    tokens_in, tokens_out = sum(r.prompt_tokens for r in ok), sum(r.output_tokens for r in ok)
    details = {"duration": duration_s, "completed": len(ok), "request_throughput": len(ok) * per_s,
               "input_throughput": tokens_in * per_s, "output_throughput": tokens_out * per_s,
               "total_throughput": (tokens_in + tokens_out) * per_s}
    return points.summarize(details, rows, request_rate)
