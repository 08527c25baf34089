"""Where GPU facts come from: NVML (nvidia-ml-py) when the library and the driver are there, else `nvidia-smi`'s
CSV queries, else nothing. The one rule serve's GPU memory, the benchmark's telemetry and the runs' provenance share;
on a host without an NVIDIA driver both answer "none" instead of failing. Nothing is written.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Any


def nvml() -> Any | None:
    """The initialised pynvml module, or None when the library or the driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None


def smi(query: str, kind: str = "gpu", timeout_s: float = 20) -> list[list[str]]:
    """Rows of `nvidia-smi --query-<kind>=<query>` as stripped cells; [] when nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
