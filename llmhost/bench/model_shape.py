"""The served model's shape as a run records it (manifest.json's model_shape): what a decode step reads per
token of KV cache and of weights, so the dashboard can set each step's time against its byte floor
(llmhost.report.decode_bound) without the model directory at hand.

    read("/models/Qwen3-4B") -> (ModelShape(num_layers=36, num_kv_heads=8, head_dim=128, dtype_bytes=2,
                                            weight_bytes=8_044_544_000, weight_bytes_fp8=4_411_228_160), "")

Read from config.json through llmhost.fi.shapes and llmhost.bench.floor; a config they cannot count (missing,
incomplete, a mixture of experts, quantized) gives None and the one-line reason, never a failed run.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from llmhost.bench import floor
from llmhost.fi import shapes
from llmhost.fi.shapes import ShapeError


@dataclasses.dataclass(frozen=True, slots=True)
class ModelShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int  # of the model's weights, and of its KV cache when the server runs it at --kv-cache-dtype auto
    weight_bytes: int  # read per decode step (llmhost.bench.floor)
    weight_bytes_fp8: int | None = None  # the same, the server quantizing the linear layers (--quantization fp8)

    def weights_read(self, quantization: str | None) -> int | None:
        """Weight bytes a decode step reads on a server run with this --quantization (None: none); None for a
        quantization not counted (llmhost.bench.floor.QUANT_LINEAR_BYTES)."""
        if not quantization:
            return self.weight_bytes
        return self.weight_bytes_fp8 if quantization == "fp8" else None

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        """K + V bytes one cached token holds over all layers: Qwen3-4B bf16 = 36 x 2 x 8 x 128 x 2 = 147,456."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * kv_dtype_bytes


def read(model_dir: str | Path) -> tuple[ModelShape | None, str]:
    """The shape from <model_dir>/config.json, or None and why it could not be counted."""
    name = Path(model_dir).name
    try:
        config = shapes.read_config(model_dir)
        attention = shapes.from_config(config, name)
        return ModelShape(attention.num_layers, attention.num_kv_heads, attention.head_dim,
                          floor.dtype_bytes(config, name), floor.weight_bytes(config, name),
                          floor.weight_bytes(config, name, "fp8")), ""
    except ShapeError as exc:
        return None, str(exc)
