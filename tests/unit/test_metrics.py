"""metrics.parse on the real SGLang 0.5.17 /metrics captures: names as exposed, labels kept, histograms usable."""
from __future__ import annotations

import math

import pytest

from llmhost.serve import metrics


def body(path) -> str:
    text = path.read_bytes().decode()
    return text.split("\r\n\r\n", 1)[1] if text.startswith("HTTP/") else text


@pytest.fixture
def idle(captures):
    return metrics.parse(body(captures / "GET_metrics.txt"))


@pytest.fixture
def after(captures):
    return metrics.parse(body(captures / "metrics_after.txt"))


def test_every_sample_line_of_the_capture_becomes_one_sample(captures, after):
    lines = [ln for ln in body(captures / "metrics_after.txt").splitlines() if ln and not ln.startswith("#")]
    assert len(after) == len(lines)


def test_kv_pool_size_is_read_with_its_scheduler_labels(idle):
    (sample,) = metrics.select(idle, "sglang:max_total_num_tokens")
    assert sample.value == 859665.0
    assert sample.labels == {"engine_type": "unified", "model_name": "qwen3-4b", "moe_ep_rank": "0",
                             "pp_rank": "0", "tp_rank": "0"}
    assert metrics.value(idle, "sglang:max_total_num_tokens", tp_rank="0") == 859665.0


def test_counters_keep_their_total_suffix_and_split_by_label(after):
    by_stream = {s.labels["is_streaming"]: s.value for s in metrics.select(after, "sglang:prompt_tokens_total")}
    assert by_stream == {"false": 9431.0, "true": 192.0}
    assert metrics.total(after, "sglang:prompt_tokens_total") == 9623.0
    assert metrics.value(after, "sglang:prompt_tokens_total", is_streaming="true") == 192.0


def test_value_refuses_to_guess_between_several_series(after):
    with pytest.raises(ValueError, match="is_streaming"):
        metrics.value(after, "sglang:prompt_tokens_total")


def test_absent_metric_is_none_not_zero(after):
    assert metrics.value(after, "sglang:no_such_metric") is None
    assert metrics.total(after, "sglang:no_such_metric") is None


def test_histogram_buckets_are_cumulative_and_end_at_the_count(after):
    buckets = metrics.buckets(after, "sglang:time_to_first_token_seconds")
    bounds = [b for b, _ in buckets]
    counts = [c for _, c in buckets]
    assert bounds == sorted(bounds) and math.isinf(bounds[-1])
    assert counts == sorted(counts)
    assert counts[-1] == metrics.total(after, "sglang:time_to_first_token_seconds_count") == 12.0


def test_delta_between_two_scrapes_counts_the_requests_in_between(idle, after):
    assert metrics.delta(idle, after, "sglang:num_requests_total") == 11.0


def test_text_that_is_not_exposition_format_is_a_one_line_error():
    with pytest.raises(metrics.MetricsError) as err:
        metrics.parse('sglang:x{a="1" 3\n')
    assert "\n" not in str(err.value)
