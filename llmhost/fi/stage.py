"""The stages behind `fi_bench.py`: each takes validated options, checks the host, runs, writes its JSON document and
prints one JSON line last; returns the exit code (0 ok, 1 a check failed or the host cannot run it).

Host problems raise `EnvProblem` with one line that names the next command; fi_bench.py prints it and exits 1.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from llmhost import files
from llmhost.fi import shapes, split_plan


class EnvProblem(RuntimeError):
    """The host cannot run this subcommand; the message is one line with the next command to try."""


def read_shape(model_dir: Path) -> shapes.AttentionShape:
    try:
        return shapes.from_model_dir(model_dir)
    except shapes.ShapeError as exc:
        raise EnvProblem(str(exc)) from None


def gpu_setup(model_dir: Path, method: str) -> tuple[shapes.AttentionShape, dict]:
    """Model shape, then torch/flashinfer/CUDA presence, then the ceilings (peak bandwidth and FLOPs, measured copy)."""
    shape = read_shape(model_dir)
    for module in ("torch", "flashinfer"):
        if importlib.util.find_spec(module) is None:
            raise EnvProblem(f"{module} is not importable by {sys.executable}: run this with the server's Python "
                             "(SGLANG_PYTHON), e.g. ~/llmhost/venv/bin/python fi_bench.py ...")
    import torch

    if not torch.cuda.is_available():
        raise EnvProblem("no CUDA GPU visible to torch: run this on the GPU host (check nvidia-smi)")
    from llmhost.fi import gpu_specs

    name = torch.cuda.get_device_name(0)
    spec = gpu_specs.lookup(name)
    copy = gpu_specs.measure_copy_gb_s()
    ceilings = {"gpu": name, "peak_gb_s": spec.peak_gb_s if spec else None,
                "bf16_tensor_tflops": spec.bf16_tensor_tflops if spec else None,
                "fp32_tflops": spec.fp32_tflops if spec else None,
                "peak_source": spec.name if spec else "unknown GPU: no datasheet peak, % of copy only",
                "copy_gb_s": copy["copy_gb_s"], "copy": copy}
    print(f"[fi] {name}: peak {ceilings['peak_gb_s'] or '?'} GB/s, measured copy {copy['copy_gb_s']:.0f} GB/s; "
          f"{shape.model}: {shape.num_qo_heads} q / {shape.num_kv_heads} kv heads, head_dim {shape.head_dim}, "
          f"{shape.num_layers} layers; timer: {method}", flush=True)
    return shape, ceilings


def progress(line: str) -> None:
    print(line, flush=True)


def _write(out_dir: Path, stage: str, opts: Any, shape: shapes.AttentionShape, ceilings: dict, data: dict) -> Path:
    from llmhost.fi import env

    target = out_dir / f"{stage}.json"
    env.write_document(target, env.document({"stage": stage, "options": dataclasses.asdict(opts),
                                                "shape": dataclasses.asdict(shape), "ceilings": ceilings, **data}))
    return target


def _sparse(opts: Any, shape: shapes.AttentionShape, ceilings: dict) -> tuple[dict, dict]:
    from llmhost.fi import sparse

    data = sparse.run(opts, shape, ceilings, progress)
    return data, sparse.headline(data)


def _balance(opts: Any, shape: shapes.AttentionShape, ceilings: dict) -> tuple[dict, dict]:
    from llmhost.fi import balance

    data = balance.run(opts, shape, progress)
    return data, balance.headline(data)


KERNEL_STAGES = {"sparse": _sparse, "balance": _balance}  # -> (data for <stage>.json, headline numbers)


def run_kernels(stage: str, opts: Any, model_dir: Path, out_dir: Path) -> int:
    """sparse or balance: measure, write <stage>.json, print the headline as the last line; 1 on a failed check or a
    part that could not be measured."""
    shape, ceilings = gpu_setup(model_dir, opts.timing)
    try:
        data, head = KERNEL_STAGES[stage](opts, shape, ceilings)
    except split_plan.PlanInfoError as exc:
        raise EnvProblem(f"cannot read FlashInfer's plan: {exc}") from None
    target = _write(out_dir, stage, opts, shape, ceilings, data)
    failed = [c for c in data["checks"] if not c["ok"]]
    print(json.dumps({f"{stage}_json": str(target), "cases": len(data["cases"]), "checks_failed": len(failed),
                      "errors": data["errors"], **head}))
    return 1 if failed or data["errors"] else 0


def run_report(out_dir: Path) -> int:
    from llmhost.fi.report import page

    try:
        written = page.build(out_dir)
    except (page.ReportError, files.WriteError) as exc:  # a damaged results file, or --out-dir under a file
        raise EnvProblem(str(exc)) from None
    from llmhost.fi.report import figures

    if not figures.has_plotly():
        print(f"[report] charts left out: plotly is not importable by {sys.executable}; the tables are complete. "
              f"For the charts: .venv/bin/python fi_bench.py report --out-dir {out_dir}", flush=True)
    print(json.dumps({k: str(v) for k, v in written.items()}))
    return 0


def run_jit(plan: Any) -> int:
    from llmhost.fi import jit

    try:
        return jit.run(plan)
    except jit.JitError as exc:
        raise EnvProblem(str(exc)) from None
