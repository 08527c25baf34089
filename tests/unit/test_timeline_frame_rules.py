"""The telemetry frame behind the dashboard's timelines (llmhost.report.timeline) on hand-made samples: minutes from
the run's start, the arm of the point each sample was taken in ('' between points), the labels a sample lacks as '',
the KV series named by worker and DP rank, and the hit rate of a server that never registered its cached-tokens
counter or has seen a single prompt token."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from llmhost.bench import points
from llmhost.bench.records import TelemetrySample
from llmhost.report import timeline


def context(samples: list[TelemetrySample], t0: float):
    point = points.make_point("fast", "chat", "concurrency", 8, None, 64, 1)
    run = SimpleNamespace(points=(), plan=(point,), telemetry=tuple(samples), t0=t0)
    return SimpleNamespace(run=run), point.point_id


def test_a_sample_is_placed_in_minutes_since_the_run_started_under_the_arm_of_its_point():
    ctx, pid = context([], 0.0)
    samples = [TelemetrySample(1_000.0 + 90.0, "metrics", timeline.KV_USED, {"worker": "worker1", "dp_rank": "2"},
                               0.5, pid),
               TelemetrySample(1_000.0 + 30.0, "gpu", "gpu_power_w", {"gpu": "3"}, 400.0, None),
               TelemetrySample(1_000.0 + 60.0, "metrics", timeline.KV_USED, {}, 0.25, "not-a-point")]
    ctx.run = SimpleNamespace(**{**vars(ctx.run), "telemetry": tuple(samples), "t0": 1_000.0})
    df = timeline.frame(ctx, "metrics")
    assert df["minute"].tolist() == pytest.approx([1.5, 1.0])
    assert df["arm"].tolist() == ["fast", ""]  # a sample of no known point is between points
    assert df["worker"].tolist() == ["worker1", ""] and df["rank"].tolist() == ["2", ""]
    assert df["gpu"].tolist() == ["", ""]
    gpu = timeline.frame(ctx, "gpu")
    assert gpu["gpu"].tolist() == ["3"] and gpu["arm"].tolist() == [""] and gpu["worker"].tolist() == [""]
    assert gpu["minute"].tolist() == pytest.approx([0.5])


def test_kv_series_are_named_by_worker_and_dp_rank():
    rows = [(1.0, timeline.KV_USED, 0.1, "a", "worker0", "1"), (1.0, timeline.KV_USED, 0.3, "a", "", "2"),
            (1.0, timeline.KV_USED, 0.5, "a", "worker1", "")]
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm", "worker", "rank"]).assign(minute=0.0, gpu="")
    used = timeline.kv_used(df).set_index("series")["value"]
    assert used.to_dict() == pytest.approx({"": 30.0, "worker0 dp1": 10.0, "dp2": 30.0, "worker1": 50.0})


def _rate(rows: list[tuple]) -> list[tuple]:
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm", "worker"]).assign(minute=0.0, rank="", gpu="")
    rate = timeline.cumulative_hit_rate(df)
    return list(zip(rate["t"], rate["series"], rate["value"]))


def test_a_server_that_never_registered_its_cached_counter_reads_zero_and_one_prompt_token_counts():
    p, c = timeline.PROMPT, timeline.CACHED
    assert _rate([(1.0, p, 10.0, "a", ""), (2.0, p, 20.0, "a", "")]) == [(1.0, "", 0.0), (2.0, "", 0.0)]
    assert _rate([(1.0, p, 1.0, "a", ""), (1.0, c, 1.0, "a", "")]) == [(1.0, "", 100.0)]
    assert _rate([(1.0, c, 5.0, "a", "")]) == []  # no prompt counter at all: nothing to divide by
