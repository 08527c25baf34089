"""A closed loop's steadiness check on worked examples: a half of one whole turnover is named as such, the drift
sees successful requests only, records may come in any order; and failed requests are no unknown prefix hits."""
from __future__ import annotations

import math

import numpy as np

from llmhost.bench import window
from llmhost.bench.records import Point, RequestRecord


def _lockstep(c: int, waves: int) -> tuple[np.ndarray, np.ndarray]:
    """c requests sent at 0, 1, ..., waves - 1 s, each taking 1 s (send order)."""
    return np.repeat(np.arange(float(waves)), c), np.full(c * waves, 1000.0)


def test_a_window_half_of_one_whole_turnover_is_named_too_few_turnovers() -> None:
    # c=4, waves at 0..3 s: the window (1, 3] s holds the turnovers sent at 1, 2 and 3 s, halved 1 and 2
    start, e2e = _lockstep(4, 4)
    point = Point("p", "baseline", "chat", "concurrency", 4, None, 16, 1)
    w, verdict = window.window_and_check(point, start, e2e, np.ones(16), np.full(16, 100.0), np.ones(16, bool))
    assert (w.t_start, w.t_end, w.completed) == (1.0, 3.0, 8)
    assert verdict.reasons == ("too few turnovers to check TTFT drift: 1 whole turnover(s) of the 4 slots in a "
                               "window half, 2 needed (send more requests: --duration-s)",)


def test_failed_requests_ttft_does_not_count_towards_the_drift() -> None:
    # c=4, waves at 0..5 s: halves are the turnovers sent at 1-2 s and at 3-5 s. In the second half three of each
    # turnover's four requests failed after a 1,000 ms first token; the successful ones all took 100 ms: no drift.
    start, e2e = _lockstep(4, 6)
    ttft, ok = np.full(24, 100.0), np.ones(24, bool)
    late = (start >= 3) & (np.arange(24) % 4 != 0)
    ttft[late], ok[late] = 1000.0, False
    point = Point("p", "baseline", "chat", "concurrency", 4, None, 24, 1)
    _, verdict = window.window_and_check(point, start, e2e, np.ones(24), ttft, ok)
    assert verdict.ttft_drift_pct == 0.0 and verdict.is_steady, verdict.reasons


def test_records_in_completion_order_are_windowed_in_send_order() -> None:
    start, e2e = _lockstep(4, 4)
    rows = [RequestRecord(start_s=float(s), ok=True, error="", prompt_tokens=10, output_tokens=5, ttft_ms=100.0,
                          itl_ms=(10.0,) * 4, e2e_ms=float(e)) for s, e in zip(start, e2e)]
    point = Point("p", "baseline", "chat", "concurrency", 4, None, 16, 1)
    w, _ = window.measure(point, rows[::-1])
    assert w.phase == ("warmup",) * 7 + ("steady",) * 5 + ("drain",) * 4  # warm-up: the first 2c - 1 sends


def test_a_failed_request_is_not_an_unknown_prefix_hit() -> None:
    split = window.prefix_split(np.array([100.0, math.nan, 300.0]), np.array([True, False, True]),
                                np.array([100.0, 100.0, 100.0]), np.array([80.0, math.nan, math.nan]))
    assert list(split.hit_ttft_ms) == [100.0] and split.miss_ttft_ms.size == 0
    assert split.unknown == 1  # the successful request without a cached-token count, not the failed one
