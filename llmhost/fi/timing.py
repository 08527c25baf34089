"""The one GPU timer of the FlashInfer benchmarks, and the summary every result table uses.

Three methods, one function (`gpu_time_ms`), all returning per-iteration samples in ms:

- "graph": FlashInfer's CUDA-graph method (flashinfer.testing.bench_gpu_time_with_cudagraph), written out here
  because flashinfer.testing imports einops, which the GPU host's server Python lacks: 10 calls captured in one CUDA
  graph, replays queued back to back with an event between each, sample = event gap / 10. The Python launch of
  `wrapper.run()` (tens of us, on the order of a 60-80 us kernel) is outside the measurement, and because the queue
  stays ahead of the GPU there is no launch gap between replays either. L2 is not flushed between the calls: every
  case timed this way reads >= 4x the L2 size of KV per call (sparse: 512 MiB+, balance: 256 MiB+), so the KV
  streams from HBM while q, o and the page table stay in L2 — as in a server step, where the previous kernel just
  wrote q.
- "cupti": `flashinfer.testing.bench_gpu_time_with_cupti` — kernel time from CUPTI activity records. It needs the
  `cupti-python` (>= 13) package (and einops); without it FlashInfer silently falls back to events, so it is only
  used when that package imports. The offline GPU host has neither, so "graph" is what runs there
  (`precise_method()` says which).
- "event": a CUDA-event pair around each eager call, after a read-only L2 flush (`L2Flush`). Kept to show what the
  simpler timer reports: its difference to "graph" is mostly the launch gap (the GPU idles while Python prepares
  the launch) plus the few MB of q, o and page table that "graph" finds in L2; stored per case.

`summarize` is pure and unit-tested (its percentiles are llmhost.stats', numpy's linear rule).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import statistics
from collections.abc import Callable, Sequence
from typing import Literal

from llmhost.stats import percentile

Method = Literal["event", "graph", "cupti"]
CALLS_PER_GRAPH = 10  # FlashInfer's default num_iters_within_graph: a ~5 us replay launch is 0.5 us per call
WARMUP_MS = 25  # time-budgeted warm-up (FlashInfer's dry_run_time_ms): a 20 us and a 2 ms kernel both settle


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Median and p10/p90 of per-iteration times in ms, with the sample count."""
    return {"median_ms": statistics.median(samples), "p10_ms": percentile(samples, 10),
            "p90_ms": percentile(samples, 90), "n": len(samples)}


def has_cupti() -> bool:
    """cupti-python >= 13 importable (what bench_gpu_time_with_cupti needs instead of falling back to events)."""
    if importlib.util.find_spec("cupti") is None:
        return False
    try:
        return int(importlib.metadata.version("cupti-python").split(".")[0]) >= 13
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False


def precise_method() -> Method:
    """The launch-free timer this host supports: CUPTI when cupti-python is installed, else CUDA-graph replay."""
    return "cupti" if has_cupti() else "graph"


def gpu_time_ms(fn: Callable[[], object], *, repeat: int, method: Method = "graph") -> list[float]:
    """Per-iteration GPU times (ms) of `fn()` over `repeat` measured iterations, after a warm-up."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if method not in TIMERS:
        raise ValueError(f"unknown timing method {method!r} (choose from {', '.join(TIMERS)})")
    return [float(x) for x in TIMERS[method](fn, repeat)]


def _graph_ms(fn: Callable[[], object], repeat: int) -> list[float]:
    import torch

    stream = torch.cuda.Stream()  # torch requires the warm-up before a capture on a side stream
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    torch.cuda.synchronize()
    probe = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    probe[0].record()
    graph.replay()
    probe[1].record()
    torch.cuda.synchronize()
    for _ in range(max(1, int(WARMUP_MS / max(probe[0].elapsed_time(probe[1]), 1e-3)))):
        graph.replay()  # warm-up by time; also keeps the GPU busy while the timed replays are queued
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeat + 1)]
    events[0].record()
    for event in events[1:]:
        graph.replay()
        event.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) / CALLS_PER_GRAPH for a, b in zip(events, events[1:])]


def _cupti_ms(fn: Callable[[], object], repeat: int) -> list[float]:
    if not has_cupti():  # FlashInfer would warn and time with events instead: say so rather than mislabel
        raise RuntimeError("CUPTI timing needs cupti-python >= 13 (pip install cupti-python); use --timing graph")
    try:
        from flashinfer.testing import bench_gpu_time_with_cupti
    except ImportError as exc:
        raise RuntimeError(f"flashinfer.testing is not importable ({exc}); use --timing graph") from None
    return bench_gpu_time_with_cupti(fn, repeat_iters=repeat, dry_run_time_ms=WARMUP_MS, cold_l2_cache=True)


class L2Flush:
    """Evicts L2 by reading (not writing) a buffer of twice its size.

    A zero_() flush leaves L2 full of dirty lines, and their write-back to HBM then overlaps the timed kernel. A
    reduction reads 2 x L2 of clean lines and writes 4 bytes: any dirty lines of the previous kernel are written back
    during the flush, and the timed kernel starts on an L2 holding only clean data it does not use.
    """

    def __init__(self) -> None:
        import torch

        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 * 2**20
        self.buffer = torch.ones(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")

    def __call__(self) -> None:
        self.buffer.amax()


def _event_ms(fn: Callable[[], object], repeat: int) -> list[float]:
    import torch

    flush = L2Flush()
    for _ in range(max(3, repeat // 4)):  # warm-up: JIT load, clocks, allocator
        flush()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


TIMERS: dict[str, Callable[[Callable[[], object], int], list[float]]] = {
    "event": _event_ms, "graph": _graph_ms, "cupti": _cupti_ms}


def timer_comparison(cases: Sequence[dict], label: Callable[[dict], str]) -> dict:
    """Which timer the cases' numbers come from, and how far the event timer lands from it (median, range, and the
    case with the largest gap), from records made by `timed`."""
    if not cases:
        return {}
    compared = [c for c in cases if c.get("event_over_precise")]
    out = {"method": cases[0].get("timing"), "compared": len(compared)}
    if compared:
        ratios = [c["event_over_precise"] for c in compared]
        worst = max(compared, key=lambda c: abs(c["event_over_precise"] - 1))
        out.update(event_over_precise_median=statistics.median(ratios), event_over_precise_min=min(ratios),
                   event_over_precise_max=max(ratios), largest_gap_case=label(worst),
                   largest_gap_us=worst["event_median_us"] - worst["median_us"])
    return out


def timed(fn: Callable[[], object], *, repeat: int, method: Method, compare_events: bool) -> dict:
    """The case's timing record: precise method's median/p10/p90 in us and samples, plus the event timer's median
    and the ratio event / precise when compare_events (what bracketing a Python launch would have reported)."""
    samples = gpu_time_ms(fn, repeat=repeat, method=method)
    stats = summarize(samples)
    out = {"timing": method, "median_us": stats["median_ms"] * 1e3, "p10_us": stats["p10_ms"] * 1e3,
           "p90_us": stats["p90_ms"] * 1e3, "n": stats["n"], "samples_ms": samples}
    if compare_events and method != "event":
        event_us = statistics.median(gpu_time_ms(fn, repeat=repeat, method="event")) * 1e3
        out.update(event_median_us=event_us, event_over_precise=event_us / out["median_us"])
    return out
