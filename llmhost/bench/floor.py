"""The weight-read floor of one decode step: every weight is read once per token, so a step at batch 1 cannot
beat weight bytes / peak HBM bandwidth. Pure (reads config.json only).

    Qwen3-4B: 36 layers x (q/k/v/o 26.2 M + MLP 74.7 M) + LM head 388.96 M = 4.022 B params x 2 bytes (bf16)
              = 8.04 GB per token; / 4.8 TB/s (H200 datasheet) = 1.68 ms

Counted: q/k/v/o projections (from head_dim, query and KV heads), MLP gate/up/down, the LM head once (read for
every token even when tied to the embedding). Left out as negligible: the one embedding row looked up, norms,
biases, the KV cache read (1,024 cached tokens of Qwen3-4B: 0.15 GB, under 2%). Dense models only: a mixture of
experts reads only its routed experts, and a checkpoint stored quantized has its own byte sizes, so both are
refused. A server that quantizes a bf16 checkpoint as it loads (SGLang's `--quantization fp8`) reads its linear
layers at 1 byte a weight and its LM head at the checkpoint's dtype (QUANT_LINEAR_BYTES):

    Qwen3-4B, --quantization fp8: 3.633 B linear weights x 1 byte + 0.389 B LM head x 2 bytes = 4.41 GB = 0.92 ms
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from llmhost.fi import shapes
from llmhost.fi.shapes import ShapeError

# Bytes per weight as SGLang serves the checkpoint's dtype at --dtype auto (serve.sh passes none): a float32 checkpoint,
# or one that names no dtype, is served in float16 (bfloat16 for Gemma), 2 bytes either way
# (sglang/srt/configs/model_config.py: _get_and_verify_dtype, 0.5.17).
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}
# SGLang --quantization methods that quantize a 16-bit checkpoint's linear layers on load, by bytes per weight. The LM
# head and the embedding keep the checkpoint's dtype: fp8's get_quant_method quantizes LinearBase layers only
# (sglang/srt/layers/quantization/fp8.py, 0.5.17).
QUANT_LINEAR_BYTES = {"fp8": 1}


@dataclasses.dataclass(frozen=True, slots=True)
class Floor:
    weight_bytes: int  # bytes read per decode token
    peak_gb_s: float | None  # datasheet HBM bandwidth; None: GPU not in llmhost.fi.gpu_specs
    gpu: str | None  # the GPU name it was looked up by

    @property
    def ms(self) -> float | None:
        """weight_bytes / peak bandwidth, in ms: 8.04e9 B / 4.8e12 B/s = 1.68 ms."""
        return read_ms(self.weight_bytes, self.peak_gb_s)


def read_ms(n_bytes: float, peak_gb_s: float | None) -> float | None:
    """Milliseconds to read n_bytes at peak_gb_s (GB/s); None without a bandwidth."""
    return n_bytes / (peak_gb_s * 1e9) * 1e3 if peak_gb_s else None


def weight_bytes(config: dict, model: str, quantization: str | None = None) -> int:
    """Bytes of the weights one decode token reads (see the module docstring), the server quantizing the linear
    layers with `quantization` (SGLang's --quantization; None: not); ShapeError (one line) when the config lacks a
    field or describes a model this count does not fit, or the quantization is not one it counts."""
    if quantization and quantization not in QUANT_LINEAR_BYTES:
        raise ShapeError(f"--quantization {quantization}: the bytes of its weights are not counted here (only "
                         f"{', '.join(QUANT_LINEAR_BYTES)})")
    shape = shapes.from_config(config, model)
    if config.get("num_experts") or config.get("num_local_experts") or config.get("quantization_config"):
        raise ShapeError(f"config.json of {model}: a mixture of experts or quantized weights — the dense bf16 "
                         "weight count does not apply")
    size = dtype_bytes(config, model)
    try:
        hidden, inter, vocab = (int(config[k]) for k in ("hidden_size", "intermediate_size", "vocab_size"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ShapeError(f"config.json of {model} lacks a size field ({exc})") from None
    q_o = 2 * hidden * shape.num_qo_heads * shape.head_dim
    k_v = 2 * hidden * shape.num_kv_heads * shape.head_dim
    mlp = 3 * hidden * inter  # gate, up, down
    linear = QUANT_LINEAR_BYTES[quantization] if quantization else size
    return shape.num_layers * (q_o + k_v + mlp) * linear + vocab * hidden * size


def dtype_bytes(config: dict, model: str) -> int:
    """Bytes per weight the server reads for the config's dtype (read as SGLang does: `dtype`, else `torch_dtype`;
    float16 when unstated); ShapeError (one line) for another."""
    dtype = config.get("dtype") or config.get("torch_dtype") or "float16"
    if dtype not in DTYPE_BYTES:
        raise ShapeError(f"config.json of {model}: torch_dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def weight_bytes_of_dir(model_dir: str | Path, quantization: str | None = None) -> int:
    """weight_bytes() of <model_dir>/config.json; ShapeError (one line) when it cannot be read."""
    return weight_bytes(shapes.read_config(model_dir), Path(model_dir).name, quantization)
