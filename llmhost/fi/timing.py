"""The one GPU timer of the FlashInfer benchmarks, and the summary every result table uses.

`gpu_time_ms` prefers FlashInfer's own `flashinfer.testing.bench_gpu_time` (time-budgeted warm-up, L2 flushed before
every iteration, optional CUDA graph) and falls back to the same method written out: a CUDA-event pair around each
call, with a buffer twice the L2 size zeroed before it, so every iteration reads its KV from HBM as a real decode step
does (a 4K-token batch is far larger than L2, but the q/o and page-table reads would otherwise be cached).
`summarize` is pure and unit-tested.
"""
from __future__ import annotations

import inspect
import statistics
from collections.abc import Callable, Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), the same rule as numpy's default."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Median and p10/p90 of per-iteration times in ms, with the sample count."""
    return {"median_ms": statistics.median(samples), "p10_ms": percentile(samples, 10),
            "p90_ms": percentile(samples, 90), "n": len(samples)}


def gpu_time_ms(fn: Callable[[], object], *, repeat: int, cold_l2: bool = True,
                cuda_graph: bool = False) -> list[float]:
    """Per-iteration GPU times (ms) of `fn()` over `repeat` measured iterations, after a warm-up."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    try:
        from flashinfer.testing import bench_gpu_time
    except ImportError:  # older FlashInfer without the testing module: same method, written out below
        return _event_loop_ms(fn, repeat=repeat, cold_l2=cold_l2, cuda_graph=cuda_graph)
    # dry_run_time_ms: warm-up by time rather than count, so a 20 us kernel and a 2 ms kernel both settle clocks.
    # FlashInfer < 0.5 called the cold-L2 switch l2_flush; pass whichever this version has.
    params = inspect.signature(bench_gpu_time).parameters
    cold = {"cold_l2_cache": cold_l2} if "cold_l2_cache" in params else {"l2_flush": cold_l2}
    return list(bench_gpu_time(fn, repeat_iters=repeat, dry_run_time_ms=25, use_cuda_graph=cuda_graph, **cold))


def _event_loop_ms(fn: Callable[[], object], *, repeat: int, cold_l2: bool, cuda_graph: bool) -> list[float]:
    """CUDA-event timing with an L2 flush before each call (optionally replaying a captured CUDA graph)."""
    import torch

    call = _as_graph(fn) if cuda_graph else fn
    flush = None
    if cold_l2:
        l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 * 2**20
        flush = torch.empty(2 * l2_bytes, dtype=torch.int8, device="cuda")
    for _ in range(max(3, repeat // 4)):  # warm-up: JIT load, clocks, allocator
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def _as_graph(fn: Callable[[], object]) -> Callable[[], object]:
    """Capture fn once into a CUDA graph (after a side-stream warm-up, as torch requires) and return its replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay
