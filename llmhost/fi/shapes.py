"""The attention shape of a model (heads, head size, layers), read from its Hugging Face config.json.

Kernel benchmarks use the served model's real shape, so the numbers apply to it: Qwen3-4B is 32 query heads,
8 KV heads (GQA group 4), head_dim 128, 36 layers. Pure stdlib.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class ShapeError(ValueError):
    """A model directory whose config.json cannot give an attention shape; the message is one line."""


@dataclass(frozen=True, slots=True)
class AttentionShape:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    model: str

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA); SGLang decodes bf16 KV on tensor cores when this is >= 4 (FP8 KV: always)."""
        return self.num_qo_heads // self.num_kv_heads

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K + V bytes one token occupies in one layer: 2 * kv_heads * head_dim * dtype size."""
        return 2 * self.num_kv_heads * self.head_dim * dtype_bytes


def from_config(config: dict, model: str) -> AttentionShape:
    """Shape from a parsed config.json; head_dim = config.head_dim or hidden_size // num_attention_heads."""
    try:
        num_qo = int(config["num_attention_heads"])
        num_kv = int(config.get("num_key_value_heads") or num_qo)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // num_qo)
        layers = int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ShapeError(f"config.json of {model} lacks an attention field ({exc})") from None
    if num_qo <= 0 or num_kv <= 0 or num_qo % num_kv:
        raise ShapeError(f"config.json of {model}: {num_qo} query heads are not a multiple of {num_kv} KV heads")
    return AttentionShape(num_qo_heads=num_qo, num_kv_heads=num_kv, head_dim=head_dim, num_layers=layers,
                          model=model)


def read_config(path: str | Path) -> dict:
    """<path>/config.json as a dict; ShapeError (one line) when it is missing or unreadable."""
    config_file = Path(path) / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        raise ShapeError(f"{config_file} not found (set MODEL_DIR or --model-dir to a model directory)") from None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8 (JSONDecodeError, UnicodeDecodeError)
        raise ShapeError(f"{config_file} is unreadable: {exc}") from None
    if not isinstance(config, dict):
        raise ShapeError(f"{config_file} is not a JSON object")
    return config


def from_model_dir(path: str | Path) -> AttentionShape:
    """Read <path>/config.json; the model name is the directory name (e.g. 'Qwen3-4B')."""
    return from_config(read_config(path), Path(path).name)
