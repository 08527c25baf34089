"""The prefix-cache hit rate as SGLang 0.5.17 exports it and as the dashboard plots it.

SGLang's sglang:cache_hit_rate gauge is the LAST PREFILL BATCH's rate and reads 0.0 once a decode step ran (the
captured /metrics after load: tests/captures/metrics_after.txt), so the dashboard takes cached_tokens_total /
prompt_tokens_total instead; the stand-in must keep that semantics, or a chart built on the gauge looks right on
CI and sits at zero on a real run."""
from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.bench import telemetry
from llmhost.report import timeline
from standin.harness import launch


def _scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url + "/metrics", timeout=20) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _chat(url: str, content: str, max_tokens: int) -> dict:
    body = json.dumps({"model": "qwen3-4b", "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["usage"]


def _families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


def test_the_standin_gauge_is_the_last_prefill_batch_and_zero_after_decoding(free_port, captures):
    fresh = captures.joinpath("GET_metrics.txt").read_bytes().decode().split("\r\n\r\n", 1)[1]
    with launch(free_port, "--served-model-name", "qwen3-4b", "--enable-metrics", "--enable-cache-report") as srv:
        before = _scrape(srv.url)
        assert set(before) == _families(fresh)  # cached_tokens_total, the ITL histogram: only after traffic
        prompt = " ".join(f"word{i % 97} token{i % 89}" for i in range(300))
        _chat(srv.url, prompt, max_tokens=1)
        repeat = _chat(srv.url, prompt, max_tokens=1)  # prefill only: no decode step after it
        gauge = _scrape(srv.url)["sglang:cache_hit_rate"][0].value
        assert gauge == pytest.approx(repeat["prompt_tokens_details"]["cached_tokens"] / repeat["prompt_tokens"])
        assert gauge > 0.9
        _chat(srv.url, prompt, max_tokens=8)  # a hit again, then decode steps
        after = _scrape(srv.url)
    assert after["sglang:cache_hit_rate"][0].value == 0.0
    cached = sum(s.value for s in after["sglang:cached_tokens"])  # prometheus_client drops the _total suffix
    prompt_total = sum(s.value for s in after["sglang:prompt_tokens"] if s.name.endswith("_total"))
    assert 0.5 < cached / prompt_total < 0.7  # 2 of 3 prompts served from the cache
    assert _families(captures.joinpath("metrics_after.txt").read_text()) == set(after)


def test_the_chart_reads_the_captured_servers_hit_rate_from_its_counters_not_its_gauge(captures):
    import pandas as pd
    rows = telemetry.metric_rows(captures.joinpath("metrics_after.txt").read_text(), 100.0, "p1")
    kept = {r.name for r in rows}
    assert {"sglang:cached_tokens_total", "sglang:prompt_tokens_total"} <= kept  # the sampler keeps both
    df = pd.DataFrame([(r.t, r.t / 60, r.name, r.value, "baseline", "") for r in rows],
                      columns=["t", "minute", "name", "value", "arm", "worker"])
    assert df[df["name"] == "sglang:cache_hit_rate"]["value"].tolist() == [0.0]
    rate = timeline.cumulative_hit_rate(df)
    # captured: cached 4,886 of 9,431 + 192 prompt tokens (both label sets) = 50.77%
    assert rate["value"].tolist() == [pytest.approx(100 * 4886 / 9623)]


def test_each_arms_hit_rate_starts_afresh_with_its_server_and_waits_for_the_first_prompt():
    import pandas as pd
    samples = [  # t, name, value, arm: two label sets of prompt tokens are summed
        (1.0, "sglang:prompt_tokens_total", 0.0, "a"),
        (2.0, "sglang:prompt_tokens_total", 100.0, "a"), (2.0, "sglang:prompt_tokens_total", 100.0, "a"),
        (2.0, "sglang:cached_tokens_total", 50.0, "a"),
        (3.0, "sglang:prompt_tokens_total", 400.0, "a"), (3.0, "sglang:cached_tokens_total", 300.0, "a"),
        (9.0, "sglang:prompt_tokens_total", 1000.0, "b"),  # b's fresh server: no cached_tokens_total yet
    ]
    df = pd.DataFrame([(t, t / 60, n, v, a, "") for t, n, v, a in samples],
                      columns=["t", "minute", "name", "value", "arm", "worker"])
    rate = timeline.cumulative_hit_rate(df)
    assert list(zip(rate["t"], rate["arm"], rate["value"])) == [(2.0, "a", 25.0), (3.0, "a", 75.0), (9.0, "b", 0.0)]
