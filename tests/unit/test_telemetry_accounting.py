"""SGLang's gauges and counters read by the rule each reader documents: a server's DP ranks each export their own
scheduler gauges (label dp_rank), and a counter only grows while its server lives."""
from __future__ import annotations

from llmhost.serve import metrics, status


def _scheduler(name: str, value: float, **ranks: str) -> str:
    labels = {"engine_type": "unified", "model_name": "qwen3-4b", "moe_ep_rank": "0", "pp_rank": "0",
              "tp_rank": "0", **ranks}
    pairs = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    return f"{name}{{{pairs}}} {value}"


def _exposition(per_rank: dict[str, dict[str, float]], **ranks_of: dict[str, str]) -> str:
    """/metrics text of the scheduler gauges {name: {dp_rank: value}}; ranks_of[dp_rank]: that rank's other labels."""
    lines = []
    for name, values in per_rank.items():
        lines += [f"# HELP {name} gauge", f"# TYPE {name} gauge"]
        lines += [_scheduler(name, v, dp_rank=dp, **ranks_of.get(f"dp{dp}", {})) for dp, v in values.items()]
    return "\n".join(lines) + "\n"


GAUGES = {"sglang:max_total_num_tokens": {"0": 400000.0, "1": 400000.0},
          "sglang:num_running_reqs": {"0": 3.0, "1": 4.0}, "sglang:num_queue_reqs": {"0": 1.0, "1": 2.0},
          "sglang:token_usage": {"0": 0.2, "1": 0.6}}


def test_status_counts_the_requests_and_pools_of_every_dp_rank():
    lines = status._metric_lines(_exposition(GAUGES))
    assert lines[:3] == ["KV pool      : 800,000 tokens", "requests     : 7 running, 3 queued",
                         "token usage  : 40.0% of the KV pool"]


def test_status_counts_each_dp_rank_once_whatever_its_tensor_rank():
    # DP attention numbers the ranks across the DP groups (dp_rank 1 is tp_rank 1); tensor ranks of one DP rank
    # (metrics from every scheduler) report the same and are not added
    text = _exposition(GAUGES, dp1={"tp_rank": "1"})
    text += _scheduler("sglang:num_running_reqs", 3.0, dp_rank="0", tp_rank="2") + "\n"
    assert status._metric_lines(text)[:2] == ["KV pool      : 800,000 tokens", "requests     : 7 running, 3 queued"]


def test_status_of_one_server_reads_its_captured_gauges(captures):
    lines = status._metric_lines(captures.joinpath("metrics_after.txt").read_text())
    assert lines[:3] == ["KV pool      : 859,665 tokens", "requests     : 0 running, 0 queued",
                         "token usage  : 0.0% of the KV pool"]


def _counter(value: float) -> list[metrics.Sample]:
    return metrics.parse(f"# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total {value}\n")


def test_a_counter_that_fell_between_two_scrapes_has_no_known_increase():
    assert metrics.delta(_counter(9000.0), _counter(9623.0), "sglang:prompt_tokens_total") == 623.0
    assert metrics.delta(_counter(9623.0), _counter(192.0), "sglang:prompt_tokens_total") is None  # restarted
