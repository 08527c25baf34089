"""Split-KV sizes by hand: the forced chunk rounds half a request up (an average request gives two chunks, not
three), the planner's chunk is read even from the workspace's last four bytes, and the CPU timer states microseconds."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmhost.fi import split_plan


def test_forced_split_rounds_half_the_mean_request_up():
    assert split_plan.forced_split_pages([5, 5]) == 3  # 5 pages -> chunks of 3 + 2, not 2 + 2 + 1
    assert split_plan.forced_split_pages([3, 4]) == 2  # mean 3.5 pages, half 1.75 -> 2


class Workspace:
    """The pinned int workspace as decision() reads it: numel(), byte slices, tolist()."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def numel(self) -> int:
        return len(self.data)

    def __getitem__(self, index: slice) -> "Workspace":
        return Workspace(self.data[index])

    def tolist(self) -> list[int]:
        return list(self.data)


def test_a_chunk_length_in_the_last_four_bytes_of_the_workspace_is_read():
    info = [128, 0, 0, 0, 16, 32, 48, 60, 0, 1]  # DecodePlanInfo, kv_chunk_size_ptr_offset 60
    wrapper = SimpleNamespace(_plan_info=info,
                              _pin_memory_int_workspace_buffer=Workspace(bytes(60) + (512).to_bytes(4, "little")))
    got = split_plan.decision(wrapper, page_size=16)
    assert got["kv_chunk_tokens"] == 512 and got["split_kv"] is True and got["work_units"] == 128


def test_cpu_timer_samples_are_microseconds(monkeypatch):
    clock = [0.0]

    def call() -> None:
        clock[0] += 250e-6  # every call takes 250 us

    monkeypatch.setattr(split_plan, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    got = split_plan.cpu_us(call, 4, lambda: None)
    assert got["n"] == 4
    assert got["median_us"] == pytest.approx(250.0) and got["p90_us"] == pytest.approx(250.0)
