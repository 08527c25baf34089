"""Peak-bandwidth table lookups (CPU)."""
from __future__ import annotations

import pytest

from llmhost.fi import gpu_specs


@pytest.mark.parametrize("device_name, tb_s", [
    ("NVIDIA H200", 4.8),
    ("NVIDIA H100 80GB HBM3", 3.35),
    ("NVIDIA H100 PCIe", 2.0),
    ("NVIDIA H100 NVL", 3.9),
    ("NVIDIA GH200 480GB", 4.0),
    ("NVIDIA GH200 144G HBM3e", 4.9),
    ("NVIDIA H800 PCIe", 2.0),
    ("NVIDIA H800", 3.35),
    ("NVIDIA A800-SXM4-40GB", 1.555),
    ("NVIDIA A800-SXM4-80GB", 2.0),
    ("NVIDIA A100-SXM4-80GB", 2.0),
    ("NVIDIA A100-SXM4-40GB", 1.555),
    ("NVIDIA L40S", 0.864),
    ("NVIDIA L4", 0.3),
])
def test_known_gpus_resolve_to_their_datasheet_bandwidth(device_name, tb_s):
    spec = gpu_specs.lookup(device_name)
    assert spec is not None and spec.peak_hbm_tb_s == tb_s
    assert spec.peak_gb_s == pytest.approx(tb_s * 1000)


def test_unknown_or_missing_gpu_has_no_spec():
    assert gpu_specs.lookup("Quadro K600") is None
    assert gpu_specs.lookup(None) is None


def test_compute_peaks_give_the_roofline_its_ridge_where_known():
    h200 = gpu_specs.lookup("NVIDIA H200")
    # 989 TFLOP/s BF16 over 4.8 TB/s: ~206 FLOP/byte on tensor cores; 66.9 / 4.8: ~14 on CUDA cores
    assert h200.bf16_tensor_tflops * 1e12 / (h200.peak_gb_s * 1e9) == pytest.approx(206, rel=0.01)
    assert h200.fp32_tflops * 1e12 / (h200.peak_gb_s * 1e9) == pytest.approx(14, rel=0.01)
    assert gpu_specs.lookup("NVIDIA L4").bf16_tensor_tflops is None  # not listed: the roofline states memory only
