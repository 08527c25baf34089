"""One stream's breakdown: which requests and Decode lines feed each figure, and which average each one is."""
from __future__ import annotations

import pytest

from llmhost.bench import decode_log, stream_breakdown
from llmhost.bench.stream_records import StreamRequestRecord


def line(step_ms: float, occupancy_pct: float | None = 50.0) -> decode_log.DecodeLine:
    return decode_log.DecodeLine(1, True, 1000.0 / step_ms, None, occupancy_pct)


def test_the_server_step_and_gpu_forward_are_medians_over_the_lines_not_means():
    lines = [line(4.0), line(5.0), line(9.0)]  # mean step 6, median 5; at 50%: forwards 2, 2.5, 4.5
    rec = stream_breakdown.summarize_arm("a", [StreamRequestRecord("a", 1, True, "", 3, 20.0, (6.0, 6.0))],
                                         lines, None, None, "")
    assert rec.server_step_ms == pytest.approx(5.0)
    assert rec.gpu_forward_ms == pytest.approx(2.5)
    assert rec.occupancy_pct == 50.0


def test_the_client_mean_is_the_mean_gap_and_streaming_subtracts_the_step_from_it():
    gaps = (2.0, 2.0, 2.0, 10.0)  # p50 2, mean 4
    rec = stream_breakdown.summarize_arm("a", [StreamRequestRecord("a", 1, True, "", 5, 20.0, gaps)],
                                         [line(3.0)], None, None, "")
    assert (rec.client_itl_p50_ms, rec.client_itl_mean_ms) == (2.0, 4.0)
    assert stream_breakdown.breakdown(rec).streaming_ms == pytest.approx(4.0 - 3.0)


def test_the_gaps_of_a_failed_request_are_left_out_of_the_client_figures():
    requests = [StreamRequestRecord("a", 1, True, "", 4, 20.0, (3.0, 4.0, 5.0)),
                StreamRequestRecord("a", 2, False, "stream cut", 2, 20.0, (500.0,))]
    rec = stream_breakdown.summarize_arm("a", requests, [], None, None, "")
    assert (rec.requests_ok, rec.client_itl_p50_ms, rec.client_itl_mean_ms) == (1, 4.0, 4.0)
    assert rec.client_itl_p90_ms == pytest.approx(4.8)  # 3, 4, 5: linear between 4 and 5


def test_the_closing_json_keeps_milliseconds_to_three_decimals():
    rec = stream_breakdown.summarize_arm("a", [StreamRequestRecord("a", 1, True, "", 3, 20.0, (4.12345, 4.12345))],
                                         [line(3.5)], None, None, "")
    arm = stream_breakdown.closing("/r", "r1", 1, [rec])["arms"]["a"]
    assert (arm["client_itl_mean_ms"], arm["server_step_ms"], arm["gpu_forward_ms"]) == (4.123, 3.5, 1.75)
    assert arm["streaming_ms"] == 0.623  # 4.12345 - 3.5
