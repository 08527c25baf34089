"""A decode step's byte floor on worked examples: KV bytes per token at each KV cache dtype (auto: the model's own
element size; every fp8 format one byte), and which steady-state rows get a floor at all (closed-loop points with a
steady repeat and a measured context), with their bytes and milliseconds at the H200's 4.8 TB/s."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from llmhost.bench.model_shape import ModelShape
from llmhost.report import decode_bound

QWEN3_4B = ModelShape(num_layers=36, num_kv_heads=8, head_dim=128, dtype_bytes=2, weight_bytes=8_044_544_000,
                      weight_bytes_fp8=4_411_228_160)
ROW = {"arm": "baseline", "workload": "chat", "pattern": "concurrency", "load": "c=8", "concurrency": 8,
       "repeats_steady": 3, "prompt_tokens_mean": 1000.0, "output_tokens_mean": 200.0, "server_itl_mean_ms": 4.0,
       "client_itl_mean_ms": 4.2}


def test_an_auto_kv_cache_holds_elements_of_the_models_own_size():
    wide = ModelShape(num_layers=36, num_kv_heads=8, head_dim=128, dtype_bytes=4, weight_bytes=16_089_088_000)
    assert decode_bound.kv_dtype_bytes("auto", wide) == 4 and decode_bound.kv_dtype_bytes("bf16", wide) == 2
    row = decode_bound.bound_row(ROW, wide, "auto", 4800.0)
    assert row["kv_bytes_per_token"] == 294_912  # 36 layers x 2 (K, V) x 8 heads x 128 x 4 bytes
    assert decode_bound.bound_row(ROW, QWEN3_4B, "auto", 4800.0)["kv_bytes_per_token"] == 147_456


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_every_fp8_kv_cache_format_is_one_byte_an_element(dtype):
    assert decode_bound.kv_dtype_bytes(dtype, QWEN3_4B) == 1
    row = decode_bound.bound_row(ROW, QWEN3_4B, dtype, 4800.0)
    assert row["kv_bytes_per_token"] == 73_728  # 36 x 2 x 8 x 128 x 1


def test_only_steady_closed_loop_points_with_a_measured_context_get_a_floor():
    run = SimpleNamespace(manifest=SimpleNamespace(model_shape=QWEN3_4B,
                                                   provenance=SimpleNamespace(gpu=SimpleNamespace(name="NVIDIA H200"))),
                          servers={})
    rows = [ROW,
            {**ROW, "load": "c=16", "concurrency": 16, "repeats_steady": 0},  # no steady repeat
            {**ROW, "pattern": "qps", "load": "r=4", "concurrency": None},  # open loop
            {**ROW, "load": "c=32", "concurrency": 32, "prompt_tokens_mean": math.nan}]  # no request measured
    bound = decode_bound.bound_rows(run, rows)
    assert [b["load"] for b in bound] == ["c=8"]
    b = bound[0]
    # 8 running x (1,000 + 200 / 2) tokens x 147,456 B = 1,297,612,800 B / 4.8e12 B/s = 0.2703 ms;
    # weights 8,044,544,000 B / 4.8e12 B/s = 1.6759 ms
    assert b["context_tokens"] == 1100.0 and b["kv_bytes"] == 1_297_612_800
    assert b["kv_ms"] == pytest.approx(0.270336) and b["weights_ms"] == pytest.approx(1.675947, abs=1e-6)
    assert b["roofline_ms"] == pytest.approx(1.946283, abs=1e-6) and (b["running"], b["running_by"]) == (8.0, "c")
    assert b["kv_share_pct"] == pytest.approx(100 * 0.270336 / 4.0)
