"""The records of a `run_bench.py --single-stream` run (llmhost.bench.single_stream), typed like every record of a
run (llmhost.bench.records: one writer `to_dict`, one reader `from_dict`, the run's schema number):

    stream_requests.jsonl     StreamRequestRecord  one measured request: its chunk gaps
    stream_arms.jsonl         StreamArmRecord      one arm: client and server figures per output token
    stream_kernels.jsonl      StreamKernelRecord   one arm: GPU kernel time per forward pass (SGLang's profiler)

and of `run_bench.py --kernel-profile` (llmhost.bench.load_profile):

    point_kernels.jsonl       PointKernelRecord    one closed-loop load: GPU kernel time per forward pass under it
"""
from __future__ import annotations

import dataclasses

from llmhost.bench.records import Record, Status


@dataclasses.dataclass(frozen=True, slots=True)
class StreamRequestRecord(Record):
    """One measured request of a `run_bench.py --single-stream` run (llmhost.bench.single_stream)."""

    arm: str
    number: int  # 1..N within the arm
    ok: bool
    error: str
    output_tokens: int
    ttft_ms: float | None  # first content chunk
    itl_ms: tuple[float, ...]  # gaps between consecutive content chunks, as the client saw them


@dataclasses.dataclass(frozen=True, slots=True)
class StreamArmRecord(Record):
    """One arm of a --single-stream run: what was measured, medians over its window; None = not measured."""

    arm: str
    status: Status
    requests_ok: int
    client_itl_p50_ms: float | None  # pooled over the requests' chunk gaps
    client_itl_p90_ms: float | None
    client_itl_mean_ms: float | None  # what the streaming part is taken from: a mean, like the server's windows
    server_step_ms: float | None  # median of 1000 / gen throughput over the steady one-request Decode lines
    gpu_forward_ms: float | None  # median of step x fwd occupancy / 100 (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1)
    occupancy_pct: float | None
    sglang_read_gb_s: float | None  # SGLang's est. read BW (--enable-mfu-metrics)
    tokenizer_itl_ms: float | None  # the ITL histogram's sum/count delta over the window (tokenizer manager)
    decode_lines: int  # steady one-request Decode lines the server figures come from
    weight_bytes: int | None  # read per decode token (llmhost.bench.floor); None: not stated, see floor_note
    peak_gb_s: float | None  # datasheet HBM bandwidth of the GPU; None: unknown GPU
    floor_note: str = ""  # why the floor is not stated, when it is not
    error: str = ""  # why the arm failed (its restart, every request)


@dataclasses.dataclass(frozen=True, slots=True)
class KernelShare:
    """One kernel name's part of a forward pass."""

    name: str
    ms_per_step: float
    calls_per_step: float


@dataclasses.dataclass(frozen=True, slots=True)
class StreamKernelRecord(Record):
    """One arm's profiled forward passes (llmhost.bench.kernel_profile); None / empty = not measured."""

    arm: str
    status: Status
    steps: int  # forward passes profiled
    kernel_ms: float | None  # GPU kernel time per forward pass
    span_ms: float | None  # first kernel start to last kernel end, per forward pass
    by_category: dict[str, float]  # ms per forward pass, largest first
    top: tuple[KernelShare, ...]  # the kernels that took longest
    trace_file: str  # under raw/profile-<arm>/
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class PointKernelRecord(Record):
    """One closed-loop load's profiled forward passes (llmhost.bench.load_profile); None / empty = not measured."""

    point_id: str  # the profile pass: its point's id + ".profile"
    arm: str
    workload: str
    concurrency: int
    status: Status
    steps: int  # forward passes profiled
    decode_steps: int  # of them decode steps, the rest extends (prefills) of arriving requests
    extend_passes: int
    kernel_ms: float | None  # GPU kernel time per forward pass (decode and extend alike)
    span_ms: float | None  # first kernel start to last kernel end, per forward pass
    by_category: dict[str, float]  # ms per forward pass, largest first
    top: tuple[KernelShare, ...]  # the kernels that took longest
    decode_attention_ms: float | None  # attention kernels per decode step
    extend_attention_ms: float | None  # causal attention kernels per extend
    trace_file: str  # under raw/profile-<point id>/
    error: str = ""
    # GPU wall time per pass, idle included (None: the trace's passes could not be told apart, or none of the kind)
    decode_step_ms: float | None = None
    extend_pass_ms: float | None = None
