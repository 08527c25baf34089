"""The planner bookkeeping: plan-info vectors decoded by FlashInfer 0.6.x's struct layouts, the KV chunk read from
its bytes, the forced split size, the planner's work-unit cap, and which split controls a plan() offers."""
from __future__ import annotations

import pytest

from llmhost.fi import split_plan


def prefill_info(work_units: int, split: bool, chunk_offset: int = 96) -> list[int]:
    """A PrefillPlanInfo vector (15 fields) as plan() returns it for tensor-core decode."""
    return [work_units, 64, 0, 16, 0, 16, 32, 48, 64, chunk_offset, 0, 0, 80, 0, int(split)]


def test_tensor_core_plan_info_gives_work_units_and_the_split_decision():
    got = split_plan.parse_plan_info(prefill_info(33, True))
    assert got == {"struct": "PrefillPlanInfo", "work_units": 33, "split_kv": True, "chunk_offset": 96,
                   "cta_tile_q": 16}
    assert split_plan.parse_plan_info(prefill_info(512, False))["split_kv"] is False


def test_cuda_core_plan_info_is_the_ten_field_decode_layout():
    got = split_plan.parse_plan_info([128, 0, 0, 0, 16, 32, 48, 112, 0, 1])
    assert got == {"struct": "DecodePlanInfo", "work_units": 128, "split_kv": True, "chunk_offset": 112,
                   "cta_tile_q": None}


def test_an_unknown_layout_fails_with_the_sizes_instead_of_being_misread():
    with pytest.raises(split_plan.PlanInfoError, match="12 fields.*\\[10, 15\\]"):
        split_plan.parse_plan_info([0] * 12)


class FakeWrapper:
    """What decision() reads: _plan_info and the pinned int workspace (uint8 bytes, as FlashInfer allocates it)."""

    def __init__(self, info: list[int] | None, chunk_bytes: bytes = b"", offset: int = 96) -> None:
        self._plan_info = info
        buffer = bytearray(256)
        buffer[offset:offset + len(chunk_bytes)] = chunk_bytes
        self._pin_memory_int_workspace_buffer = FakeBytes(buffer)


class FakeBytes:
    def __init__(self, data: bytearray) -> None:
        self.data = data

    def numel(self) -> int:
        return len(self.data)

    def __getitem__(self, index: slice) -> FakeBytes:
        return FakeBytes(self.data[index])

    def tolist(self) -> list[int]:
        return list(self.data)


def test_decision_reads_the_chunk_length_the_planner_wrote_at_an_unaligned_offset():
    wrapper = FakeWrapper(prefill_info(33, True, chunk_offset=97), (2048).to_bytes(4, "little"), offset=97)
    got = split_plan.decision(wrapper, page_size=1)
    assert got == {"split_kv": True, "work_units": 33, "kv_chunk_tokens": 2048, "plan_struct": "PrefillPlanInfo",
                   "cta_tile_q": 16, "page_size": 1}


def test_disable_split_kv_overflowed_chunk_reads_as_no_limit_and_a_missing_plan_is_an_error():
    assert split_plan.chunk_from_bytes((-1).to_bytes(4, "little", signed=True)) is None
    assert split_plan.chunk_from_bytes((256).to_bytes(4, "little")) == 256
    with pytest.raises(split_plan.PlanInfoError, match="_plan_info"):
        split_plan.decision(FakeWrapper(None), page_size=1)


def test_forced_split_cuts_an_average_request_in_two():
    assert split_plan.forced_split_pages([512] * 128) == 256  # uniform: every request in 2 chunks
    assert split_plan.forced_split_pages([32768] + [256] * 127) == 255  # one-long: mean 510 pages -> 255
    assert split_plan.forced_split_pages([1, 1]) == 1
    with pytest.raises(ValueError):
        split_plan.forced_split_pages([])


def test_planner_cap_is_two_work_units_per_sm_over_kv_heads():
    assert split_plan.planner_cap(132, 8) == 33  # H200, Qwen3-4B
    assert split_plan.planner_cap(None, 8) is None


def test_split_controls_come_from_plan_parameters_looking_through_a_kwargs_forwarder():
    class Wrapper:  # the shape of FlashInfer 0.6.x: plan(*args, **kwargs) -> _plan_impl(..., disable_split_kv)
        def plan(self, indptr, *deprecated, **kwargs): ...

        def _plan_impl(self, indptr, *, fixed_split_size=None, disable_split_kv=False): ...

    names = split_plan.plan_parameters(Wrapper().plan)
    control = split_plan.split_control(names)
    assert control["off"] == "disable_split_kv" and control["forced"] == "fixed_split_size"
    assert split_plan.split_control({"indptr"})["off"] is None


def test_cpu_timer_drops_three_warm_up_calls_and_syncs_around_each():
    calls: list[str] = []
    got = split_plan.cpu_us(lambda: calls.append("call"), 5, lambda: calls.append("sync"))
    assert got["n"] == 5 and calls.count("call") == 8 and calls.count("sync") == 16
    assert 0 <= got["p10_us"] <= got["median_us"] <= got["p90_us"]


def test_the_chunk_is_read_at_either_end_of_the_workspace_and_not_past_it():
    at_start = FakeWrapper(prefill_info(33, True, chunk_offset=0), (512).to_bytes(4, "little"), offset=0)
    assert split_plan.decision(at_start, page_size=16)["kv_chunk_tokens"] == 512
    at_end = FakeWrapper(prefill_info(33, True, chunk_offset=252), (1024).to_bytes(4, "little"), offset=252)
    assert split_plan.decision(at_end, page_size=16)["kv_chunk_tokens"] == 1024  # bytes 252-255 of 256
    past_end = FakeWrapper(prefill_info(33, True, chunk_offset=253), b"\x01\x01\x01", offset=253)
    assert split_plan.decision(past_end, page_size=16)["kv_chunk_tokens"] is None
    no_workspace = FakeWrapper(prefill_info(33, True))
    del no_workspace._pin_memory_int_workspace_buffer
    assert split_plan.decision(no_workspace, page_size=16) == {
        "split_kv": True, "work_units": 33, "kv_chunk_tokens": None, "plan_struct": "PrefillPlanInfo",
        "cta_tile_q": 16, "page_size": 16}


def test_a_chunk_of_one_token_is_a_chunk_and_zero_is_no_limit():
    assert split_plan.chunk_from_bytes((1).to_bytes(4, "little")) == 1
    assert split_plan.chunk_from_bytes((0).to_bytes(4, "little")) is None


def test_a_plan_without_a_kwargs_forwarder_is_taken_at_its_word():
    class Explicit:  # _plan_impl exists but plan() cannot forward to it
        def plan(self, indptr, fixed_split_size=None): ...

        def _plan_impl(self, indptr, *, disable_split_kv=False): ...

    assert split_plan.plan_parameters(Explicit().plan) == {"indptr", "fixed_split_size"}

    class Forwarder:
        def plan(self, indptr, **kwargs): ...

        def _plan_impl(self, indptr, *, disable_split_kv=False): ...

    assert split_plan.plan_parameters(Forwarder().plan) == {"indptr", "kwargs", "disable_split_kv"}
    assert split_plan.plan_parameters(lambda indptr, **kwargs: None) == {"indptr", "kwargs"}  # nothing behind it


def test_bad_plans_and_empty_batches_are_one_line_errors():
    with pytest.raises(split_plan.PlanInfoError, match="the wrapper has no _plan_info after plan\\(\\): not "
                                                       "FlashInfer 0.6.x's decode wrapper"):
        split_plan.decision(FakeWrapper(None), page_size=1)
    with pytest.raises(split_plan.PlanInfoError, match="plan info has 12 fields; this code knows \\[10, 15\\] "
                                                       "\\(FlashInfer 0.6.x PrefillPlanInfo / DecodePlanInfo\\)"):
        split_plan.parse_plan_info([0] * 12)
    with pytest.raises(ValueError, match="^no requests$"):
        split_plan.forced_split_pages([])
