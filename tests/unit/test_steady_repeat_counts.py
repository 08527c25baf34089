"""One repeat's steady window on a worked closed loop: TTFT by phase and the token means count successful requests
only, while a failed steady request still counts as sent (never good) in the goodput share."""
from __future__ import annotations

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench.records import Point, PointRecord, RequestRecord
from llmhost.report import load, steady

SLO = stats.Slo(ttft_ms=200.0, itl_ms=150.0, pct=90.0)


def _request(t: float, ttft: float | None = 100.0, ok: bool = True) -> RequestRecord:
    if not ok:
        return RequestRecord(start_s=t, ok=False, error="reset", prompt_tokens=100, output_tokens=0, ttft_ms=None,
                             itl_ms=(), e2e_ms=1000.0)
    return RequestRecord(start_s=t, ok=True, error="", prompt_tokens=100, output_tokens=10, ttft_ms=ttft,
                         itl_ms=(100.0,) * 9, e2e_ms=1000.0, cached_tokens=64)  # TPOT (1000 - 100) / 9 = 100 ms


def _repeat() -> steady.RepeatWindow:
    # c = 2 in lockstep: two requests sent at 0, 1, ..., 5 s, each taking 1 s. The 2nd completion (1 s) opens the
    # window, the last send (5 s) closes it: warm-up = the first 2c - 1 sends (the wave at 0 s and the refill of its
    # first completion), drain = the wave at 5 s, steady = the other seven, sent at 1..4 s. Among them, the first
    # sent at 3 s failed and the second sent at 4 s had a 300 ms TTFT.
    rows = [_request(float(t)) for t in range(6) for _ in range(2)]
    rows[6] = _request(3.0, ok=False)
    rows[9] = _request(4.0, ttft=300.0)
    point = Point("p", "baseline", "chat", "concurrency", 2, None, 12, 1)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                            cache_flushed=True, summary=None, requests_file="requests/p.jsonl")
    return steady.window_repeat(record, load.requests_from_records(rows))


def test_ttft_by_phase_holds_only_the_successful_requests() -> None:
    r = _repeat()
    assert r.is_steady, r.steadiness.reasons
    assert (r.window.t_start, r.window.t_end) == (1.0, 5.0)
    assert sorted(r.ttft_ms["steady"]) == [100.0] * 5 + [300.0]  # 7 steady requests, one failed
    assert list(r.ttft_ms["warmup"]) == [100.0] * 3 and list(r.ttft_ms["drain"]) == [100.0, 100.0]


def test_a_failed_steady_request_counts_as_sent_but_never_good() -> None:
    r = _repeat()
    assert r.good_sent(SLO) == (5, 7)
    # 8 completions in (1, 5] s (the failed one included): 2 req/s, times 5 of 7 within the SLO
    assert r.window.request_throughput == pytest.approx(2.0)
    assert steady.goodput_rps(r, SLO) == pytest.approx(2.0 * 5 / 7)


def test_the_token_means_are_over_the_successful_steady_requests() -> None:
    r = _repeat()
    # the failed request's 0 output tokens (and its unreported cached tokens) are not averaged in
    assert r.tokens == pytest.approx((100.0, 10.0, 64.0))
    assert r.window.output_throughput == pytest.approx(70 / 4)
    assert np.array_equal(r.steady_sent[0], [True, True, True, False, True, True, True])
