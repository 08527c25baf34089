"""What a forward pass spends on the GPU under load (`run_bench.py --kernel-profile`): SGLang's own profiler over
consecutive forward passes in the steady stretch of a closed-loop point, enough of them to span a whole request.

    passes = load_profile.passes(plan)                        # the extra pass per profiled load, for the ETA
    trigger = load_profile.Trigger(server, out_dir, completed_file, after_requests(point), profile_steps(point))
    ... the profile pass runs the point again with `trigger` polled every second ...
    rec = load_profile.collect(point, trigger, layers)        # PointKernelRecord: ok, or why not

The profiler pauses the scheduler while it writes its trace (seconds, after the profiled passes), so it never runs
in a measured pass: the first repeat of each closed-loop load is run once more, unmeasured, from the same start
(the prefix cache flushed and primed as for the measured pass: otherwise every prompt of the rerun would be a whole
cache hit and no extend would do the work the measured pass's did), and profiled once a third of that pass's
requests have finished, past its start-up wave (the load generator appends each finished request to the completed
file as it finishes: llmhost.bench.loadgen). The window is a quarter longer than a request's output: a closed loop
whose requests finish together refills in a wave once per output length, so a shorter window can fall between
two waves and see no extend at all (100 passes did so on an H200, agent c=64).

Under load the passes are of two kinds: decode steps, and extends (prefills) of arriving requests. FlashInfer names
a kernel by what it reads, not by the pass: SGLang's decode runs BatchPrefillWithPagedKVCacheKernel (tensor cores,
no mask: its one query token sees the whole context) or BatchDecodeWithPagedKVCacheKernel, and a split-KV merge; an
extend runs, once per layer, a kernel over its new tokens — the ragged one (on an H200, SGLang 0.5.17: FlashInfer's
SM90 PrefillWithKVCacheKernel<...RaggedParams...>, seen in its traces), or inside piecewise prefill graphs the paged
kernel with a causal mask (MaskMode 1) — then the paged kernel over the cached prefix and a merge, with a fill
between them. So a layer's attention is what runs between its QKV and output projections (two GEMMs); a layer with
a ragged or causal kernel is an extend's, prefix part and merge included; extends = such layers / layers per pass.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from llmhost.bench import kernel_profile
from llmhost.bench.records import Point
from llmhost.bench.stream_records import PointKernelRecord
from llmhost.bench.workloads import REGISTRY as WORKLOADS
from llmhost.serve.endpoints import ServerClient

MIN_STEPS = 100  # forward passes: ~1 s of agent c=64 decode on an H200
WINDOW_PER_OUTPUT = 1.25  # passes per output token of the workload: one whole request's lifetime, and some
START_AFTER = 1 / 3  # of the pass's requests finished: past the start-up wave of a closed loop
PROFILE_SUFFIX = ".profile"
# An extend's attention over its new tokens: FlashInfer's ragged kernel (BatchPrefillWithRaggedKVCacheKernel, or on
# Hopper the SM90 PrefillWithKVCacheKernel<CollectiveMainloop<RaggedParams...>>), or the paged one with a causal mask;
# on SGLang's Triton backend (--attention-backend or --prefill-attention-backend triton) its extend kernel
_CAUSAL = re.compile(r"ragged|maskmode\)1|^_fwd_kernel$")


def is_profiled(point: Point) -> bool:
    """Closed-loop points, first repeat: one profile per load."""
    return point.pattern == "concurrency" and point.repeat == 1 and not point.point_id.endswith(PROFILE_SUFFIX)


def passes(plan: list[Point]) -> list[Point]:
    """The profile passes a plan adds (as points, so that the estimate and the ETA count them)."""
    return [profile_pass(p) for p in plan if is_profiled(p)]


def profile_pass(point: Point) -> Point:
    return dataclasses.replace(point, point_id=point.point_id + PROFILE_SUFFIX)


def profile_steps(point: Point) -> int:
    """Forward passes to profile: every slot of the closed loop finishes one request and extends the next in it."""
    return max(MIN_STEPS, math.ceil(WINDOW_PER_OUTPUT * WORKLOADS[point.workload].output_len))


def after_requests(point: Point) -> int:
    return max(1, int(point.num_prompts * START_AFTER))


class Trigger:
    """Polled every second during the profile pass (the load generator's watch): once `after` requests have
    finished, asks the server to profile its next `steps` forward passes into out_dir — once. Returns '' (a watch
    that names no reason to stop the pass)."""

    def __init__(self, server: ServerClient, out_dir: Path, completed: Path, after: int, steps: int) -> None:
        self.server, self.out_dir, self.completed, self.after, self.steps = server, out_dir, completed, after, steps
        self.asked = False
        self.error = ""  # why the server refused, when it did
        self._offset = self._lines = 0

    def finished(self) -> int:
        """Lines the completed file has gained so far (read incrementally: the file grows during the pass)."""
        try:
            with open(self.completed, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return self._lines
        whole = chunk.rfind(b"\n") + 1  # a line still being written is counted once it ends
        self._offset += whole
        self._lines += chunk[:whole].count(b"\n")
        return self._lines

    def __call__(self) -> str:
        if not self.asked and self.finished() >= self.after:
            self.asked = True
            self.error = kernel_profile.start(self.server, self.out_dir, self.steps, prefix="load")
        return ""


@dataclasses.dataclass(frozen=True, slots=True)
class LayerRun:
    """One layer's attention in one forward pass: the attention kernels between its QKV and output projections."""
    start_us: float
    causal: int  # causal kernels in it (an extend's attention over its new tokens)
    us: float  # the run's kernel time


def layer_runs(kernels: list[tuple[str, float, float]]) -> list[LayerRun]:
    """Each layer's attention, in time order: the kernels between two GEMMs (a layer's QKV and output projections)
    with an attention kernel among them; their attention kernels' time (the rope, KV store or fill between them
    are not attention)."""
    runs: list[LayerRun] = []
    between: list[tuple[str, float, float]] = []
    for name, start, dur in [*sorted(kernels, key=lambda k: k[1]), ("gemm", 0.0, 0.0)]:  # the sentinel ends the last
        kind = kernel_profile.category(name)
        if kind == "attention":
            between.append((name.lower(), start, dur))
        elif kind == "GEMM" and between:
            causal = sum(1 for low, _, _ in between if _CAUSAL.search(low))
            runs.append(LayerRun(between[0][1], causal, sum(d for _, _, d in between)))
            between = []
    return runs


def attention_split(runs: list[LayerRun], layers: int) -> tuple[int, float, float]:
    """(extend passes, decode attention µs, extend attention µs): a layer whose attention has a causal kernel is an
    extend's, merges and prefix part included; the rest are decode steps'."""
    extend_us = sum(r.us for r in runs if r.causal)
    decode_us = sum(r.us for r in runs if not r.causal)
    return round(sum(1 for r in runs if r.causal) / layers) if layers else 0, decode_us, extend_us


def pass_spans(runs: list[LayerRun], layers: int, steps: int, begin_us: float,
               end_us: float) -> tuple[float | None, float | None]:
    """(ms per decode step, ms per extend), wall time on the GPU, idle included: a pass runs from its first layer's
    attention to the next pass's; the last one to the trace's end plus what ran before the first attention of the
    trace (the head of a pass: embedding, first norm, QKV). (None, None) when the runs are not `layers` per pass
    (a layer's attention split by another kernel): the passes cannot be told apart then."""
    if not layers or not runs or len(runs) != layers * steps:
        return None, None
    starts = [runs[k * layers].start_us for k in range(steps)] + [end_us + runs[0].start_us - begin_us]
    kinds = [any(r.causal for r in runs[k * layers:(k + 1) * layers]) for k in range(steps)]
    spans = [(kinds[k], starts[k + 1] - starts[k]) for k in range(steps)]
    decode = [us for extend, us in spans if not extend]
    extend = [us for extend, us in spans if extend]
    return (sum(decode) / len(decode) / 1000 if decode else None,
            sum(extend) / len(extend) / 1000 if extend else None)


def summarize(point: Point, kernels: list[tuple[str, float, float]], steps: int, layers: int,
              trace_file: str) -> PointKernelRecord:
    """The trace's kernels per forward pass by category (kernel_profile.summarize), with the passes split into
    decode steps and extends and the attention time with them."""
    base = kernel_profile.summarize(point.arm, kernels, steps, trace_file)
    if base.status != "ok":
        return failed(point, base.error)
    runs = layer_runs(kernels)
    extends, decode_us, extend_us = attention_split(runs, layers)
    decodes = max(0, steps - extends)
    decode_step_ms, extend_pass_ms = pass_spans(runs, layers, steps, min(s for _, s, _ in kernels),
                                                max(s + d for _, s, d in kernels))
    return PointKernelRecord(
        point_id=point.point_id, arm=point.arm, workload=point.workload, concurrency=point.concurrency or 0,
        status="ok", steps=steps, decode_steps=decodes, extend_passes=extends, kernel_ms=base.kernel_ms,
        span_ms=base.span_ms, by_category=base.by_category, top=base.top,
        decode_attention_ms=decode_us / decodes / 1000 if decodes else None,
        extend_attention_ms=extend_us / extends / 1000 if extends else None, decode_step_ms=decode_step_ms,
        extend_pass_ms=extend_pass_ms, trace_file=trace_file)


def collect(point: Point, trigger: Trigger, layers: int, pass_error: str = "") -> PointKernelRecord:
    """The profile pass's record: its trace summarized, or why there is none."""
    if not trigger.asked:
        why = pass_error or "the pass ended first"
        return failed(point, f"not profiled: {trigger.finished()} of the {trigger.after} requests to wait for "
                             f"finished ({why})")
    if trigger.error:
        return failed(point, trigger.error)
    path = kernel_profile.wait_trace(trigger.out_dir)
    if path is None:
        return failed(point, f"SGLang wrote no trace into {trigger.out_dir} within {kernel_profile.TRACE_WAIT_S:.0f} s")
    try:
        return summarize(point, kernel_profile.read_kernels(path), trigger.steps, layers, path.name)
    except kernel_profile.TraceError as exc:
        return failed(point, str(exc))


def failed(point: Point, error: str) -> PointKernelRecord:
    return PointKernelRecord(point_id=point.point_id, arm=point.arm, workload=point.workload,
                             concurrency=point.concurrency or 0, status="failed", steps=0, decode_steps=0,
                             extend_passes=0, kernel_ms=None, span_ms=None, by_category={}, top=(),
                             decode_attention_ms=None, extend_attention_ms=None, trace_file="", error=error)


def line(rec: PointKernelRecord) -> str:
    """One progress line: where a forward pass's time went under this load."""
    where = f"{rec.arm} {rec.workload} c={rec.concurrency}"
    if rec.status != "ok" or rec.kernel_ms is None or rec.span_ms is None:
        return f"kernel profile {where}: none — {rec.error}"
    cats = ", ".join(f"{cat} {ms:.2f}" for cat, ms in rec.by_category.items())
    attention = (f"; attention {rec.decode_attention_ms:.2f} ms a decode step" if rec.decode_attention_ms else "") + (
        f", {rec.extend_attention_ms:.2f} ms an extend" if rec.extend_attention_ms else "")
    walls = [f"{ms:.2f} ms {what}" for ms, what in ((rec.decode_step_ms, "a decode step"),
                                                    (rec.extend_pass_ms, "an extend")) if ms is not None]
    return (f"kernel profile {where}: {rec.steps} forward passes ({rec.decode_steps} decode, {rec.extend_passes} "
            f"extend), per pass {rec.kernel_ms:.2f} ms of kernels in a {rec.span_ms:.2f} ms span — {cats} ms"
            f"{attention}" + (f"; on the GPU's clock {', '.join(walls)}" if walls else ""))
