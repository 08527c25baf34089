"""How /metrics series are combined, on a small hand-written exposition with two tensor-parallel ranks: counters and
histogram buckets add up over the series that match, labels narrow with all of them, a counter that did not move
has a delta of 0 and one that fell has none."""
from __future__ import annotations

import pytest

from llmhost.serve import metrics

SCRAPE = """\
# HELP sglang:prompt_tokens_total Prompt tokens.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{tp_rank="0",is_streaming="true"} 100.0
sglang:prompt_tokens_total{tp_rank="1",is_streaming="true"} 40.0
sglang:prompt_tokens_total{tp_rank="1",is_streaming="false"} 7.0
# HELP sglang:time_to_first_token_seconds TTFT.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{tp_rank="0",le="0.1"} 3.0
sglang:time_to_first_token_seconds_bucket{tp_rank="0",le="1.0"} 5.0
sglang:time_to_first_token_seconds_bucket{tp_rank="0",le="+Inf"} 6.0
sglang:time_to_first_token_seconds_sum{tp_rank="0"} 2.5
sglang:time_to_first_token_seconds_count{tp_rank="0"} 6.0
sglang:time_to_first_token_seconds_bucket{tp_rank="1",le="0.1"} 1.0
sglang:time_to_first_token_seconds_bucket{tp_rank="1",le="1.0"} 4.0
sglang:time_to_first_token_seconds_bucket{tp_rank="1",le="+Inf"} 4.0
sglang:time_to_first_token_seconds_sum{tp_rank="1"} 1.5
sglang:time_to_first_token_seconds_count{tp_rank="1"} 4.0
"""


def _scrape(prompt_rank0: float) -> list[metrics.Sample]:
    return metrics.parse(SCRAPE.replace('is_streaming="true"} 100.0', f'is_streaming="true"}} {prompt_rank0}'))


def test_a_counter_total_adds_every_matching_series_and_labels_narrow_with_all_of_them():
    samples = _scrape(100.0)
    assert metrics.total(samples, "sglang:prompt_tokens_total") == 147.0
    assert metrics.total(samples, "sglang:prompt_tokens_total", tp_rank="1") == 47.0
    assert metrics.total(samples, "sglang:prompt_tokens_total", tp_rank="1", is_streaming="true") == 40.0
    assert metrics.value(samples, "sglang:prompt_tokens_total", tp_rank="0", is_streaming="true") == 100.0


def test_value_will_not_pick_one_of_two_matching_series():
    with pytest.raises(ValueError, match="tp_rank"):
        metrics.value(_scrape(100.0), "sglang:prompt_tokens_total", is_streaming="true")


def test_histogram_buckets_add_the_ranks_bound_by_bound_in_order():
    assert metrics.buckets(_scrape(100.0), "sglang:time_to_first_token_seconds") == [
        (0.1, 4.0), (1.0, 9.0), (float("inf"), 10.0)]
    assert metrics.buckets(_scrape(100.0), "sglang:time_to_first_token_seconds", tp_rank="1") == [
        (0.1, 1.0), (1.0, 4.0), (float("inf"), 4.0)]


def test_counter_delta_is_zero_when_unchanged_and_none_when_it_fell_or_is_missing():
    before, after = _scrape(100.0), _scrape(130.0)
    assert metrics.delta(before, after, "sglang:prompt_tokens_total") == 30.0
    assert metrics.delta(before, before, "sglang:prompt_tokens_total") == 0.0
    assert metrics.delta(after, before, "sglang:prompt_tokens_total") is None  # fell: a restart in between
    assert metrics.delta([], after, "sglang:prompt_tokens_total") is None
