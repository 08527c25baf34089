"""Attention shape from config.json, the shared environment record and the timing summary (all CPU)."""
from __future__ import annotations

import json

import pytest

from llmhost.fi import env, shapes, timing

QWEN3_4B = {  # the attention fields of Qwen3-4B's config.json (head_dim is explicit: 32 * 128 != hidden 2560)
    "architectures": ["Qwen3ForCausalLM"], "hidden_size": 2560, "head_dim": 128, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 36,
}


def test_qwen3_4b_shape_is_read_from_its_config_json(tmp_path):
    model_dir = tmp_path / "Qwen3-4B"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(QWEN3_4B))
    shape = shapes.from_model_dir(model_dir)
    assert (shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, shape.num_layers) == (32, 8, 128, 36)
    assert shape.model == "Qwen3-4B" and shape.group_size == 4
    assert shape.kv_bytes_per_token(2) == 2 * 8 * 128 * 2  # K and V, 8 heads, 128 dims, bf16


def test_head_dim_falls_back_to_hidden_size_over_heads():
    config = {"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}
    shape = shapes.from_config(config, "llama")
    assert shape.head_dim == 128 and shape.num_kv_heads == 32 and shape.group_size == 1


def test_missing_config_is_a_one_line_error_naming_the_setting(tmp_path):
    with pytest.raises(shapes.ShapeError, match="MODEL_DIR"):
        shapes.from_model_dir(tmp_path)


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe not utf-8", b"[1, 2]"])
def test_an_unreadable_config_is_a_one_line_error_not_a_traceback(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(shapes.ShapeError, match="config.json"):
        shapes.read_config(tmp_path)


def test_heads_that_do_not_divide_are_rejected():
    with pytest.raises(shapes.ShapeError, match="multiple"):
        shapes.from_config({"hidden_size": 10, "num_attention_heads": 6, "num_key_value_heads": 4,
                            "num_hidden_layers": 1}, "odd")


def test_summary_median_and_percentiles_match_numpy_rules():
    stats = timing.summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert stats == {"median_ms": 3.0, "p10_ms": pytest.approx(1.4), "p90_ms": pytest.approx(4.6), "n": 5}


def test_environment_record_works_without_a_gpu():
    record = env.describe(include_gpu=False)
    assert record["cpu_cores"] >= 1 and record["jit_cache_dir"].endswith(".cache/flashinfer")
    assert {"flashinfer", "torch", "sglang", "git_commit"} <= set(record)
