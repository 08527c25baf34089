"""What a forward pass spends on the GPU under load (`run_bench.py --kernel-profile`): SGLang's own profiler over
PROFILE_STEPS consecutive forward passes in the steady stretch of a closed-loop point.

    passes = load_profile.passes(plan)                        # the extra pass per profiled load, for the ETA
    trigger = load_profile.Trigger(server, out_dir, completed_file, after=load_profile.after_requests(point))
    ... the profile pass runs the point again with `trigger` polled every second ...
    rec = load_profile.collect(point, trigger, layers)        # PointKernelRecord: ok, or why not

The profiler pauses the scheduler while it writes its trace (seconds, after the profiled passes), so it never runs
in a measured pass: the first repeat of each closed-loop load is run once more, unmeasured, and profiled once a
third of that pass's requests have finished, past its start-up wave (the load generator appends each finished
request to the completed file as it finishes: llmhost.bench.loadgen).

Under load the passes are of two kinds: decode steps, and extends (prefills) of arriving requests. FlashInfer names
a kernel by what it reads, not by the pass: SGLang's decode runs BatchPrefillWithPagedKVCacheKernel (tensor cores,
non-causal: its one query token sees the whole context) or BatchDecodeWithPagedKVCacheKernel; an extend runs a
causal kernel over its new tokens once per layer — BatchPrefillWithRaggedKVCacheKernel, or inside SGLang's
piecewise prefill graphs the paged kernel with a causal mask (MaskMode 1) — plus, on the ragged path, the paged
kernel over the cached prefix and a merge. So extends = causal attention kernels / layers, the rest are decode
steps, and the attention time splits by layer: a layer's attention kernels run back to back (between its KV write
and o_proj), and a run of them with a causal kernel in it is an extend's, merges and prefix part included.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from llmhost.bench import kernel_profile
from llmhost.bench.records import Point
from llmhost.bench.stream_records import PointKernelRecord
from llmhost.serve.endpoints import ServerClient

PROFILE_STEPS = 100  # forward passes: ~1 s of agent c=64 decode on an H200
START_AFTER = 1 / 3  # of the pass's requests finished: past the start-up wave of a closed loop
PROFILE_SUFFIX = ".profile"
_CAUSAL = re.compile(r"raggedkvcache|maskmode\)1")  # an extend's attention over its new tokens
_ATTENTION_MAIN = re.compile(r"batch(prefill|decode)with(paged|ragged)kvcachekernel")


def is_profiled(point: Point) -> bool:
    """Closed-loop points, first repeat: one profile per load."""
    return point.pattern == "concurrency" and point.repeat == 1 and not point.point_id.endswith(PROFILE_SUFFIX)


def passes(plan: list[Point]) -> list[Point]:
    """The profile passes a plan adds (as points, so that the estimate and the ETA count them)."""
    return [profile_pass(p) for p in plan if is_profiled(p)]


def profile_pass(point: Point) -> Point:
    return dataclasses.replace(point, point_id=point.point_id + PROFILE_SUFFIX)


def after_requests(point: Point) -> int:
    return max(1, int(point.num_prompts * START_AFTER))


class Trigger:
    """Polled every second during the profile pass (the load generator's watch): once `after` requests have
    finished, asks the server to profile its next PROFILE_STEPS forward passes into out_dir — once. Returns '' (a
    watch that names no reason to stop the pass)."""

    def __init__(self, server: ServerClient, out_dir: Path, completed: Path, after: int,
                 steps: int = PROFILE_STEPS) -> None:
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


def attention_split(kernels: list[tuple[str, float, float]], layers: int) -> tuple[int, float, float]:
    """(extend passes, decode attention µs, extend attention µs) over the trace's kernels: each run of consecutive
    attention kernels (one layer's) goes to the extend when a causal kernel is in it, else to the decode step."""
    decode_us = extend_us = 0.0
    causal = 0
    run: list[tuple[str, float]] = []
    for name, _, dur in [*sorted(kernels, key=lambda k: k[1]), ("", 0.0, 0.0)]:  # the sentinel ends the last run
        if name and kernel_profile.category(name) == "attention":
            run.append((name.lower(), dur))
            continue
        mains = sum(1 for low, _ in run if _CAUSAL.search(low) and _ATTENTION_MAIN.search(low))
        if mains:
            extend_us += sum(d for _, d in run)
            causal += mains
        else:
            decode_us += sum(d for _, d in run)
        run = []
    return round(causal / layers) if layers else 0, decode_us, extend_us


def summarize(point: Point, kernels: list[tuple[str, float, float]], steps: int, layers: int,
              trace_file: str) -> PointKernelRecord:
    """The trace's kernels per forward pass by category (kernel_profile.summarize), with the passes split into
    decode steps and extends and the attention time with them."""
    base = kernel_profile.summarize(point.arm, kernels, steps, trace_file)
    if base.status != "ok":
        return failed(point, base.error)
    extends, decode_us, extend_us = attention_split(kernels, layers)
    decodes = max(0, steps - extends)
    return PointKernelRecord(
        point_id=point.point_id, arm=point.arm, workload=point.workload, concurrency=point.concurrency or 0,
        status="ok", steps=steps, decode_steps=decodes, extend_passes=extends, kernel_ms=base.kernel_ms,
        span_ms=base.span_ms, by_category=base.by_category, top=base.top,
        decode_attention_ms=decode_us / decodes / 1000 if decodes else None,
        extend_attention_ms=extend_us / extends / 1000 if extends else None, trace_file=trace_file)


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
    return (f"kernel profile {where}: {rec.steps} forward passes ({rec.decode_steps} decode, {rec.extend_passes} "
            f"extend), per pass {rec.kernel_ms:.2f} ms of kernels in a {rec.span_ms:.2f} ms span — {cats} ms"
            f"{attention}")
