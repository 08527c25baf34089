"""The measuring side's share: SGLang's own TTFT over a steady window (the telemetry's histogram counters) beside
the client's, and the load generator's CPU use."""
from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest

from llmhost.bench import telemetry
from llmhost.bench.records import TelemetrySample
from llmhost.serve import procfs
from llmhost.report import client_overhead, steady, steady_page

POINT = "baseline.agent.concurrency.c64.r1"


def ticks(per_second: list[tuple[float, int]], worker: str = "", point: str = POINT) -> list[TelemetrySample]:
    """1 Hz samples from t=100: each second adds (seconds of TTFT, first tokens) to the cumulative counters."""
    out, total, count = [], 0.0, 0
    labels = {"model_name": "qwen3-4b", **({"worker": worker} if worker else {})}
    for i, (seconds, n) in enumerate(per_second):
        total, count = total + seconds, count + n
        out += [TelemetrySample(100.0 + i, "metrics", client_overhead.SUM, labels, total, point),
                TelemetrySample(100.0 + i, "metrics", client_overhead.COUNT, labels, float(count), point)]
    return out


def test_the_server_mean_is_the_counters_difference_between_the_ticks_that_bound_the_window():
    # ticks at 100..110; each second 4 first tokens totalling 0.8 s (200 ms each), seconds 5-6 slower (400 ms)
    samples = ticks([(0.8, 4)] * 5 + [(1.6, 4)] * 2 + [(0.8, 4)] * 4)
    first_token = np.array([101.5, 102.5, 103.2, 106.9, 108.0, 110.5])
    ttft = np.array([250.0, 260.0, 270.0, 500.0, 280.0, 999.0])
    server, client, n = client_overhead.window_means(samples, POINT, 102.4, 108.7, first_token, ttft)
    # window snaps to ticks 102 and 108: seconds 103..108 -> 6 x 4 tokens, 4 x 0.8 + 2 x 1.6 = 6.4 s
    assert n == 24 and math.isclose(server, 6400 / 24)
    assert math.isclose(client, (260 + 270 + 500 + 280) / 4)  # first tokens in (102, 108]
    # the same requests' time to their response headers; one unrecorded (nan) is left out, not counted as 0
    headers = np.array([5.0, 20.0, 40.0, math.nan, 60.0, 900.0])
    assert math.isclose(client_overhead.headers_mean(samples, POINT, 102.4, 108.7, first_token, headers), 40.0)
    assert math.isnan(client_overhead.headers_mean(samples, POINT, 102.4, 108.7, first_token,
                                                   np.full(6, math.nan)))  # a run before they were recorded
    assert math.isnan(client_overhead.headers_mean(samples, POINT, 50.0, 99.0, first_token, headers))  # no ticks


def test_workers_behind_a_router_are_summed_and_other_points_ignored():
    samples = ticks([(0.1, 1)] * 6, "worker0") + ticks([(0.3, 1)] * 6, "worker1") + ticks([(9.0, 1)] * 6, "",
                                                                                          "other.point")
    server, _, n = client_overhead.window_means(samples, POINT, 100.0, 105.0, np.array([103.0]), np.array([1.0]))
    assert n == 10 and math.isclose(server, 1000 * (5 * 0.4) / 10)


def test_a_tick_that_missed_a_worker_is_not_a_window_end():
    """worker1's scrape at t=105 failed: the window's end snaps back to t=104, where both were scraped. Summing what
    t=105 had would drop worker1's counts from the delta: 4 first tokens in 0.2 s, a 'mean' of 50 ms, not 200."""
    samples = ticks([(0.1, 1)] * 6, "worker0") + [s for s in ticks([(0.3, 1)] * 6, "worker1") if s.t != 105.0]
    server, _, n = client_overhead.window_means(samples, POINT, 100.0, 105.0, np.array([103.0]), np.array([1.0]))
    assert n == 8 and math.isclose(server, 1000 * (4 * 0.4) / 8)  # ticks 100 and 104: 4 s of both workers


def test_no_ticks_in_the_window_or_no_first_token_is_not_measured():
    samples = ticks([(0.0, 0)] * 4)
    assert client_overhead.window_means(samples, POINT, 100.0, 103.0, np.array([]), np.array([]))[2] == 0
    assert client_overhead.window_means(samples, POINT, 50.0, 99.0, np.array([]), np.array([]))[2] == 0
    nan_start = client_overhead.window_means(ticks([(0.2, 1)] * 4), POINT, math.nan, 103.0, np.array([]), np.array([]))
    assert math.isnan(nan_start[0]) and nan_start[2] == 0
    assert client_overhead.window_means([], POINT, 100.0, 103.0, np.array([]), np.array([]))[2] == 0


def test_the_gap_is_called_out_only_when_large_in_ms_and_in_share():
    assert client_overhead.gap_is_notable(389.0, 201.0)  # the H200's agent c=64: +188 ms, +94%
    assert not client_overhead.gap_is_notable(459.0, 425.0)  # chat c=64: +34 ms
    assert not client_overhead.gap_is_notable(2100.0, 2000.0)  # +100 ms but 5%
    assert not client_overhead.gap_is_notable(math.nan, 200.0)


def test_steady_rows_weight_repeats_by_what_sglang_counted_and_the_page_names_the_worst_point():
    class Rep:
        def __init__(self, server: float, client: float, n: int, headers: float = math.nan) -> None:
            self.server_ttft, self.client_cpu_pct = (server, client, n), 30.0 + n / 10
            self.itl = (10.0 + n / 100, 11.0 + n / 100)
            self.client_headers_ms = headers
            self.steady_headers_ms = np.full(n, headers) if math.isfinite(headers) else np.array([])
            self.headers_pace_ms = {100: 3.0, 300: 5.0}.get(n, math.nan)
            self.client_cpu_waves = (30.0, 20.0, 50.0) if n == 100 else (math.nan, 22.0, math.nan)
            self.ttft_parts = {100: {"intake": 1.0, "queued": 40.0, "prefill": 100.0},
                               300: {"intake": 3.0, "queued": 60.0, "prefill": math.nan}}.get(n, {})
    fields = steady._measuring_side_fields([Rep(200.0, 400.0, 100, 40.0), Rep(300.0, 500.0, 300, 80.0),
                                            Rep(math.nan, math.nan, 0)])
    assert math.isclose(fields["client_headers_mean_ms"], 70.0)  # weighted like the TTFT means
    assert fields["client_headers_p99_ms"] == 80.0  # pooled: 300 of the 400 requests took 80 ms
    assert fields["headers_pace_ms"] == 4.0  # the median of the repeats that had a wave to pace
    assert (fields["client_cpu_wave_pct"], fields["client_cpu_between_pct"], fields["client_wave_extra_ms"]) == (
        30.0, pytest.approx(64 / 3), 50.0)  # means over the repeats that measured each
    assert fields["server_ttft_n"] == 400 and math.isclose(fields["server_ttft_mean_ms"], 275.0)
    assert math.isclose(fields["client_ttft_mean_ms"], 475.0) and math.isclose(fields["client_cpu_pct"], (40 + 60 + 30) / 3)
    assert (fields["server_itl_mean_ms"], fields["client_itl_mean_ms"]) == (pytest.approx(34 / 3),
                                                                            pytest.approx(37 / 3))
    # TTFT's parts: means over the repeats that measured each
    assert (fields["server_intake_ms"], fields["server_queued_ms"], fields["server_prefill_ms"]) == (2.0, 50.0, 100.0)
    row = {"arm": "baseline", "workload": "agent", "load": "c=64", **fields, "client_cpu_pct": 35.0}
    note = steady_page.measuring_side_note([row, {**row, "load": "c=8", "client_ttft_mean_ms": 280.0}])
    assert "At 1 point(s)" in note and "client 475.0 ms vs SGLang 275.0 ms" in note and "c=64" in note
    assert ("Of the client's mean, 70.0 ms passed before its response headers came back" in note
            and "leaves 130.0 ms for the first chunk's way out" in note)  # 475 - 70 - 275
    assert "Most of the gap is on the way out: read those TTFTs as an upper bound" in note  # 130 > 70
    server_side = steady_page.measuring_side_note([{**row, "client_headers_mean_ms": 150.0}])  # leaves 50 ms
    assert "Most of the gap came before the headers: the requests waited to be taken up" in server_side
    assert steady_page.measuring_side_note([{**row, "server_ttft_n": 0}]) == ""
    assert steady_page._server_ttft_cell(row).startswith("475.0 / 275.0 (400) <span class=flag")
    assert steady_page._server_ttft_cell(row).endswith("; headers 70.0 (p99 80.0)")
    older = {k: v for k, v in row.items() if not k.startswith("client_headers")}  # before headers were recorded
    assert "headers" not in steady_page._server_ttft_cell(older) and "response headers" not in \
        steady_page.measuring_side_note([older])
    assert "read those ttfts as an upper bound" in steady_page.measuring_side_note([older]).lower()


def test_the_page_says_when_the_ttft_tail_was_mostly_the_way_in():
    # the H200's defaults at agent c=128 (8 tokenizer processes): headers p99 1,172 ms of a steady TTFT p99 of
    # 1,438 ms; the article's one process: 202 of 2,806 ms (its tail came after the headers)
    ours = {"arm": "baseline", "workload": "agent", "load": "c=128", "client_headers_p99_ms": 1171.7,
            "steady_ttft_p99_ms": 1438.2}
    theirs = {**ours, "arm": "article", "client_headers_p99_ms": 202.0, "steady_ttft_p99_ms": 2806.0}
    note = steady_page.way_in_note([ours, theirs])
    assert "At 1 point(s)" in note and "baseline · agent · c=128, headers p99 1,171.7 ms of a TTFT p99 of " \
        "1,438.2 ms. That time" in note and "--enable-dynamic-batch-tokenizer" in note
    waves = {"in_waves": True, "headers_pace_ms": 4.95, "wave_size": 101.0, "client_headers_mean_ms": 262.5}
    paced = steady_page.way_in_note([{**ours, **waves}])  # spread 495 ms: a mean wait of 248 of the 262.5 ms
    assert "ms. Within a wave the headers came back 5.0 ms apart" in paced and "one request after another" in paced
    together = steady_page.way_in_note([{**ours, **waves, "headers_pace_ms": 0.4}])  # spread 40 ms of 262.5
    assert "0.4 ms apart (the wave's p10–p90 spread over its requests): close together, so the wave waited as a " \
        "whole." in together and "one request after another" not in together
    assert "Within a wave" not in steady_page.way_in_note([{**ours, **waves, "in_waves": False}])
    assert steady_page.way_in_note([theirs]) == ""
    assert steady_page.way_in_note([{k: v for k, v in ours.items() if k != "client_headers_p99_ms"}]) == ""


def test_the_load_generators_cpu_is_sampled_from_proc_per_tick_and_restarts_with_a_new_process():
    pid = [os.getpid()]
    cpu = telemetry.ClientCpu(lambda: pid[0])
    t0, used0 = time.time(), time.process_time()
    assert cpu.read(t0, "p") == []  # the first reading is the baseline
    while time.process_time() < used0 + 0.3:  # burn ~0.3 s of this process's CPU
        pass
    t1, used1 = time.time(), time.process_time()
    rows = cpu.read(t1, "p")
    assert len(rows) == 1 and rows[0].source == "client" and rows[0].name == telemetry.CLIENT_CPU
    expected = 100.0 * (used1 - used0) / (t1 - t0)  # however busy this machine is: /proc counts 10 ms ticks
    assert abs(rows[0].value - expected) <= 5.0 + 100.0 * 0.03 / (t1 - t0) and rows[0].point_id == "p"
    pid[0] = os.getppid()  # another process: a new baseline, no sample across the two
    assert cpu.read(time.time(), "p") == []
    pid[0] = None
    assert cpu.read(time.time(), "p") == [] and procfs.cpu_seconds(2**22 + 7) is None


def test_the_windows_mean_cpu_and_the_page_calls_a_busy_client_out():
    samples = [TelemetrySample(100.0 + i, "client", telemetry.CLIENT_CPU, {}, v, POINT)
               for i, v in enumerate([10.0, 95.0, 97.0, 99.0, 20.0])]
    assert math.isclose(client_overhead.client_cpu_pct(samples, POINT, 100.5, 103.0), 97.0)
    assert math.isnan(client_overhead.client_cpu_pct(samples, "other", 100.0, 104.0))
    row = {"arm": "baseline", "workload": "chat", "load": "c=128", "server_ttft_n": 0, "client_cpu_pct": 97.0}
    note = steady_page.measuring_side_note([row])
    assert "At 1 point(s) the load generator used ≥ 90%" in note and "set the pace" in note
    assert steady_page.measuring_side_note([{**row, "client_cpu_pct": math.nan}]) == ""


def test_the_load_generators_cpu_at_waves_against_between_says_what_a_wave_cost_it():
    # 1 s ticks at 101..110: waves sent in (102, 103] and (107, 108], where the CPU reads 40% against 20% elsewhere
    cpu = {103: 40.0, 108: 40.0}
    samples = [TelemetrySample(100.0 + i, "client", telemetry.CLIENT_CPU, {}, cpu.get(100 + i, 20.0), POINT)
               for i in range(1, 11)]
    at, between, extra = client_overhead.client_cpu_at_waves(samples, POINT, 100.0, 110.0, np.array([102.5, 107.2]))
    assert (at, between) == (40.0, 20.0) and extra == pytest.approx(200.0)  # 20% of a 1 s tick
    two = client_overhead.client_cpu_at_waves(samples, POINT, 100.0, 110.0, np.array([102.2, 102.8, 107.2]))
    assert two[2] == pytest.approx((200.0 / 2 + 200.0) / 2)  # a tick with two waves shares its extra
    none = client_overhead.client_cpu_at_waves(samples, POINT, 100.0, 110.0, np.array([]))
    assert math.isnan(none[0]) and none[1] == 24.0 and math.isnan(none[2])
    assert all(math.isnan(x) for x in client_overhead.client_cpu_at_waves(samples, "other", 100.0, 110.0,
                                                                           np.array([102.5])))
    # uneven ticks: each covers the time since the tick before (the first: as long as the second); a send at a
    # tick's own time is in it, at the tick before's time is not
    uneven = [TelemetrySample(t, "client", telemetry.CLIENT_CPU, {}, v, POINT)
              for t, v in [(101.0, 60.0), (103.0, 20.0), (104.0, 50.0), (104.5, 20.0), (105.5, 40.0)]]
    at, between, extra = client_overhead.client_cpu_at_waves(uneven, POINT, 100.0, 106.0,
                                                              np.array([99.5, 104.0, 105.0]))
    assert (at, between) == (50.0, 20.0)  # 99.5 in the first tick's 2 s, 104.0 in (103, 104], 105.0 in (104.5, 105.5]
    assert extra == pytest.approx(((60 - 20) / 100 * 2000 + (50 - 20) / 100 * 1000 + (40 - 20) / 100 * 1000) / 3)
    every = client_overhead.client_cpu_at_waves(samples[:2], POINT, 100.0, 110.0, np.array([100.5, 101.5]))
    assert every[0] == 20.0 and math.isnan(every[1]) and math.isnan(every[2])  # nothing to hold the waves against
    lone = client_overhead.client_cpu_at_waves(samples[:1], POINT, 100.0, 110.0, np.array([100.5]))
    assert math.isnan(lone[0]) and lone[1] == 20.0 and math.isnan(lone[2])  # one tick: no span to place a wave in
    # the page: 64-request waves whose headers came 5 ms apart, the load generator 27 ms busier a wave
    row = {"arm": "baseline", "workload": "agent", "load": "c=64", "client_headers_p99_ms": 780.0,
           "steady_ttft_p99_ms": 1023.0, "in_waves": True, "headers_pace_ms": 5.0, "wave_size": 50.0,
           "client_headers_mean_ms": 155.0,
           "client_cpu_wave_pct": 26.5, "client_cpu_between_pct": 23.9, "client_wave_extra_ms": 27.4}
    note = steady_page.way_in_note([row])
    assert ("The load generator's CPU was 26% of a core in the seconds a wave was sent and 24% between them: its "
            "own work was about 0.5 ms a request of that spacing, so the rest was the server's side.") in note
    busy = steady_page.way_in_note([{**row, "client_wave_extra_ms": 200.0}])  # 4 ms of 5: no verdict for the server
    assert "about 4.0 ms a request of that spacing." in busy and "server's side" not in busy
    assert "load generator's CPU" not in steady_page.way_in_note([{**row, "client_wave_extra_ms": math.nan}])


def test_time_per_token_is_sglangs_itl_counters_beside_the_requests_streamed_wholly_inside_the_window():
    # ticks 100..110: each second SGLang counts 100 tokens after the first, 1.0 s of gaps (10 ms each)
    samples = []
    for i in range(11):
        labels = {"model_name": "qwen3-4b"}
        samples += [TelemetrySample(100.0 + i, "metrics", f"{client_overhead.ITL_HISTOGRAM}_sum", labels, 1.0 * i,
                                    POINT),
                    TelemetrySample(100.0 + i, "metrics", f"{client_overhead.ITL_HISTOGRAM}_count", labels,
                                    100.0 * i, POINT)]
    first = np.array([101.0, 102.5, 103.0, 108.0])
    end = np.array([103.0, 105.0, 105.6, 109.5])  # the first starts before the window, the last ends after it
    tokens = np.array([201, 201, 261, 51])
    server, client = client_overhead.itl_means(samples, POINT, 102.2, 108.9, first, end, tokens)
    assert server == pytest.approx(10.0)
    # the window snaps to ticks 102 and 108: requests 2 and 3 streamed wholly inside; 1 began before, 4 ended after
    assert client == pytest.approx(1000 * (2.5 + 2.6) / (200 + 260))
    assert client_overhead.itl_means([], POINT, 102.2, 108.9, first, end, tokens) == (pytest.approx(math.nan,
                                                                                                     nan_ok=True),) * 2


def test_the_running_gauge_is_summed_over_workers_per_tick_and_averaged_over_the_windows_ticks():
    def gauge(t, worker, value, point="p"):
        return TelemetrySample(t, "metrics", "sglang:num_running_reqs", {"worker": worker}, value, point)
    samples = [gauge(1.0, "w0", 30), gauge(1.0, "w1", 34), gauge(2.0, "w0", 32), gauge(2.0, "w1", 32),
               gauge(3.0, "w0", 10), gauge(2.0, "w0", 99, point="other")]
    assert client_overhead.running_mean(samples, "p", 0.5, 2.5) == 64.0  # ticks 1 and 2: 64 each, the rest outside
    assert math.isnan(client_overhead.running_mean(samples, "p", 3.5, 9.0))
