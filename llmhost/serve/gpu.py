"""GPU memory and the processes holding it: NVML (nvidia-ml-py) first, `nvidia-smi` as the fallback.

On a host without an NVIDIA driver both are absent and every query answers "no GPU" (empty lists) instead of
failing, so serve.sh and the CPU test suite run anywhere.

Used by `python -m llmhost.serve` (restart waits for the old server's memory; status; the auto memory
fraction) and the benchmark's telemetry. Nothing is written.
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable

from llmhost.nvidia import nvml as _nvml, smi as _smi


@dataclasses.dataclass(frozen=True, slots=True)
class GpuMemory:
    index: int
    name: str
    used_mib: float
    total_mib: float


@dataclasses.dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    gpu_index: int
    used_mib: float | None  # None where the driver does not report it (e.g. some containers)


def _mib(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]"
        return None


def devices() -> list[GpuMemory]:
    """Memory of every visible GPU; [] on a host without a GPU driver."""
    nvml = _nvml()
    if nvml is not None:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            out.append(GpuMemory(i, name, mem.used / 2**20, mem.total / 2**20))
        return out
    rows = _smi("index,name,memory.used,memory.total", "gpu")
    return [GpuMemory(int(r[0]), r[1], _mib(r[2]) or 0.0, _mib(r[3]) or 0.0) for r in rows if len(r) == 4]


def processes() -> list[GpuProcess]:
    """Compute processes on every GPU with the memory each holds; [] without a GPU driver."""
    nvml = _nvml()
    if nvml is not None:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = proc.usedGpuMemory
                out.append(GpuProcess(int(proc.pid), i, None if used is None else used / 2**20))
        return out
    index_of = {r[1]: int(r[0]) for r in _smi("index,gpu_uuid", "gpu") if len(r) == 2}
    rows = _smi("pid,gpu_uuid,used_memory", "compute-apps")
    return [GpuProcess(int(r[0]), index_of.get(r[1], -1), _mib(r[2])) for r in rows if len(r) == 3]


def held_by(pids: Iterable[int]) -> list[GpuProcess]:
    """The GPU processes among `pids`."""
    wanted = set(pids)
    return [p for p in processes() if p.pid in wanted]


def wait_released(pids: Iterable[int], timeout_s: float, interval_s: float = 1.0) -> bool:
    """Poll until none of `pids` holds GPU memory and the GPUs' used memory has settled; False on timeout.

    The settling step covers containers, where NVML reports host PIDs that never match ours: the driver frees
    a process's memory as it exits, so two equal readings (within 64 MiB) mean the release is done.
    """
    wanted = set(pids)
    deadline = time.monotonic() + timeout_s
    while held_by(wanted):
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    last = None
    while True:
        used = sum(d.used_mib for d in devices())
        if last is not None and abs(used - last) < 64:
            return True
        if time.monotonic() >= deadline:
            return False
        last = used
        time.sleep(interval_s)


def describe(gpus: list[GpuMemory]) -> str:
    """One line: 'gpu0 NVIDIA H200 12.3/139.8 GiB used' per GPU, or 'no GPU'."""
    if not gpus:
        return "no GPU (no NVIDIA driver: NVML and nvidia-smi unavailable)"
    return "; ".join(f"gpu{g.index} {g.name} {g.used_mib / 1024:.1f}/{g.total_mib / 1024:.1f} GiB used" for g in gpus)


def free_total_mib(index: int | None = None) -> tuple[float, float] | None:
    """(free, total) MiB of GPU `index`; None = the first of CUDA_VISIBLE_DEVICES, else gpu0. None: no such GPU."""
    if index is None:
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        index = int(first) if first.isdigit() else 0
    return next(((d.total_mib - d.used_mib, d.total_mib) for d in devices() if d.index == index), None)


def wait_released_line(pids: Iterable[int], timeout_s: float) -> tuple[bool, str]:
    """Wait for a stopped server's GPU memory: (released, one line saying so or who still holds it)."""
    pids = list(pids)
    if not devices():
        return True, "no GPU on this host — nothing to wait for"
    if wait_released(pids, timeout_s):
        return True, "GPU memory of the stopped server is released"
    held = ", ".join(f"pid {p.pid} ({p.used_mib or 0:.0f} MiB)" for p in held_by(pids))
    return False, f"GPU memory still held after {timeout_s:.0f}s by {held} — check nvidia-smi"
