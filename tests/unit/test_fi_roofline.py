"""Roofline arithmetic by hand: FLOPs, intensity, the two bounds, which binds, and the FP8/BF16 pair evidence."""
from __future__ import annotations

import pytest

from llmhost.fi import roofline

# Qwen3-4B decode, 64 x 4096 tokens, BF16 KV: 32 q heads, 8 KV heads, head_dim 128
TOKENS = 64 * 4096
KV_BYTES = TOKENS * 2 * 8 * 128 * 2  # K and V, 2 bytes each: 1 GiB


def test_decode_flops_are_four_per_token_head_and_dim():
    assert roofline.decode_flops(TOKENS, 32, 128) == 4 * TOKENS * 32 * 128  # q.K (2 FLOPs) + p.V (2 FLOPs)


def test_gqa4_bf16_decode_is_memory_bound_on_an_h200_and_the_bound_is_bytes_over_bandwidth():
    line = roofline.decode_roofline(tokens=TOKENS, num_qo_heads=32, num_kv_heads=8, head_dim=128,
                                    moved_bytes=KV_BYTES, median_us=250.0, peak_gb_s=4800.0, peak_tflops=989.4)
    assert line["intensity_flop_per_byte"] == pytest.approx(4.0)  # 2 x group 4 / 2 bytes
    assert line["memory_bound_us"] == pytest.approx(KV_BYTES / 4.8e12 * 1e6)  # 223.7 us
    assert line["compute_bound_us"] == pytest.approx(4 * TOKENS * 32 * 128 / 989.4e12 * 1e6)  # 4.3 us
    assert line["binding"] == "memory"
    assert line["pct_of_bound"] == pytest.approx(100 * 223.696 / 250.0, rel=1e-4)
    assert line["achieved_tflops"] == pytest.approx(4 * TOKENS * 32 * 128 / 250e-6 / 1e12)
    assert line["kv_elements_per_ns"] == pytest.approx(TOKENS * 2 * 8 * 128 / 250e3)


def test_without_a_compute_peak_only_the_memory_bound_is_stated_and_bad_input_raises():
    line = roofline.decode_roofline(tokens=10, num_qo_heads=32, num_kv_heads=8, head_dim=128, moved_bytes=100,
                                    median_us=1.0, peak_gb_s=None, peak_tflops=None)
    assert line["binding"] is None and line["pct_of_bound"] is None
    with pytest.raises(ValueError):
        roofline.decode_roofline(tokens=10, num_qo_heads=32, num_kv_heads=8, head_dim=128, moved_bytes=100,
                                 median_us=0.0, peak_gb_s=4800.0, peak_tflops=None)


def case(dtype: str, path: str, us: float, kv_bytes: int, pct: float) -> dict:
    return {"dtype": dtype, "path": path, "page_size": 1, "batch": 64, "seq_len": 4096, "placement": "contiguous",
            "median_us": us, "kv_bytes": kv_bytes, "pct_peak": pct}


def test_fp8_pairs_point_at_bytes_elements_or_between():
    cases = [case("bf16", "tensor-core", 250.0, 2000, 88.0), case("fp8", "tensor-core", 227.0, 1000, 48.0),
             case("bf16", "cuda-core", 380.0, 2000, 57.0), case("fp8", "cuda-core", 470.0, 1000, 23.0)]
    got = roofline.per_element_evidence(cases)
    assert got["tensor-core"]["bytes_ratio"] == 0.5
    assert got["tensor-core"]["time_ratio"] == pytest.approx(0.908, rel=1e-3)
    assert got["tensor-core"]["verdict"].startswith("elements")  # half the bytes, ~the same time
    assert got["cuda-core"]["speedup"] == pytest.approx(380 / 470)
    assert got["tensor-core"]["fp8_pct_peak_median"] == 48.0
    assert roofline.verdict(0.5, 0.52).startswith("bytes")
    assert roofline.verdict(0.5, 0.7).startswith("mixed")
    assert roofline.per_element_evidence([case("bf16", "tensor-core", 1.0, 2, 1.0)]) == {}
