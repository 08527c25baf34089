"""The samples the telemetry sampler writes (llmhost.bench.telemetry), checked whole: each carries the tick's time,
its source, the running point and its labels; a line nvidia-smi could not format is skipped without losing the
GPUs after it; NVML is asked per GPU for the SM clock; a worker label only when there is a worker; the load
generator's CPU as % of one core between two readings of the same process, on a stand-in /proc."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmhost.bench import telemetry
from llmhost.bench.records import TelemetrySample


def test_every_nvidia_smi_sample_is_whole_and_a_malformed_line_skips_only_itself():
    text = "garbage line\n0, 50, 2048, 100.0, 1500\n"
    rows = telemetry.smi_rows(text, 12.5, "p7")
    assert rows == [TelemetrySample(12.5, "gpu", "gpu_util_pct", {"gpu": "0"}, 50.0, "p7"),
                    TelemetrySample(12.5, "gpu", "gpu_mem_used_gb", {"gpu": "0"}, 2.0, "p7"),
                    TelemetrySample(12.5, "gpu", "gpu_power_w", {"gpu": "0"}, 100.0, "p7"),
                    TelemetrySample(12.5, "gpu", "gpu_sm_clock_mhz", {"gpu": "0"}, 1500.0, "p7")]


def test_nvml_samples_are_whole_per_gpu_and_the_clock_asked_is_the_sm_clock_of_that_gpu():
    asked = []

    def clock(handle, which):
        asked.append((handle, which))
        return 1000 + handle

    fake = SimpleNamespace(
        NVMLError=RuntimeError, NVML_CLOCK_SM=7, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i * 10, nvmlDeviceGetPowerUsage=lambda h: 1000 * (h + 1),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=h), nvmlDeviceGetMemoryInfo=lambda h:
        SimpleNamespace(used=2**30), nvmlDeviceGetClockInfo=clock)
    rows = telemetry.nvml_reader(fake)(3.0, "p1")
    assert asked == [(0, 7), (10, 7)]
    assert rows[4:] == [TelemetrySample(3.0, "gpu", "gpu_util_pct", {"gpu": "1"}, 10.0, "p1"),
                        TelemetrySample(3.0, "gpu", "gpu_mem_used_gb", {"gpu": "1"}, 1.0, "p1"),
                        TelemetrySample(3.0, "gpu", "gpu_power_w", {"gpu": "1"}, 11.0, "p1"),
                        TelemetrySample(3.0, "gpu", "gpu_sm_clock_mhz", {"gpu": "1"}, 1010.0, "p1")]
    assert [r.labels["gpu"] for r in rows[:4]] == ["0"] * 4


def test_a_worker_label_is_added_only_for_a_worker():
    text = 'sglang:num_running_reqs{model_name="m"} 3\nsglang:not_kept 1\n'
    assert telemetry.metric_rows(text, 1.0, None) == [
        TelemetrySample(1.0, "metrics", "sglang:num_running_reqs", {"model_name": "m"}, 3.0, None)]
    assert telemetry.metric_rows(text, 2.0, "p", worker="worker1") == [
        TelemetrySample(2.0, "metrics", "sglang:num_running_reqs", {"model_name": "m", "worker": "worker1"}, 3.0,
                        "p")]


def test_the_load_generators_cpu_is_the_cpu_seconds_over_the_wall_seconds_of_one_process(monkeypatch):
    used: dict[int, float | None] = {41: 1.0}
    monkeypatch.setattr(telemetry.procfs, "cpu_seconds", lambda pid: used.get(pid))
    pid = [41]
    cpu = telemetry.ClientCpu(lambda: pid[0])
    assert cpu.read(10.0, "p") == []  # the baseline
    used[41] = 2.0
    assert cpu.read(12.0, "p") == [TelemetrySample(12.0, "client", telemetry.CLIENT_CPU, {}, 50.0, "p")]
    assert cpu.read(12.0, "p") == []  # no time passed: no rate
    used[41] = 2.5
    assert cpu.read(13.0, "q")[0].value == pytest.approx(50.0)  # against the reading at t=12, not t=10
    used[41] = None  # unreadable for a tick: the next reading is a new baseline
    assert cpu.read(14.0, "q") == []
    used[41] = 9.0
    assert cpu.read(15.0, "q") == []
    used[41] = 9.25
    assert cpu.read(15.5, "q")[0].value == pytest.approx(50.0)
    pid[0] = None
    assert cpu.read(16.0, "q") == []
    pid[0] = 41
    assert cpu.read(17.0, "q") == []  # after no process, a baseline again
