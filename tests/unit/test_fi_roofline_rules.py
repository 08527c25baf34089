"""The roofline's rules at their edges: a compute-bound case names compute and is held to its own bound, the unit
factors are exact, the input guard sits at zero, and the FP8/BF16 verdict's thresholds belong to the side they
name."""
from __future__ import annotations

import pytest

from llmhost.fi import roofline
from test_fi_roofline import case

EXACT = 1e-12


def line(**overrides) -> dict:
    args = {"tokens": 1000, "num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "moved_bytes": 4_096_000,
            "median_us": 10.0, "peak_gb_s": 4800.0, "peak_tflops": 989.4}
    return roofline.decode_roofline(**{**args, **overrides})


def test_a_kernel_slower_on_paper_in_flops_than_in_bytes_is_compute_bound_and_held_to_the_compute_bound():
    # 16.384 MFLOP at 0.001 TFLOP/s = 16,384 us of compute against 0.85 us of bytes
    got = line(peak_tflops=0.001)
    assert got["compute_bound_us"] == pytest.approx(16_384_000 / 1e9 * 1e6, rel=EXACT)
    assert got["binding"] == "compute"
    assert got["pct_of_bound"] == pytest.approx(100 * 16_384.0 / 10.0, rel=EXACT)


def test_the_bounds_and_the_achieved_rate_use_exact_unit_factors():
    got = line()
    assert got["flops"] == 4 * 1000 * 32 * 128
    assert got["memory_bound_us"] == pytest.approx(4_096_000 / 4800e9 * 1e6, rel=EXACT)
    assert got["compute_bound_us"] == pytest.approx(16_384_000 / 989.4e12 * 1e6, rel=EXACT)
    assert got["achieved_tflops"] == pytest.approx(16_384_000 / 10e-6 / 1e12, rel=EXACT)
    assert got["binding"] == "memory"


def test_only_a_stated_peak_gives_a_bound():
    memory_only = line(peak_tflops=None)
    assert memory_only["compute_bound_us"] is None and memory_only["binding"] == "memory"
    compute_only = line(peak_gb_s=None)
    assert compute_only["memory_bound_us"] is None and compute_only["binding"] == "compute"


def test_no_bytes_or_no_time_is_refused_but_one_byte_is_a_case():
    assert line(moved_bytes=1)["intensity_flop_per_byte"] == 16_384_000
    for bad in ({"moved_bytes": 0}, {"median_us": 0.0}, {"moved_bytes": -1}):
        with pytest.raises(ValueError, match="median_us and moved_bytes must be > 0"):
            line(**bad)


def test_a_case_missing_its_time_or_its_bytes_is_no_half_of_a_pair():
    cases = [case("bf16", "tensor-core", 100.0, 2000, None), case("fp8", "tensor-core", 60.0, None, None),
             case("bf16", "cuda-core", None, 2000, None), case("fp8", "cuda-core", 60.0, 1000, None)]
    assert roofline.per_element_evidence(cases) == {}


def test_a_path_without_a_pair_does_not_hide_the_paths_after_it():
    cases = [case("bf16", "a-first-path", 100.0, 2000, None),  # sorts first, no FP8 half
             case("bf16", "tensor-core", 100.0, 2000, None), case("fp8", "tensor-core", 50.0, 1000, None)]
    got = roofline.per_element_evidence(cases)
    assert list(got) == ["tensor-core"] and got["tensor-core"]["pairs"] == 1


def test_the_verdict_thresholds_belong_to_the_side_they_name():
    assert roofline.verdict(0.5, 0.5 * 1.15) == "bytes: FP8 time falls with its bytes (bandwidth-bound)"
    assert roofline.verdict(0.5, 0.85) == ("elements: FP8 reads half the bytes in about the same time, so the "
                                           "per-element work (load, dequantise, multiply) binds, not HBM")
    assert roofline.verdict(0.5, 0.84) == ("mixed: FP8 gains less than its byte saving; part of the time is "
                                           "per-element work")
