"""The settings table: SGLang's closed choices match its captured --help, and every config.env key has a check."""
from __future__ import annotations

import re

import pytest

from llmhost import config, settings


@pytest.mark.parametrize("flag, choices", [("--load-format", settings.LOAD_FORMATS),
                                           ("--tool-call-parser", settings.TOOL_CALL_PARSERS),
                                           ("--reasoning-parser", settings.REASONING_PARSERS)])
def test_closed_choices_are_sglang_0_5_17s_own(captures, flag, choices):
    found = re.search(rf"^  {flag} \{{([^}}]+)\}}", (captures / "launch_server_help.txt").read_text(), re.M)
    assert found and tuple(found.group(1).split(",")) == choices


def test_every_key_of_config_env_has_a_check_and_a_config_field():
    keys = list(config.parse_lines(config.DEFAULT_FILE.read_text(), {}))
    assert keys == list(settings.CHECKS)
    fields = [f.name for f in config.dataclasses.fields(config.Config) if not f.name.startswith("_")]
    assert fields == [k.lower() for k in keys]


@pytest.mark.parametrize("key, good, bad", [
    ("PORT", "1", "0"), ("PORT", "65535", "65536"), ("READY_TIMEOUT_S", "1", "0"),
    ("TOKENIZER_WORKER_NUM", "auto", "0"), ("CHUNKED_PREFILL_SIZE", "-1", "0"), ("HOST", "::1", "a b"),
    ("SERVER_ENV", "A=1 B='x y'", "A"), ("BENCH_USER_ARMS", "c4k=--chunked-prefill-size 4096;", "x y=--a"),
    ("MODEL_ID", "Qwen/Qwen3-4B", "Qwen/Qwen3 4B"), ("SGLANG_VERSION", "0.5.17rc1", "latest"),
    ("GPU_HOURLY_USD", "3.50", "abc"), ("GPU_HOURLY_USD", "", "-1"), ("GPU_HOURLY_USD", "0.01", "0"),
    ("GPU_HOURLY_USD", ".5", "nan"), ("GPU_HOURLY_USD", "12", "1e3"),
    ("TP_SIZE", "1", "0"), ("DP_SIZE", "2", "two"), ("NNODES", "2", "0"), ("GPUS", "0,0", "0 1"), ("GPUS", "0,1", "0,"),
    ("GPUS", "3", "gpu0"), ("DIST_INIT_ADDR", "", "10.0.0.1"), ("DIST_INIT_ADDR", "10.0.0.1:25000", "h:70000"),
    ("DIST_INIT_ADDR", "[fd00::1]:25000", "a b:1"), ("ROUTER", "on", "yes"), ("ROUTER_POLICY", "cache_aware", "manual"),
    ("WORKER_URLS", "http://10.0.0.2:30000 http://[::1]:30001", "10.0.0.2:30000"), ("ROUTER_METRICS_PORT", "29000", "0"),
])
def test_checks_draw_the_line_where_the_setting_stops_working(key, good, bad):
    settings.CHECKS[key](good)
    with pytest.raises(ValueError):
        settings.CHECKS[key](bad)


def test_a_gpu_price_is_a_number_or_nothing_and_a_bad_one_is_one_line():
    assert config.load({"GPU_HOURLY_USD": "3.50"}).gpu_hourly_usd == 3.5
    assert config.load({"GPU_HOURLY_USD": ""}).gpu_hourly_usd is None  # empty: no cost shown
    for bad in ("abc", "-1", "0"):
        with pytest.raises(config.ConfigError, match=rf"^environment: GPU_HOURLY_USD={bad} must be empty \(costs "
                                                     r"not shown\) or a positive price in US dollars per hour"):
            config.load({"GPU_HOURLY_USD": bad})
