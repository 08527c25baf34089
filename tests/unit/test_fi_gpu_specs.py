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
