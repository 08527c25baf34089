"""Roofline arithmetic of one decode-attention step: bytes moved, FLOPs, the time each bound allows, and how close
the measured time came. Pure (no torch), unit-tested.

Decode reads each cached K and V element once and does, per query head and token, one dot product with K (2 x
head_dim FLOPs) and one multiply-add with V (2 x head_dim): FLOPs = 4 x tokens x query heads x head_dim. With GQA
group g and e bytes per KV element, the intensity is 4 x g x head_dim / (2 x head_dim x e) = 2g / e FLOP per KV byte:
4 for Qwen3's g = 4 with BF16, 8 with FP8. An H200 turns over 989 TFLOP/s (BF16 tensor cores) / 4.8 TB/s = 206
FLOP/byte on tensor cores and 67 / 4.8 = 14 FLOP/byte on CUDA cores (FP32 FMA), so every case here is memory-bound
on paper: the bound is bytes / peak bandwidth.

Where a kernel stays far below that bound the numbers point at a third limit: the per-element work (load, convert,
multiply) that does not shrink when the bytes do. `per_element_evidence` compares FP8 with BF16 at the same tokens:
FP8 halves the bytes; if the time stays close to BF16's, the kernel is bound by elements processed, not bytes read.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable


def decode_flops(tokens: int, num_qo_heads: int, head_dim: int) -> int:
    """FLOPs of one decode step over `tokens` cached tokens: q.K^T and p.V, 2 FLOPs per multiply-add each."""
    return 4 * tokens * num_qo_heads * head_dim


def decode_roofline(*, tokens: int, num_qo_heads: int, num_kv_heads: int, head_dim: int, moved_bytes: int,
                    median_us: float, peak_gb_s: float | None, peak_tflops: float | None) -> dict:
    """One case's roofline line: intensity, the memory and compute bounds (us), which binds, achieved vs bound."""
    if median_us <= 0 or moved_bytes <= 0:
        raise ValueError("median_us and moved_bytes must be > 0")
    flops = decode_flops(tokens, num_qo_heads, head_dim)
    memory_us = moved_bytes / (peak_gb_s * 1e3) if peak_gb_s else None  # bytes / (GB/s * 1e9) * 1e6 us
    compute_us = flops / (peak_tflops * 1e6) if peak_tflops else None  # flops / (TFLOP/s * 1e12) * 1e6 us
    bounds = {k: v for k, v in (("memory", memory_us), ("compute", compute_us)) if v is not None}
    binding = max(bounds, key=bounds.get) if bounds else None  # type: ignore[arg-type]
    bound_us = bounds.get(binding) if binding else None
    return {"flops": flops, "intensity_flop_per_byte": flops / moved_bytes,
            "memory_bound_us": memory_us, "compute_bound_us": compute_us, "binding": binding,
            "pct_of_bound": 100 * bound_us / median_us if bound_us else None,
            "achieved_tflops": flops / median_us / 1e6,
            "kv_elements_per_ns": 2 * tokens * num_kv_heads * head_dim / (median_us * 1e3)}


PAIR_KEY = ("path", "page_size", "batch", "seq_len", "placement")


def per_element_evidence(cases: Iterable[dict]) -> dict[str, dict]:
    """Per decode path: FP8 vs BF16 at the same tokens — byte ratio, time ratio, element-rate ratio (medians).

    time_ratio near bytes_ratio (0.5): bandwidth-bound, FP8 gains its full 2x. time_ratio near 1 with an
    element-rate ratio near 1: both dtypes process KV elements at the same rate, so the element work binds.
    """
    by_key: dict[tuple, dict[str, dict]] = {}
    for case in cases:
        if case.get("median_us") and case.get("kv_bytes"):
            by_key.setdefault(tuple(case[k] for k in PAIR_KEY), {})[case["dtype"]] = case
    out: dict[str, dict] = {}
    for path in sorted({key[0] for key in by_key}):
        pairs = [p for key, p in by_key.items() if key[0] == path and {"bf16", "fp8"} <= p.keys()]
        if not pairs:
            continue
        time_ratio = statistics.median(p["fp8"]["median_us"] / p["bf16"]["median_us"] for p in pairs)
        bytes_ratio = statistics.median(p["fp8"]["kv_bytes"] / p["bf16"]["kv_bytes"] for p in pairs)
        out[path] = {"pairs": len(pairs), "bytes_ratio": bytes_ratio, "time_ratio": time_ratio,
                     "element_rate_ratio": 1 / time_ratio, "speedup": 1 / time_ratio,
                     "fp8_pct_peak_median": _median_known(p["fp8"].get("pct_peak") for p in pairs),
                     "bf16_pct_peak_median": _median_known(p["bf16"].get("pct_peak") for p in pairs),
                     "verdict": verdict(bytes_ratio, time_ratio)}
    return out


def _median_known(values: Iterable[float | None]) -> float | None:
    """Median of the values that exist; None when none does (no datasheet peak: no % of peak, not 0%)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def verdict(bytes_ratio: float, time_ratio: float) -> str:
    """Which limit the FP8/BF16 pair points at: the time follows the bytes, the elements, or lies in between."""
    if time_ratio <= bytes_ratio * 1.15:
        return "bytes: FP8 time falls with its bytes (bandwidth-bound)"
    if time_ratio >= 0.85:
        return ("elements: FP8 reads half the bytes in about the same time, so the per-element work (load, "
                "dequantise, multiply) binds, not HBM")
    return "mixed: FP8 gains less than its byte saving; part of the time is per-element work"
