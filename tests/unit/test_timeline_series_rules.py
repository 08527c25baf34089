"""Telemetry-over-time series on hand-made samples: lines break only at a sampling pause longer than GAP_S (scaled
by the thinning step), a worker's missed scrapes are carried for FILL_TICKS ticks and no longer, a worker that has
not registered its cached-tokens counter reads 0%, and samples between points draw no per-worker lines."""
from __future__ import annotations

import pandas as pd
import pytest

from llmhost.report import timeline
from llmhost.report.figures import MAX_POINTS


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm", "worker", "rank"])
    return df.assign(minute=df["t"] / 60.0, gpu="")


def test_a_line_breaks_at_a_pause_longer_than_gap_s_but_not_at_one_of_exactly_gap_s():
    sub = pd.DataFrame({"t": [0.0, 5.0, 11.0, 12.0], "minute": [0.0, 5.0, 11.0, 12.0], "value": [1.0, 2.0, 3.0, 4.0]})
    assert timeline._trace_xy(sub) == ([0.0, 5.0, None, 11.0, 12.0], [1.0, 2.0, None, 3.0, 4.0])


def test_a_thinned_line_keeps_every_step_th_sample_and_breaks_only_beyond_the_scaled_gap():
    """MAX_POINTS + 1 samples 3 s apart: every 2nd is kept (6 s apart, under 2 x GAP_S: no break); one 20 s pause."""
    t = [3.0 * i for i in range(MAX_POINTS + 1)]
    t = t[:100] + [x + 20.0 for x in t[100:]]  # a 23 s step between samples 99 and 100
    sub = pd.DataFrame({"t": t, "minute": t, "value": [0.0] * len(t)})
    x, _ = timeline._trace_xy(sub)
    assert x.count(None) == 1 and len(x) == (MAX_POINTS + 2) // 2 + 1
    assert x[x.index(None) - 1] == 3.0 * 98 and x[x.index(None) + 1] == 3.0 * 100 + 20.0


def test_a_workers_missed_scrapes_are_carried_for_fill_ticks_ticks_and_no_longer():
    """worker1 scraped at t=1 (cached 100 of 100 prompt tokens), then missed t=2..6; worker0 had 0 of 100 each tick.
    t=2..4 carry worker1's last counts (100 of 200 = 50%); from t=5 it is left out (0 of 100)."""
    c, p = timeline.CACHED, timeline.PROMPT
    rows = [(t, n, v, "a", "worker0", "") for t in range(1, 7) for n, v in ((c, 0.0), (p, 100.0))]
    rows += [(1, c, 100.0, "a", "worker1", ""), (1, p, 100.0, "a", "worker1", "")]
    rate = timeline.cumulative_hit_rate(_frame(rows))
    summed = rate[rate["series"] == ""]
    assert list(zip(summed["t"], summed["value"])) == [(1, 50.0), (2, 50.0), (3, 50.0), (4, 50.0), (5, 0.0),
                                                       (6, 0.0)]
    assert timeline.FILL_TICKS == 3


def test_a_worker_without_its_cached_tokens_counter_yet_reads_zero_percent():
    c, p = timeline.CACHED, timeline.PROMPT
    rows = [(1, c, 30.0, "a", "worker0", ""), (1, p, 100.0, "a", "worker0", ""), (1, p, 200.0, "a", "worker1", "")]
    rate = timeline.cumulative_hit_rate(_frame(rows)).set_index("series")["value"]
    assert rate.to_dict() == pytest.approx({"": 10.0, "worker0": 30.0, "worker1": 0.0})  # 30 of 300 over both


def test_samples_between_points_draw_the_summed_line_only():
    rows = [(1, timeline.KV_USED, 0.2, "", "worker0", ""), (1, timeline.KV_USED, 0.4, "", "worker1", ""),
            (2, timeline.KV_USED, 0.5, "a", "worker0", ""), (2, timeline.KV_USED, 0.7, "a", "worker1", "")]
    used = timeline.kv_used(_frame(rows)).set_index(["arm", "series"])["value"]
    assert used.to_dict() == pytest.approx({("", ""): 30.0, ("a", ""): 60.0, ("a", "worker0"): 50.0,
                                            ("a", "worker1"): 70.0})
