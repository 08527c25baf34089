"""Edges of the measuring-side window: a window end that falls exactly on a sampler tick snaps to that tick, the
client's requests are those with first token in (first tick, last tick], CPU ticks in (start, end], and the
page's gap call needs both strict margins."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.bench import telemetry
from llmhost.bench.records import TelemetrySample
from llmhost.report import client_overhead

POINT = "baseline.chat.concurrency.c8.r1"


def _counters(histogram: str, per_second: list[tuple[float, float]]) -> list[TelemetrySample]:
    """1 Hz ticks from t=100: each second adds (seconds, count) to the histogram's cumulative _sum and _count."""
    out, total, count = [], 0.0, 0.0
    for i, (seconds, n) in enumerate(per_second):
        total, count = total + seconds, count + n
        out += [TelemetrySample(100.0 + i, "metrics", f"{histogram}_sum", {}, total, POINT),
                TelemetrySample(100.0 + i, "metrics", f"{histogram}_count", {}, count, POINT)]
    return out


# ticks 100..106; second k (ending at tick 100 + k) adds k first tokens of 100 ms each
TTFT = _counters(client_overhead.HISTOGRAM, [(0.0, 0.0)] + [(0.1 * k, float(k)) for k in range(1, 7)])


def test_a_window_end_on_a_tick_snaps_to_that_tick_not_the_one_before():
    """Window [102, 105]: ticks 102 and 105 exactly, so seconds 3, 4, 5: 12 first tokens (from 101: 14)."""
    assert client_overhead.window_delta(TTFT, POINT, client_overhead.HISTOGRAM, 102.0, 105.0) == (
        pytest.approx(1.2), 12.0, 102.0, 105.0)
    server, _, n = client_overhead.window_means(TTFT, POINT, 102.0, 105.0, np.array([103.0]), np.array([1.0]))
    assert n == 12 and math.isclose(server, 100.0)


def test_the_clients_requests_are_those_with_first_token_after_the_first_tick_up_to_the_last():
    first = np.array([102.0, 102.5, 105.0, 105.5])  # on the first tick: out; on the last tick: in
    ttft = np.array([1000.0, 200.0, 400.0, 3000.0])
    _, client, _ = client_overhead.window_means(TTFT, POINT, 102.3, 105.7, first, ttft)
    assert client == 300.0  # (200 + 400) / 2
    headers = np.array([90.0, 10.0, 30.0, 90.0])
    assert client_overhead.headers_mean(TTFT, POINT, 102.3, 105.7, first, headers) == 20.0


def test_a_window_within_one_tick_interval_has_no_delta():
    assert client_overhead.window_delta(TTFT, POINT, client_overhead.HISTOGRAM, 102.2, 102.9) is None
    assert client_overhead.window_means(TTFT, POINT, 102.2, 102.9, np.array([102.5]), np.array([1.0]))[2] == 0


ITL = _counters(client_overhead.ITL_HISTOGRAM, [(0.0, 0.0)] + [(0.5, 50.0)] * 6)  # 10 ms a token after the first


def test_client_time_per_token_leaves_out_single_token_requests():
    """Ticks 101..105 bound the window. Request 1: 21 tokens over 0.4 s after its first (20 ms a gap); request 2:
    one token, its stream closing 0.3 s after it: no gap to time, so it adds neither time nor gaps."""
    first, end = np.array([101.5, 102.0]), np.array([101.9, 102.3])
    server, client = client_overhead.itl_means(ITL, POINT, 101.0, 105.0, first, end, np.array([21, 1]))
    assert math.isclose(server, 10.0) and math.isclose(client, 20.0)


def test_no_tokens_counted_in_the_window_means_no_time_per_token():
    flat = _counters(client_overhead.ITL_HISTOGRAM, [(0.0, 0.0)] * 5)
    server, client = client_overhead.itl_means(flat, POINT, 100.0, 104.0, np.array([101.5]), np.array([102.0]),
                                               np.array([11]))
    assert math.isnan(server) and math.isnan(client)


def test_a_cpu_tick_at_the_windows_start_is_outside_it():
    samples = [TelemetrySample(100.0 + i, "client", telemetry.CLIENT_CPU, {}, v, POINT)
               for i, v in enumerate([90.0, 10.0, 20.0, 30.0])]
    assert client_overhead.client_cpu_pct(samples, POINT, 100.0, 103.0) == 20.0  # ticks 101..103


def test_the_gap_is_notable_only_strictly_beyond_both_margins():
    assert not client_overhead.gap_is_notable(150.0, 100.0)  # exactly 50 ms
    assert client_overhead.gap_is_notable(150.5, 100.0)
    assert not client_overhead.gap_is_notable(600.0, 500.0)  # exactly 20% of 500 ms
    assert client_overhead.gap_is_notable(601.0, 500.0)
