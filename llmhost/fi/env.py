"""Where a kernel number was measured: library versions, GPU, driver, CPU, git commit, JIT cache location.

Every Phase 4 JSON (sparse.json, balance.json, jit.json, trace.json) stores `describe()` under "env", so a number
can always be traced back to the stack that produced it; `document()` builds that envelope and `write_json_atomic()`
writes it (temp file + rename: a reader never sees half a file). Safe on a CPU-only machine: fields that cannot be read are
None. torch is imported only when installed, and CUDA is touched only when torch says a GPU is there.

    python3 -m llmhost.fi.env        # print the environment as JSON
"""
from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# distribution name -> importable module (used when the package is on PYTHONPATH without dist metadata)
_PACKAGES = {"flashinfer-python": "flashinfer", "torch": "torch", "sglang": "sglang"}


def package_version(dist: str, module: str) -> str | None:
    """Installed version of `dist`, falling back to `module.__version__`; None when not importable."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pass
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
    except Exception:  # a broken install is reported as "no version", not a crash of the benchmark
        return None
    return getattr(mod, "__version__", None)


def git_commit(repo: Path = REPO_ROOT) -> str | None:
    """HEAD of the toolkit checkout (with '+dirty' when tracked files changed), or None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def jit_cache_dir() -> dict[str, str | None]:
    """FlashInfer's JIT cache: $FLASHINFER_WORKSPACE_BASE (default: home)/.cache/flashinfer, as flashinfer.jit.env."""
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    root = Path(base) if base else Path.home()
    return {"flashinfer_workspace_base": base, "jit_cache_dir": str(root / ".cache" / "flashinfer")}


def gpu_info() -> dict[str, Any]:
    """GPU 0 as torch sees it (name, SMs, memory, L2, compute capability), CUDA runtime and driver versions."""
    info: dict[str, Any] = {"gpu_name": None, "gpu_count": 0, "sm_count": None, "gpu_memory_gib": None,
                            "l2_cache_mib": None, "compute_capability": None, "cuda_runtime": None,
                            "driver": driver_version()}
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


def driver_version() -> str | None:
    """NVIDIA driver version through NVML (nvidia-ml-py) or nvidia-smi; None without a driver."""
    if importlib.util.find_spec("pynvml") is None:
        try:  # the server's Python may lack nvidia-ml-py; nvidia-smi ships with the driver
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return out.splitlines()[0].strip() if out.strip() else None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError when no driver is loaded: a CPU machine, not an error
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def describe(include_gpu: bool = True) -> dict[str, Any]:
    """The environment record stored under "env" in every Phase 4 JSON."""
    out: dict[str, Any] = {
        "flashinfer": package_version("flashinfer-python", "flashinfer"),
        "torch": package_version("torch", "torch"),
        "sglang": package_version("sglang", "sglang"),
        "python": platform.python_version(),
        "hostname": platform.node(),
        "cpu_cores": os.cpu_count(),
        "git_commit": git_commit(),
        **jit_cache_dir(),
    }
    if include_gpu:
        out.update(gpu_info())
    return out


def document(stage: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    """{"schema": 1, "created_at", "env", "command", **stage}: the envelope of every Phase 4 result JSON."""
    return {"schema": 1, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "env": describe(), "command": list(sys.argv if argv is None else argv), **stage}


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write JSON beside `path` under a temp name, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, path)


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
