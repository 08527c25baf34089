"""FlashInfer kernel numbers by hand: what the FP8/BF16 evidence states when a GPU has no datasheet peak (CPU)."""
from __future__ import annotations

from llmhost.fi import roofline
from llmhost.fi.sparse_kernels import bandwidth


def case(dtype: str, us: float, kv_bytes: int, pct_peak: float | None) -> dict:
    return {"dtype": dtype, "path": "tensor-core", "page_size": 1, "batch": 64, "seq_len": 4096,
            "placement": "contiguous", "median_us": us, "kv_bytes": kv_bytes, "pct_peak": pct_peak}


def test_fp8_bf16_evidence_on_a_gpu_without_a_datasheet_peak_states_no_percent_of_peak():
    # an unknown GPU: bandwidth() has no peak to divide by, so no case carries a % of peak
    assert bandwidth(1_000_000_000, 1.0, None, 4100.0)["pct_peak"] is None
    got = roofline.per_element_evidence([case("bf16", 250.0, 2000, None), case("fp8", 227.0, 1000, None)])
    assert got["tensor-core"]["bf16_pct_peak_median"] is None  # not 0%: there is no peak to compare with
    assert got["tensor-core"]["fp8_pct_peak_median"] is None
    assert got["tensor-core"]["bytes_ratio"] == 0.5  # the rest of the evidence stands


def test_fp8_bf16_evidence_takes_the_median_of_the_known_percentages():
    cases = [case("bf16", 250.0, 2000, 88.0), case("fp8", 227.0, 1000, 48.0),
             {**case("bf16", 250.0, 2000, 90.0), "batch": 16, "seq_len": 16384},
             {**case("fp8", 227.0, 1000, 50.0), "batch": 16, "seq_len": 16384}]
    got = roofline.per_element_evidence(cases)["tensor-core"]
    assert (got["bf16_pct_peak_median"], got["fp8_pct_peak_median"]) == (89.0, 49.0)
