"""The telemetry sampler's clock by hand (a stand-in clock, no sleeping): ticks stay on a fixed schedule however long
a scrape takes, a gap sample states the seconds lost, the closing warning adds up every gap, and NVML memory is the
memory in use, in GiB."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from llmhost.bench import telemetry
from llmhost.files import WriteError


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Stop:
    """Stands in for the sampler's stop event: records each wait, advances the clock by it, stops after `ticks`."""

    def __init__(self, clock: Clock, ticks: int) -> None:
        self.clock, self.ticks, self.waits = clock, ticks, []

    def is_set(self) -> bool:
        return len(self.waits) >= self.ticks

    def wait(self, timeout: float) -> None:
        self.waits.append(timeout)
        self.clock.now += timeout


def sampler(monkeypatch, sink, clock: Clock) -> telemetry.Sampler:
    monkeypatch.setattr(telemetry, "time", SimpleNamespace(time=clock, monotonic=clock))
    return telemetry.Sampler("http://127.0.0.1:9", sink, interval_s=1.0)


def test_a_slow_scrape_does_not_push_the_next_tick_back(monkeypatch):
    clock = Clock(1000.0)
    s = sampler(monkeypatch, lambda rows: None, clock)

    def slow_scrape() -> list:
        clock.now += 0.3  # every scrape takes 0.3 s of the 1 s interval
        return []

    s.sample_once = slow_scrape
    s._stop = stop = Stop(clock, ticks=3)
    s._loop()
    assert s.ticks == 3 and stop.waits == pytest.approx([0.7, 0.7, 0.7])


def test_the_gap_sample_states_the_seconds_lost_and_the_warning_adds_up_every_gap(monkeypatch):
    clock, written, fail = Clock(100.0), [], [True]

    def sink(rows) -> None:
        if fail[0]:
            raise WriteError("cannot write telemetry.jsonl: No space left on device")
        written.extend(rows)

    s = sampler(monkeypatch, sink, clock)
    s._write([])  # fails at t = 100: a gap opens
    clock.now, fail[0] = 104.0, False
    s._write([])  # works at t = 104: 4 s lost
    (gap,) = written
    assert (gap.source, gap.name, gap.t, gap.value) == ("gap", telemetry.GAP_NAME, 100.0, pytest.approx(4.0))
    s.gaps.append(telemetry.Gap(200.0, 206.0, "read-only file system"))
    assert "2 gap(s), 10 s not recorded (first: cannot write" in s.gap_warning()  # 4 s + 6 s


def test_nvml_memory_is_the_memory_in_use_in_gib(monkeypatch):
    fake = SimpleNamespace(
        NVMLError=Exception, NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetPowerUsage=lambda h: 350_500,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=24 * 2**30, free=117 * 2**30, total=141 * 2**30),
        nvmlDeviceGetClockInfo=lambda h, clock: 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    by = {r.name: r.value for r in telemetry.gpu_reader()(7.0, None)}
    assert by == {"gpu_util_pct": 97.0, "gpu_mem_used_gb": 24.0, "gpu_power_w": 350.5, "gpu_sm_clock_mhz": 1980.0}
