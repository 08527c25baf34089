"""What a point that ended without the benchmark's totals leaves behind: the requests that finished before.

The benchmark module returns its totals only when every request is done, so a hung point killed at its time limit
used to leave an empty summary. The boot's load generator (llmhost.bench.loadgen) also appends each measured
request to <stem>.requests.completed.jsonl the moment it finishes; this module turns those lines into the point's
request records and a summary of what completed. Nothing is written here.
"""
from __future__ import annotations

from pathlib import Path

from llmhost.bench import points, records
from llmhost.bench.loadgen import completed_file
from llmhost.bench.records import PointSummary, RequestRecord


def completed_requests(requests_file: Path) -> list[RequestRecord]:
    """The requests of a point that finished before it ended (a torn last line from the kill is skipped), in
    start order; none when the load generator never started the point."""
    rows = records.read_records(completed_file(requests_file), RequestRecord.from_dict).records
    return sorted(rows, key=lambda r: r.start_s)


def summarize(rows: list[RequestRecord], request_rate: float | None) -> PointSummary:
    """The totals the module would have returned over these requests (first start to last end)."""
    ok = [r for r in rows if r.ok]
    duration_s = max((r.start_s + r.e2e_ms / 1000.0 for r in rows), default=0.0) - min(
        (r.start_s for r in rows), default=0.0)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    tokens_in, tokens_out = sum(r.prompt_tokens for r in ok), sum(r.output_tokens for r in ok)
    totals = {"duration": duration_s, "completed": len(ok), "request_throughput": len(ok) * per_s,
              "input_throughput": tokens_in * per_s, "output_throughput": tokens_out * per_s,
              "total_throughput": (tokens_in + tokens_out) * per_s}
    return points.summarize(totals, rows, request_rate)
