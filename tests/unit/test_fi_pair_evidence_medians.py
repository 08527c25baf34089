"""FP8/BF16 pair evidence by hand over several pairs of one path: medians of the per-pair ratios, one pair per
(page size, batch, length, placement), and the element rate that equal element counts imply."""
from __future__ import annotations

import pytest

from llmhost.fi import roofline


def case(dtype: str, page_size: int, us: float, kv_bytes: int) -> dict:
    return {"dtype": dtype, "path": "tensor-core", "page_size": page_size, "batch": 64, "seq_len": 4096,
            "placement": "contiguous", "median_us": us, "kv_bytes": kv_bytes, "pct_peak": None}


# three page sizes, BF16 at 100 us each; FP8 at 50, 60 and 97 us: time ratios 0.50, 0.60, 0.97
CASES = [case("bf16", 1, 100.0, 2000), case("fp8", 1, 50.0, 1000),
         case("bf16", 4, 100.0, 2000), case("fp8", 4, 60.0, 1000),
         case("bf16", 16, 100.0, 2000), case("fp8", 16, 97.0, 1000)]


def test_each_page_size_is_its_own_pair():
    assert roofline.per_element_evidence(CASES)["tensor-core"]["pairs"] == 3


def test_time_ratio_is_the_median_of_the_pairs_not_their_mean():
    got = roofline.per_element_evidence(CASES)["tensor-core"]
    assert got["time_ratio"] == pytest.approx(0.60)  # the mean would be 0.69
    assert got["verdict"].startswith("mixed")


def test_element_rate_ratio_is_bf16_time_over_fp8_time_as_both_process_the_same_elements():
    got = roofline.per_element_evidence(CASES)["tensor-core"]
    assert got["element_rate_ratio"] == pytest.approx(100 / 60)  # not the byte-rate ratio 0.5 x 100 / 60
    assert got["speedup"] == pytest.approx(100 / 60)
