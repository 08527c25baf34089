"""One server over several GPUs or hosts: SGLang's own tensor, data and multi-node parallelism, from TP_SIZE, DP_SIZE,
GPUS, NNODES and DIST_INIT_ADDR, and the layouts refused in one line before anything is launched.

SGLang needs TP_SIZE x DP_SIZE GPUs, split evenly over NNODES hosts; each host runs the same command but for
--node-rank, and only node 0 serves HTTP. The refusals say what a start would otherwise die of minutes later:
  - the model's attention heads not divisible by TP_SIZE, or its KV heads neither divisible by TP_SIZE nor a divisor
    of it (sglang/srt/models/qwen3.py asserts exactly this; Qwen3-4B: 32 heads, 8 KV heads -> TP 1, 2, 4, 8, 16, 32);
  - fewer GPUs given (GPUS) or visible (CUDA_VISIBLE_DEVICES, else every GPU the driver shows) than a node needs;
  - a GPU of the layout already holding more than BUSY_SHARE of its memory: SGLang sizes every rank's KV pool from
    the memory free on the first one and calls ranks "unbalanced" past a 10% difference, so a busy GPU runs out
    of memory at load (a one-GPU server instead adapts MEM_FRACTION_STATIC: llmhost/serve/spec.py).
Reads MODEL_DIR/config.json; writes nothing.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmhost.config import Config
from llmhost.serve.console import ServeError
from llmhost.serve import gpu
from llmhost.serve.gpu import GpuMemory, GpuProcess

BUSY_SHARE = 0.10  # SGLang's own balance rule: a rank with < 90% of the first rank's free memory is "unbalanced"


def gpus_per_node(cfg: Config) -> int:
    """GPUs this host's processes use: none when the router fronts servers elsewhere (WORKER_URLS)."""
    if cfg.router == "on" and cfg.worker_urls:
        return 0
    return cfg.tp_size * cfg.dp_size // cfg.nnodes


def layout_problem(cfg: Config, node_rank: int = 0) -> str | None:
    """What the settings alone say against the layout (no GPU or file read), or None."""
    total = cfg.tp_size * cfg.dp_size
    if total % cfg.nnodes:
        return (f"TP_SIZE={cfg.tp_size} x DP_SIZE={cfg.dp_size} = {total} GPUs do not split evenly over "
                f"NNODES={cfg.nnodes} hosts — make TP_SIZE x DP_SIZE a multiple of NNODES")
    if cfg.nnodes > 1 and not cfg.dist_init_addr:
        return f"NNODES={cfg.nnodes} needs DIST_INIT_ADDR=<node 0's address>:<free port> (e.g. 10.0.0.1:25000)"
    listed = cfg.gpus.split(",") if cfg.gpus else []
    if len(set(listed)) != len(listed) and not (cfg.router == "on" and not cfg.worker_urls):
        return (f"GPUS={cfg.gpus} lists a GPU twice: only the router's local workers can share one (ROUTER=on, "
                "WORKER_URLS empty)")
    if not 0 <= node_rank < cfg.nnodes:
        return f"--node-rank {node_rank} is not a node of NNODES={cfg.nnodes} (0 to {cfg.nnodes - 1})"
    return None


def model_heads(model_dir: str) -> tuple[int, int] | None:
    """(attention heads, KV heads) from MODEL_DIR/config.json; None when it does not say (SGLang checks later)."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        config = config.get("text_config", config) if "num_attention_heads" not in config else config
        heads = int(config["num_attention_heads"])
        return heads, int(config.get("num_key_value_heads", heads))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def heads_problem(tp_size: int, heads: int, kv_heads: int) -> str | None:
    """SGLang's rule for splitting attention over TP ranks (qwen3.py), as one line, or None when it holds."""
    if heads % tp_size:
        return f"TP_SIZE={tp_size} does not divide the model's {heads} attention heads — use a divisor of {heads}"
    if kv_heads % tp_size and tp_size % kv_heads:
        return (f"TP_SIZE={tp_size} does not divide the model's {kv_heads} KV heads (nor is a multiple of them) — "
                f"use a divisor of {kv_heads}")
    return None


def visible_devices(gpus: str, environ: Mapping[str, str], devices: Sequence[GpuMemory]) -> list[str]:
    """The GPUs a server launched now could use: GPUS, else CUDA_VISIBLE_DEVICES, else every GPU the driver shows."""
    if gpus:
        return gpus.split(",")
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    return [str(d.index) for d in devices]


def gpu_problem(cfg: Config, environ: Mapping[str, str], devices: Sequence[GpuMemory],
                processes: Sequence[GpuProcess]) -> str | None:
    """Too few GPUs for this node, a GPUS index the host lacks, or a busy GPU of the layout, as one line; else None."""
    need = gpus_per_node(cfg)
    if need <= 1:  # one GPU: the auto memory fraction adapts to what others hold (spec.py), as before; none: the
        return None  # router in front of servers elsewhere
    by_index = {str(d.index): d for d in devices}
    missing = [i for i in cfg.gpus.split(",") if cfg.gpus and i not in by_index]
    if missing:
        shown = ", ".join(f"gpu{d.index}" for d in devices) or "none (no NVIDIA driver)"
        return f"GPUS={cfg.gpus} names GPU {', '.join(missing)}, which this host lacks (it has: {shown})"
    visible = visible_devices(cfg.gpus, environ, devices)
    if not devices or len(visible) < need:
        where = ("this host shows none (no NVIDIA driver)" if not devices else
                 f"GPUS={cfg.gpus} gives {len(visible)}" if cfg.gpus else
                 f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} gives {len(visible)}"
                 if "CUDA_VISIBLE_DEVICES" in environ else f"this host has {len(visible)}")
        return (f"TP_SIZE={cfg.tp_size} x DP_SIZE={cfg.dp_size} needs {need} GPUs per node but {where} — lower "
                "TP_SIZE or DP_SIZE, or give more GPUs")
    for index in dict.fromkeys(visible[:need]):  # a GPU shared by local workers is looked at once
        device = by_index.get(index)
        if device is not None and device.used_mib > BUSY_SHARE * device.total_mib:
            holders = ", ".join(f"pid {p.pid}" for p in processes if p.gpu_index == device.index) or "?"
            return (f"gpu{index} is busy: {device.used_mib / 1024:.1f} of {device.total_mib / 1024:.1f} GiB used "
                    f"(by {holders}) — a TP/DP server needs every GPU free; stop it or set GPUS to free ones")
    return None


def check(cfg: Config, node_rank: int = 0, environ: Mapping[str, str] | None = None) -> None:
    """Every refusal above, reading MODEL_DIR and, given the launch environment, asking the driver for this node's
    GPUs (print-command prints other nodes' commands: it passes none). ServeError with the first one."""
    problem = layout_problem(cfg, node_rank)
    heads = model_heads(cfg.model_dir)
    if problem is None and heads is not None:
        problem = heads_problem(cfg.tp_size, *heads)
    if problem is None and environ is not None:
        problem = gpu_problem(cfg, environ, gpu.devices(), gpu.processes())
    if problem:
        raise ServeError(problem)


def launch_flags(cfg: Config, node_rank: int = 0) -> list[list[str]]:
    """SGLang's flags for the layout: none for one GPU on one host, so that command stays as it always was."""
    flags = [[flag, str(size)] for flag, size in (("--tp-size", cfg.tp_size), ("--dp-size", cfg.dp_size)) if size > 1]
    if cfg.nnodes > 1:
        flags += [["--nnodes", str(cfg.nnodes)], ["--node-rank", str(node_rank)],
                  ["--dist-init-addr", cfg.dist_init_addr]]
    return flags


def device_env(cfg: Config) -> dict[str, str]:
    """GPUS as the server's CUDA_VISIBLE_DEVICES. CUDA numbers GPUs fastest first unless told PCI_BUS_ID, and
    nvidia-smi (where GPUS indices come from) numbers them by PCI bus: the order is set so the two agree."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": cfg.gpus} if cfg.gpus else {}


def first_device(cfg: Config) -> int | None:
    """The GPU whose free memory sizes the KV pool (the first of GPUS); None = the first visible one."""
    return int(cfg.gpus.split(",")[0]) if cfg.gpus else None
