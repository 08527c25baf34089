"""GPU memory queries: the nvidia-smi fallback parsed from a fake nvidia-smi, and a clean "no GPU" without one."""
from __future__ import annotations

import os
import stat

import pytest

from llmhost.serve import gpu

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.used,memory.total) echo "0, NVIDIA H200, 81234, 143771" ;;
  --query-gpu=index,gpu_uuid) echo "0, GPU-aaaa" ;;
  --query-compute-apps=pid,used_memory) echo "unexpected" ;;
  --query-compute-apps=pid,gpu_uuid,used_memory) printf '4121, GPU-aaaa, 80000\\n4188, GPU-aaaa, [N/A]\\n' ;;
  *) exit 9 ;;
esac
"""


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setattr(gpu, "_nvml", lambda: None)


@pytest.fixture
def fake_smi(tmp_path, monkeypatch, no_nvml):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_nvidia_smi_fallback_reads_memory_and_processes(fake_smi):
    assert gpu.devices() == [gpu.GpuMemory(0, "NVIDIA H200", 81234.0, 143771.0)]
    assert gpu.processes() == [gpu.GpuProcess(4121, 0, 80000.0), gpu.GpuProcess(4188, 0, None)]
    assert [p.pid for p in gpu.held_by([4188, 99])] == [4188]
    assert gpu.describe(gpu.devices()) == "gpu0 NVIDIA H200 79.3/140.4 GiB used"


def test_wait_released_times_out_while_a_pid_still_holds_memory(fake_smi):
    assert gpu.wait_released([4121], timeout_s=0.2, interval_s=0.05) is False
    assert gpu.wait_released([1, 2], timeout_s=0.5, interval_s=0.05) is True


def test_without_a_driver_every_query_answers_no_gpu(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.devices() == [] and gpu.processes() == []
    assert gpu.describe([]).startswith("no GPU")
    assert gpu.wait_released_line([1], timeout_s=1) == (True, "no GPU on this host — nothing to wait for")


def test_wait_released_also_waits_for_used_memory_to_settle(monkeypatch):
    readings = iter([120000.0, 60000.0, 900.0, 900.0, 900.0])
    seen = []

    def devices():
        seen.append(next(readings))
        return [gpu.GpuMemory(0, "H200", seen[-1], 143771.0)]

    monkeypatch.setattr(gpu, "held_by", lambda pids: [])  # NVML shows other PID namespaces: nothing to match
    monkeypatch.setattr(gpu, "devices", devices)
    assert gpu.wait_released([4121], timeout_s=5, interval_s=0.01) is True
    assert seen == [120000.0, 60000.0, 900.0, 900.0]
