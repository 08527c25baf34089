"""SGLang's own TTFT split by its scheduler's per-stage histograms (llmhost.report.client_overhead.ttft_parts) and how
the dashboard shows the split (llmhost.report.steady_page)."""
from __future__ import annotations

import math

import pytest

from llmhost.bench import telemetry
from llmhost.bench.records import TelemetrySample
from llmhost.report import client_overhead, steady_page

POINT = "baseline.agent.concurrency.c64.r1"
SCHED = {"engine_type": "unified", "model_name": "qwen3-4b", "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}


def _ticks(name: str, labels: dict[str, str], per_tick: list[tuple[float, float]]) -> list[TelemetrySample]:
    """Cumulative _sum/_count samples at t = 100, 101, ...: per tick (seconds observed, requests observed)."""
    rows, total, count = [], 0.0, 0.0
    for i, (seconds, n) in enumerate(per_tick):
        total, count = total + seconds, count + n
        rows += [TelemetrySample(100.0 + i, "metrics", f"{name}_sum", labels, total, POINT),
                 TelemetrySample(100.0 + i, "metrics", f"{name}_count", labels, count, POINT)]
    return rows


def _stage(stage: str, per_tick: list[tuple[float, float]]) -> list[TelemetrySample]:
    return _ticks(client_overhead.PER_STAGE, {**SCHED, "stage": stage}, per_tick)


# four ticks; the window (100.5, 103.0] takes the deltas between the ticks at 100 and 103
INTAKE = _stage("request_process", [(0.0, 4), (0.002, 10), (0.002, 10), (0.002, 10)])  # 0.2 ms each
PREFILL = _stage("prefill_forward", [(10.0, 4), (0.8, 10), (0.8, 10), (0.8, 10)])  # 80 ms each; 10 s of warm-up before
QUEUED = _ticks(client_overhead.QUEUE_HISTOGRAM, SCHED, [(0.0, 4), (0.5, 10), (0.3, 10), (0.4, 10)])  # 40 ms mean


def test_each_stage_is_read_from_its_own_label_set():
    both = INTAKE + PREFILL
    assert client_overhead.window_delta(both, POINT, client_overhead.PER_STAGE, 100.5, 103.0,
                                        {"stage": "prefill_forward"}) == (pytest.approx(2.4), 30.0, 100.0, 103.0)
    assert client_overhead.window_delta(both, POINT, client_overhead.PER_STAGE, 100.5, 103.0,
                                        {"stage": "request_process"})[:2] == (pytest.approx(0.006), 30.0)
    # unfiltered, the two stages would be summed like two workers' series
    assert client_overhead.window_delta(both, POINT, client_overhead.PER_STAGE, 100.5, 103.0)[1] == 60.0
    assert client_overhead.window_delta(both, POINT, client_overhead.PER_STAGE, 100.5, 103.0,
                                        {"stage": "chunked_prefill"}) is None


def test_the_parts_are_window_means_in_ms():
    parts = client_overhead.ttft_parts(INTAKE + PREFILL + QUEUED, POINT, 100.5, 103.0)
    assert parts == {"intake": pytest.approx(0.2), "queued": pytest.approx(40.0), "prefill": pytest.approx(80.0)}
    assert list(parts) == ["intake", "queued", "prefill"]  # the order a request passes them


def test_a_part_without_observations_in_the_window_is_nan():
    idle = _stage("prefill_forward", [(10.0, 4), (0.0, 0), (0.0, 0), (0.0, 0)])  # no prefill ended in the window
    parts = client_overhead.ttft_parts(INTAKE + idle, POINT, 100.5, 103.0)
    assert parts["intake"] == pytest.approx(0.2) and math.isnan(parts["prefill"]) and math.isnan(parts["queued"])
    assert all(math.isnan(v) for v in client_overhead.ttft_parts([], POINT, 100.5, 103.0).values())


def test_the_sampler_keeps_the_histograms_the_split_reads():
    kept = set(telemetry.METRICS_KEPT)
    for _, histogram, _ in client_overhead.TTFT_PARTS:
        assert {f"{histogram}_sum", f"{histogram}_count"} <= kept
    # a scrape's stage label survives into the samples, with the worker's added behind the router
    line = ('sglang:per_stage_req_latency_seconds_sum{engine_type="unified",model_name="qwen3-4b",moe_ep_rank="0",'
            'pp_rank="0",stage="prefill_forward",tp_rank="0"} 12.5\n')
    (sample,) = telemetry.metric_rows(line, 5.0, POINT, worker="worker0")
    assert sample.labels["stage"] == "prefill_forward" and sample.labels["worker"] == "worker0"
    assert sample.value == 12.5


ROW = {"arm": "baseline", "workload": "agent", "load": "c=64", "server_ttft_mean_ms": 150.0,
       "server_intake_ms": 0.5, "server_queued_ms": 60.0, "server_prefill_ms": 80.0}


def test_the_rest_is_what_the_scheduler_did_not_see():
    assert steady_page.ttft_split(ROW) == {"intake": 0.5, "queued": 60.0, "prefill": 80.0, "rest": 9.5}
    assert steady_page._ttft_parts_cell(ROW) == "0.5 / 60.0 / 80.0 / 9.5"
    for missing in ("server_queued_ms", "server_ttft_mean_ms"):
        older = {k: v for k, v in ROW.items() if k != missing}  # a run summarised before the split
        assert steady_page.ttft_split(older) is None and steady_page._ttft_parts_cell(older) == "–"
    assert steady_page.ttft_split({**ROW, "server_prefill_ms": math.nan}) is None


def test_the_note_splits_the_longest_ttft_and_names_its_largest_part():
    short = {**ROW, "arm": "article", "server_ttft_mean_ms": 100.0, "server_queued_ms": 5.0}
    note = steady_page.ttft_parts_note([short, ROW])
    assert "Longest at baseline · agent · c=64: 150.0 ms = intake 0.5 + queued 60.0 + prefill 80.0 + rest 9.5 ms" \
        in note
    assert "The largest part, prefill, is the prefill itself" in note
    queued = steady_page.ttft_parts_note([{**ROW, "server_queued_ms": 120.0, "server_ttft_mean_ms": 210.0}])
    assert "The largest part, queued, is the request waiting in the scheduler's queue" in queued
    rest = steady_page.ttft_parts_note([{**ROW, "server_ttft_mean_ms": 400.0}])  # rest 259.5
    assert "The largest part, rest, is tokenization and the trips between SGLang's processes" in rest
    assert steady_page.ttft_parts_note([{k: v for k, v in ROW.items() if k != "server_intake_ms"}]) == ""
    assert steady_page.ttft_parts_note([]) == ""


def test_one_request_in_the_window_is_a_mean_of_one():
    one = _stage("prefill_forward", [(10.0, 4), (0.09, 1), (0.0, 0), (0.0, 0)])
    assert client_overhead.ttft_parts(one, POINT, 100.5, 103.0)["prefill"] == pytest.approx(90.0)
