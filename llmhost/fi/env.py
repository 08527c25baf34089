"""Where a kernel number was measured: library versions, GPU, driver, CPU, git commit, JIT cache location.

Every Phase 4 JSON (sparse.json, balance.json, jit.json, trace.json) stores `describe()` under "env", so a number
can always be traced back to the stack that produced it; `document()` builds that envelope and `write_document()`
writes it atomically (llmhost.files). Versions, driver and git come from llmhost.provenance, like every other
result's; this module adds what kernels depend on (SMs, L2, compute capability, CUDA runtime, the JIT cache).
Safe on a CPU-only machine: fields that cannot be read are None. torch is imported only when installed, and CUDA
is touched only when torch says a GPU is there.

    python3 -m llmhost.fi.env        # print the environment as JSON
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from llmhost import files, provenance


def jit_cache_dir() -> dict[str, str | None]:
    """FlashInfer's JIT cache: $FLASHINFER_WORKSPACE_BASE (default: home)/.cache/flashinfer, as flashinfer.jit.env."""
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    root = Path(base) if base else Path.home()
    return {"flashinfer_workspace_base": base, "jit_cache_dir": str(root / ".cache" / "flashinfer")}


def gpu_info() -> dict[str, Any]:
    """GPU 0 as torch sees it (name, SMs, memory, L2, compute capability), CUDA runtime and driver versions."""
    info: dict[str, Any] = {"gpu_name": None, "gpu_count": 0, "sm_count": None, "gpu_memory_gib": None,
                            "l2_cache_mib": None, "compute_capability": None, "cuda_runtime": None,
                            "driver": provenance.gpu_info().driver}
    if importlib.util.find_spec("torch") is None:
        return info
    import torch

    info["cuda_runtime"] = torch.version.cuda
    if not torch.cuda.is_available():
        return info
    props = torch.cuda.get_device_properties(0)
    info.update(gpu_name=props.name, gpu_count=torch.cuda.device_count(), sm_count=props.multi_processor_count,
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                l2_cache_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None,
                compute_capability=f"{props.major}.{props.minor}")
    return info


def describe(include_gpu: bool = True) -> dict[str, Any]:
    """The environment record stored under "env" in every Phase 4 JSON."""
    versions = provenance.package_versions(sys.executable)
    commit, dirty = provenance.git_state()
    out: dict[str, Any] = {
        **{name: versions[name] or _module_version(name) for name in ("flashinfer", "torch", "sglang")},
        "python": platform.python_version(),
        "hostname": platform.node(),
        "cpu_cores": os.cpu_count(),
        "git_commit": commit and commit + ("+dirty" if dirty else ""),
        **jit_cache_dir(),
    }
    if include_gpu:
        out.update(gpu_info())
    return out


def document(stage: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    """{"schema": 1, "created_at", "env", "command", **stage}: the envelope of every Phase 4 result JSON."""
    return {"schema": 1, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "env": describe(), "command": list(sys.argv if argv is None else argv), **stage}


def write_document(path: Path, doc: dict[str, Any]) -> None:
    """Replace `path` with the document, encoded as Phase 4 JSON always was: numpy scalars and paths as strings,
    NaN kept (a kernel record may hold one), so a GPU run never fails at its last step over an encoding rule."""
    files.write_text_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")


def _module_version(module: str) -> str | None:
    """`module.__version__` for a package on PYTHONPATH without dist metadata (a source checkout); None if absent."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
    except Exception:  # a broken install is reported as "no version", not a crash of the benchmark
        return None
    return getattr(mod, "__version__", None)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU/CUDA probe (default: probe)")
    args = parser.parse_args(argv)
    json.dump(describe(include_gpu=not args.no_gpu), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
