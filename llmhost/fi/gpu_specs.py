"""Memory-bandwidth ceilings for decode attention: a table of known GPUs' peak HBM bandwidth, and a measured one.

Decode attention reads every cached K/V byte once per step, so its speed is bounded by memory bandwidth. Two
ceilings are stated next to every measurement: the datasheet peak (this table) and what a plain device-to-device
copy reaches on the same GPU (measured, read + write bytes, ~85-92% of the datasheet figure). Decode only reads, so
it can match the copy (an H200 run: 100.1%): read the copy as a reference line, not a hard ceiling.

    lookup("NVIDIA H200")  -> GpuSpec(name='H200', peak_hbm_tb_s=4.8, ...)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    peak_hbm_tb_s: float  # datasheet memory bandwidth, TB/s (10^12 bytes/s)
    memory_gb: int
    bf16_tensor_tflops: float | None = None  # dense BF16 tensor-core peak (datasheet, without sparsity)
    fp32_tflops: float | None = None  # FP32 CUDA-core peak (FMA = 2 FLOPs)

    @property
    def peak_gb_s(self) -> float:
        return self.peak_hbm_tb_s * 1000.0


# Matched in order against the upper-cased torch device name, first hit wins, so the more specific keys come first
# (e.g. "GH200" before "H200", "H100 NVL" and "H100 PCIE" before "H100", "A100 80GB"/"A100-SXM4-80GB" before "A100").
_TABLE: dict[tuple[str, ...], GpuSpec] = {
    ("GH200", "144G"): GpuSpec("GH200 (144 GB HBM3e)", 4.9, 144, 989.4, 66.9),
    ("GH200",): GpuSpec("GH200 (H100 96GB HBM3)", 4.0, 96, 989.4, 66.9),
    ("H200",): GpuSpec("H200", 4.8, 141, 989.4, 66.9),
    ("H100 NVL",): GpuSpec("H100 NVL", 3.9, 94, 835.5, 60.0),
    ("H100 PCIE",): GpuSpec("H100 PCIe", 2.0, 80, 756.5, 51.2),
    ("H100",): GpuSpec("H100 SXM", 3.35, 80, 989.4, 66.9),
    ("H800 PCIE",): GpuSpec("H800 PCIe", 2.0, 80, 756.5, 51.2),
    ("H800",): GpuSpec("H800 SXM", 3.35, 80, 989.4, 66.9),
    ("H20",): GpuSpec("H20", 4.0, 96),
    ("B200",): GpuSpec("B200", 8.0, 180),
    ("B100",): GpuSpec("B100", 8.0, 180),
    ("A100", "80GB"): GpuSpec("A100 80GB", 2.0, 80, 312.0, 19.5),
    ("A100",): GpuSpec("A100 40GB", 1.555, 40, 312.0, 19.5),
    ("A800", "40GB"): GpuSpec("A800 40GB", 1.555, 40, 312.0, 19.5),
    ("A800",): GpuSpec("A800 80GB", 2.0, 80, 312.0, 19.5),
    ("L40S",): GpuSpec("L40S", 0.864, 48),
    ("L40",): GpuSpec("L40", 0.864, 48),
    ("L4",): GpuSpec("L4", 0.3, 24),
    ("A10G",): GpuSpec("A10G", 0.6, 24),
    ("A10",): GpuSpec("A10", 0.6, 24),
    ("RTX 4090",): GpuSpec("RTX 4090", 1.008, 24),
    ("RTX 6000 ADA",): GpuSpec("RTX 6000 Ada", 0.96, 48),
    ("RTX 5090",): GpuSpec("RTX 5090", 1.792, 32),
}


def lookup(device_name: str | None) -> GpuSpec | None:
    """The spec whose key words all appear in the device name (case-insensitive); None for an unknown GPU."""
    if not device_name:
        return None
    upper = device_name.upper()
    for keys, spec in _TABLE.items():
        if all(key in upper for key in keys):
            return spec
    return None


def measure_copy_gb_s(size_mib: int = 1024, repeat: int = 20) -> dict[str, float | str]:
    """Device-to-device copy bandwidth: read + write bytes (2 x size) over the median copy time.

    1 GiB per copy is ~20x an H200's 50 MB L2, so the copy streams from and to HBM as decode does. Always timed
    eagerly with CUDA events, whatever `method` the kernels use: captured in a CUDA graph, a device-to-device copy
    becomes a memcpy node that the copy engines run (measured on an H200: 2,716 GB/s against 4,230 GB/s eagerly,
    where the copy runs as SM kernels like decode does), and the ceiling must be the SM path's. A 1 GiB copy lasts
    ~0.5 ms, so the event timer's launch overhead is noise here.
    """
    import torch

    from llmhost.fi.timing import gpu_time_ms, summarize

    src = torch.empty(size_mib * 2**20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.random_(0, 255)
    stats = summarize(gpu_time_ms(lambda: dst.copy_(src), repeat=repeat, method="event"))
    moved = 2 * src.numel()
    return {"copy_gb_s": moved / (stats["median_ms"] / 1e3) / 1e9, "copy_bytes": moved, "method": "event", **stats}
