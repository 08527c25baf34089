"""How SGLang batched the arrivals' prefills over a window (llmhost.report.client_overhead.prefill_batching), read
from its forward-pass counter and its queue-time histogram, and the rate budget table's cell for it."""
from __future__ import annotations

import math

import pytest

from llmhost.bench import telemetry
from llmhost.bench.records import TelemetrySample
from llmhost.report import client_overhead, rate_budget_page
from test_ttft_parts import POINT, QUEUED, SCHED


def _passes(per_tick: dict[str, list[float]]) -> list[TelemetrySample]:
    """Cumulative cuda_graph_passes_total at t = 100, 101, ... per mode; a mode's None: not in that scrape yet."""
    rows = []
    for mode, values in per_tick.items():
        rows += [TelemetrySample(100.0 + i, "metrics", client_overhead.PASSES, {**SCHED, "mode": mode}, v, POINT)
                 for i, v in enumerate(values) if v is not None]
    return rows


# QUEUED: 4 requests left the queue by t=100, then 10 a tick: 30 in the window (100, 103]
GRAPHED = _passes({"prefill_cuda_graph": [2, 4, 6, 8], "prefill_none": [None, 1, 1, 2],  # 6 + 2 prefill batches
                   "decode_cuda_graph": [None, 50, 95, 140]})  # decode passes are not prefills, even a new mode


def test_requests_a_prefill_batch_are_the_queue_leavers_over_the_prefill_batches():
    each, rate = client_overhead.prefill_batching(QUEUED + GRAPHED, POINT, 100.5, 103.0)
    assert each == pytest.approx(30 / 8) and rate == pytest.approx(8 / 3)


def test_a_whole_window_in_one_prefill_batch_is_every_request_in_it():
    one = _passes({"prefill_cuda_graph": [4, 5, 5, 5]})
    assert client_overhead.prefill_batching(QUEUED + one, POINT, 100.5, 103.0) == (30.0, pytest.approx(1 / 3))


def test_one_batch_a_request_reads_one():
    single = _passes({"prefill_cuda_graph": [4, 14, 24, 34]})
    assert client_overhead.prefill_batching(QUEUED + single, POINT, 100.5, 103.0) == (1.0, 10.0)


@pytest.mark.parametrize("samples", [
    QUEUED,  # a run recorded before the counter was kept
    GRAPHED,  # no queue-time histogram
    QUEUED + _passes({"prefill_cuda_graph": [4, 4, 4, 4]}),  # no prefill in the window
    QUEUED + _passes({"prefill_cuda_graph": [None, None, None, 4]}),  # the window's first tick lacks the counter
])
def test_without_both_counts_over_the_window_it_is_nan(samples):
    assert all(math.isnan(v) for v in client_overhead.prefill_batching(samples, POINT, 100.5, 103.0))


def test_the_sampler_keeps_the_counter_with_its_mode():
    assert client_overhead.PASSES in telemetry.METRICS_KEPT
    line = ('sglang:cuda_graph_passes_total{engine_type="unified",mode="prefill_none",model_name="qwen3-4b",'
            'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0\n')
    (sample,) = telemetry.metric_rows(line, 5.0, POINT)
    assert sample.labels["mode"] == "prefill_none" and sample.value == 3.0


def test_the_cell_says_requests_each_and_batches_a_second_or_a_dash_for_older_runs():
    assert rate_budget_page._prefills_cell({"prefill_requests_each": 9.44, "prefills_per_s": 2.6}) == "9.4, 2.6"
    assert rate_budget_page._prefills_cell({}) == "–"
    assert rate_budget_page._prefills_cell({"prefill_requests_each": math.nan, "prefills_per_s": 2.0}) == "–"
