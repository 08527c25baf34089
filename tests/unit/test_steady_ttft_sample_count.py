"""The steady TTFT sample count is the number of TTFTs its percentiles are taken over: a successful request that
streamed no token has no TTFT and is no sample (as in the all-requests row), in every phase."""
from __future__ import annotations

from llmhost import stats
from llmhost.bench.records import Point, PointRecord, RequestRecord
from llmhost.report import load, steady, tables

SLO = stats.Slo(ttft_ms=500.0, itl_ms=50.0, pct=99.0)


def test_a_successful_request_without_a_ttft_is_no_ttft_sample() -> None:
    # c = 2 in lockstep: two requests sent at 0, 1, ..., 5 s, each taking 1 s: warm-up = the first 2c - 1 sends (the
    # wave at 0 s and one refill at 1 s), steady = the other seven up to 4 s, drain = 5 s. One steady and one
    # warm-up request completed without streaming a token.
    rows = [RequestRecord(start_s=float(t), ok=True, error="", prompt_tokens=100, output_tokens=10, ttft_ms=100.0,
                          itl_ms=(10.0,) * 9, e2e_ms=1000.0) for t in range(6) for _ in range(2)]
    for i in (0, 4):
        rows[i] = RequestRecord(start_s=rows[i].start_s, ok=True, error="", prompt_tokens=100, output_tokens=0,
                                ttft_ms=None, itl_ms=(), e2e_ms=1000.0)
    point = Point("p", "baseline", "chat", "concurrency", 2, None, 12, 1)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                            cache_flushed=True, summary=None, requests_file="requests/p.jsonl")
    requests = load.requests_from_records(rows)
    group = tables.Group("baseline", "chat", "concurrency", 2, None, 12, (record,), requests)
    row = steady.steady_row(group, [steady.window_repeat(record, requests)], SLO)
    assert (row["warmup_n"], row["steady_ttft_n"], row["drain_n"]) == (2, 6, 2)
    assert tables.summary_row(group, SLO)["ttft_n"] == 10  # the all-requests row counts the same way
