"""What FlashInfer's decode planner decided, and how split-KV is switched off or forced.

plan() returns its schedule as a vector of int64 (`wrapper._plan_info`), whose layout is FlashInfer's C++ struct
(include/flashinfer/attention/scheduler.cuh, 0.6.x):
- tensor-core decode runs the prefill kernel: PrefillPlanInfo, 15 fields — [0] padded_batch_size (work units, one
  CTA per (request, KV head group) chunk), [3] cta_tile_q (query rows per CTA: query tokens x heads per KV head),
  [9] kv_chunk_size_ptr_offset, [13] enable_cuda_graph, [14] split_kv;
- CUDA-core decode: DecodePlanInfo, 10 fields — [0] padded_batch_size, [7] kv_chunk_size_ptr_offset,
  [8] enable_cuda_graph, [9] split_kv.
The KV chunk length itself sits in the pinned int workspace at kv_chunk_size_ptr_offset (bytes, one int32). Another
layout (another FlashInfer) fails with a message naming the sizes instead of being misread.

The planner splits only while the split work fits 2 x SMs / KV heads work units (PrefillBinarySearchKVChunkSize);
larger batches keep one chunk per request. A forced split (`fixed_split_size`, tensor-core path only) shows what
splitting would have cost or saved there. Pure except `decision` (reads the wrapper) and the timers below.
"""
from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from llmhost.stats import percentile

PLAN_LAYOUTS = {  # len(plan_info) -> (struct, index of padded_batch_size, of kv_chunk_size offset, of split_kv,
    15: ("PrefillPlanInfo", 0, 9, 14, 3),  # of cta_tile_q or None)
    10: ("DecodePlanInfo", 0, 7, 9, None),
}


class PlanInfoError(RuntimeError):
    """The wrapper's plan info is absent or has a layout this code does not know."""


def plan_parameters(plan: Callable) -> set[str]:
    """Keyword names a wrapper's plan() accepts, looking through a **kwargs forwarder to _plan_impl (0.6.x)."""
    names = set(inspect.signature(plan).parameters)
    impl = getattr(getattr(plan, "__self__", None), "_plan_impl", None)
    if impl is not None and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(plan).parameters.values()):
        names |= set(inspect.signature(impl).parameters)
    return names


def split_control(names: set[str]) -> dict:
    """How split-KV can be switched off / forced with this FlashInfer, from plan()'s parameters."""
    return {"off": "disable_split_kv" if "disable_split_kv" in names else None,
            "forced": "fixed_split_size" if "fixed_split_size" in names else None,
            "note": "off = plan(disable_split_kv=True): one CTA per request and KV head, no merge; forced = "
                    "plan(fixed_split_size=N pages): every request cut into N-page chunks, merged afterwards"}


def parse_plan_info(values: Sequence[int]) -> dict:
    """{'struct', 'work_units', 'split_kv', 'chunk_offset', 'cta_tile_q'} from a plan-info vector (PlanInfoError if
    unknown); cta_tile_q is None for the CUDA-core layout, which has no query tile."""
    layout = PLAN_LAYOUTS.get(len(values))
    if layout is None:
        raise PlanInfoError(f"plan info has {len(values)} fields; this code knows {sorted(PLAN_LAYOUTS)} "
                            "(FlashInfer 0.6.x PrefillPlanInfo / DecodePlanInfo)")
    struct, units, chunk, split, tile = layout
    return {"struct": struct, "work_units": int(values[units]), "split_kv": bool(values[split]),
            "chunk_offset": int(values[chunk]), "cta_tile_q": int(values[tile]) if tile is not None else None}


def decision(wrapper: Any, page_size: int) -> dict:
    """The planner's split decision after plan(): work units, split or not, KV chunk length in tokens."""
    info = getattr(wrapper, "_plan_info", None)
    if info is None:
        raise PlanInfoError("the wrapper has no _plan_info after plan(): not FlashInfer 0.6.x's decode wrapper")
    parsed = parse_plan_info([int(x) for x in info])
    pinned = getattr(wrapper, "_pin_memory_int_workspace_buffer", None)
    chunk_tokens = None
    if pinned is not None and 0 <= parsed["chunk_offset"] <= pinned.numel() - 4:
        # a host int32 the planner wrote, in tokens (FlashInfer multiplies pages by page_size); the offset is only
        # 1-byte aligned, so it is read as bytes. disable_split_kv stores "no limit" (an overflowed huge value).
        raw = bytes(pinned[parsed["chunk_offset"]:parsed["chunk_offset"] + 4].tolist())
        chunk_tokens = chunk_from_bytes(raw)
    return {"split_kv": parsed["split_kv"], "work_units": parsed["work_units"], "kv_chunk_tokens": chunk_tokens,
            "plan_struct": parsed["struct"], "cta_tile_q": parsed["cta_tile_q"], "page_size": page_size}


def chunk_from_bytes(raw: bytes) -> int | None:
    """The planner's KV chunk length from its 4 little-endian bytes; None for 'no limit' (<= 0 after overflow)."""
    value = int.from_bytes(raw, "little", signed=True)
    return value if value > 0 else None


def forced_split_pages(pages_per_request: Sequence[int]) -> int:
    """Chunk length for the forced split: half the mean request length in pages (>= 1), so every request of average
    length is cut in two and a long one into proportionally more chunks — the split the planner declined."""
    if not pages_per_request:
        raise ValueError("no requests")
    return max(1, math.ceil(sum(pages_per_request) / len(pages_per_request) / 2))


def planner_cap(sm_count: int | None, num_kv_heads: int | None) -> int | None:
    """Work units the planner allows when splitting: 2 x SMs / KV heads (None when either is unknown)."""
    return 2 * sm_count // num_kv_heads if sm_count and num_kv_heads else None


def cpu_us(call: Callable[[], object], repeat: int, sync: Callable[[], object]) -> dict:
    """Median/p10/p90 wall time (us) of `call` over `repeat` synchronized calls, after 3 unmeasured ones."""
    samples = []
    for i in range(repeat + 3):  # the first calls load the kernel module and warm the host allocator
        sync()
        start = time.perf_counter()
        call()
        sync()
        if i >= 3:
            samples.append((time.perf_counter() - start) * 1e6)
    return {"median_us": statistics.median(samples), "p10_us": percentile(samples, 10),
            "p90_us": percentile(samples, 90), "n": len(samples)}
