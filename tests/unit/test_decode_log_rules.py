"""Which of SGLang's Decode lines count as one stream's steady steps, and how each line's figures are read."""
from __future__ import annotations

import pytest

from llmhost.bench import decode_log

STAMP = "[2026-12-01 10:00:00] "


def decode(running: int = 1, graph: str = "cuda graph: True", tok_s: str = "250.00", tail: str = "") -> str:
    return STAMP + (f"Decode batch, #running-req: {running}, #token: 300, token usage: 0.00, {graph}, "
                    f"gen throughput (token/s): {tok_s}, #queue-req: 0{tail}")


def test_a_line_with_two_running_requests_is_not_a_single_stream_step():
    lines = [decode(running=1, tok_s="250.00"), decode(running=2, tok_s="400.00")]
    assert [d.running for d in decode_log.steady(lines)] == [1, 2]
    (only,) = decode_log.single_stream(lines)
    assert (only.running, only.step_ms) == (1, 4.0)  # 1000 / 250 tok/s


def test_an_eager_step_without_a_cuda_graph_is_not_a_single_stream_step():
    lines = [decode(graph="cuda graph: False", tok_s="125.00"), decode(tok_s="200.00")]
    assert [d.step_ms for d in decode_log.single_stream(lines)] == [5.0]  # the graph replay's 1000 / 200


def test_the_graph_label_of_other_devices_parses_too():
    line = decode_log.parse(decode(graph="npu graph: True", tok_s="100.00"))
    assert line is not None and (line.graph, line.step_ms) == (True, 10.0)
    assert decode_log.parse(decode(graph="cpu graph: False")).graph is False


def test_an_infinite_throughput_is_no_step_time_and_no_single_stream_step():
    line = decode_log.parse(decode(tok_s="inf"))
    assert line is not None and line.step_ms is None
    assert decode_log.single_stream([decode(tok_s="inf"), decode(tok_s="500.00")]) == [
        decode_log.DecodeLine(1, True, 500.0, None, None)]


def test_a_decode_line_with_a_rank_tag_parses():
    line = decode_log.parse(STAMP + "Decode batch [3], #running-req: 1, #token: 300, token usage: 0.00, "
                                    "cuda graph: True, gen throughput (token/s): 250.00, #queue-req: 0")
    assert line == decode_log.DecodeLine(1, True, 250.0, None, None)


def test_occupancy_and_read_bandwidth_are_each_read_from_their_own_suffix():
    line = decode_log.parse(decode(tail=", est. decode TFLOPS/s (per GPU): 2.09, est. read BW (GB/s per GPU): "
                                        "2088.91, est. write BW (GB/s per GPU): 0.04, fwd occupancy: 61.25%"))
    assert (line.read_gb_s, line.occupancy_pct) == (2088.91, 61.25)
    assert decode_log.parse(decode(tail=", fwd occupancy: 61.25%")).read_gb_s is None


@pytest.mark.parametrize("tok_s, step_ms", [("1000.00", 1.0), ("250.00", 4.0), ("0.00", None)])
def test_the_step_is_a_thousand_over_the_tokens_per_second(tok_s, step_ms):
    assert decode_log.parse(decode(tok_s=tok_s)).step_ms == step_ms
