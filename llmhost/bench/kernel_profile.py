"""What one stream's forward pass spends on the GPU, kernel by kernel, from SGLang's own profiler.

    error = kernel_profile.start(server, out_dir, steps)      # POST /start_profile: the next `steps` forwards
    ... one streamed request of more than `steps` tokens ...
    path = kernel_profile.wait_trace(out_dir)                 # <out_dir>/*.trace.json.gz, once it is written
    rec = kernel_profile.summarize(arm, kernel_profile.read_kernels(path), steps, path.name)

SGLang 0.5.17 (entrypoints/http_server.py, utils/profile_utils.py): /start_profile with `num_steps` runs
torch.profiler in the scheduler (activities ["GPU"]: CUDA kernels through CUPTI, also those a CUDA graph replays) and
stops it by itself after that many forward passes, writing a chrome trace,
<output_dir>/<profile_prefix>-<profile id>-TP-0.trace.json.gz. Its kernel events ({"cat": "kernel", "name", "ts",
"dur"} in µs) are summed per category (CATEGORIES: a regex on the kernel name, the first that matches) and divided by
the steps: milliseconds of GPU work per forward pass. One of the steps is the request's prefill (a 16-word prompt:
about one decode step's weight read), so at 100 steps the per-step figures are the decode step's within ~1%.
`span` is the first kernel's start to the last one's end over the steps: span - kernels is the GPU idle between
kernels (launch gaps, host work the graph waits for). The GEMM share set against the model's weight-read floor says
what the matrix multiplies reach of the datasheet bandwidth at batch 1.
"""
from __future__ import annotations

import gzip
import json
import re
import time
from collections import defaultdict
from pathlib import Path

from llmhost.bench.stream_records import KernelShare, StreamKernelRecord
from llmhost.serve.endpoints import ServerClient

PROFILE_STEPS = 100
TRACE_WAIT_S = 120.0  # exporting a trace of 100 steps with stacks takes seconds; a GPU host under load, more
TOP_KERNELS = 8
# Kernel names as CUDA libraries spell them (cuBLAS/cuBLASLt on Hopper: nvjet_*, sm90_xmma_*; CUTLASS; FlashInfer's
# BatchDecode/BatchPrefill; sgl-kernel's RMSNorm, SiLU-and-mul, rope), lower-cased before matching. torch.compile
# (Inductor) names a kernel triton_<kind>_fused_<its ops joined by _>: at batch 1 it writes a matrix-vector product as
# a reduction fused with its neighbours (triton_red_fused__to_copy_add_mean_mm_mul_pow_rsqrt_t_1: an RMSNorm and the
# projection after it), so one with mm/bmm/addmm among its ops is a GEMM (the weights are its bytes); its RMSNorms
# are mean + pow (the variance) and rsqrt. Inductor lists the ops in alphabetical order. SGLang's Triton attention
# backend names its kernels _fwd_kernel (extend), _fwd_grouped_kernel_stage1 and _fwd_kernel_stage2 (decode).
CATEGORIES: tuple[tuple[str, str], ...] = (  # the specific before the broad: FlashInfer names its norms too
    ("GEMM", r"^triton_\w*fused\w*?(?<![a-z])(?:add)?b?mm(?![a-z])"),
    ("norm", r"norm|rsqrt|^triton_\w*_mean_\w*pow"),
    ("rope", r"rope|rotary"),
    ("activation", r"silu|gelu|act_and_mul|swiglu"),
    ("sampling", r"argmax|sampl|topk|top_k|top_p|softmax|multinomial|logit"),
    ("attention", r"batchdecode|batchprefill|mergestate|attention|fmha|flash_fwd|paged|mla|^_fwd_(grouped_)?kernel"),
    ("GEMM", r"gemm|gemv|nvjet|xmma|cutlass|matmul|splitk|cublas"),
    ("copy / KV write", r"copy|memcpy|memset|store|set_kv|scatter|gather|index|cat"),
)
OTHER = "other"


def category(name: str) -> str:
    low = name.lower()
    return next((label for label, pattern in CATEGORIES if re.search(pattern, low)), OTHER)


def start(server: ServerClient, out_dir: Path, steps: int, prefix: str = "single-stream") -> str:
    """Ask the server to profile its next `steps` forward passes into out_dir (trace files named <prefix>-...);
    '' when it agreed, else why not."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reply = server.post("/start_profile", {"output_dir": str(out_dir.resolve()), "num_steps": steps,
                                           "activities": ["GPU"], "profile_prefix": prefix,
                                           "with_stack": False, "record_shapes": False})  # least host overhead
    if reply.status != 200:
        return f"/start_profile answered {reply.status}: {reply.text.strip()[:200] or 'no body'}"
    return ""


def wait_trace(out_dir: Path, timeout_s: float = TRACE_WAIT_S) -> Path | None:
    """The trace file once the server has written it whole (its size held still for a second); None at the
    timeout."""
    deadline = time.monotonic() + timeout_s
    last: tuple[Path, int] | None = None
    while time.monotonic() < deadline:
        found = sorted(out_dir.glob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
        if found:
            now = (found[-1], found[-1].stat().st_size)
            if now == last and now[1] > 0:
                return now[0]
            last = now
        time.sleep(1.0)
    return None


class TraceError(ValueError):
    """A trace file this module cannot read; the message is one line."""


def read_kernels(path: Path) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of every GPU kernel in a chrome trace (gzip or plain JSON)."""
    try:
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError, EOFError) as exc:
        raise TraceError(f"cannot read the trace {path.name}: {exc}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(f"{path.name} has no traceEvents list: not a chrome trace")
    return [(str(e.get("name", "")), float(e["ts"]), float(e["dur"])) for e in events
            if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def summarize(arm: str, kernels: list[tuple[str, float, float]], steps: int, trace_file: str) -> StreamKernelRecord:
    """Per forward pass: kernel time by category, the span, the kernels that took longest."""
    if not kernels:
        return failed(arm, f"the trace {trace_file} holds no GPU kernel (was the GPU activity recorded?)")
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, _, dur in kernels:
        by_cat[category(name)] += dur
        by_name[name].append(dur)
    span_us = max(ts + dur for _, ts, dur in kernels) - min(ts for _, ts, _ in kernels)
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:TOP_KERNELS]
    return StreamKernelRecord(
        arm=arm, status="ok", steps=steps, kernel_ms=sum(by_cat.values()) / steps / 1000,
        span_ms=span_us / steps / 1000,
        by_category={cat: ms / steps / 1000 for cat, ms in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        top=tuple(KernelShare(name[:120], sum(d) / steps / 1000, len(d) / steps) for name, d in top),
        trace_file=trace_file)


def failed(arm: str, error: str) -> StreamKernelRecord:
    return StreamKernelRecord(arm=arm, status="failed", steps=0, kernel_ms=None, span_ms=None, by_category={},
                              top=(), trace_file="", error=error)


def lines(rec: StreamKernelRecord, floor_ms: float | None) -> list[str]:
    """What the record says, for the run's summary: one line, then the top kernels."""
    if rec.status != "ok" or rec.kernel_ms is None or rec.span_ms is None:
        return [f"{rec.arm}: no kernel profile — {rec.error}"]
    cats = ", ".join(f"{cat} {ms:.2f}" for cat, ms in rec.by_category.items())
    out = [f"{rec.arm}: GPU kernels per forward pass ({rec.steps} profiled by SGLang): {rec.kernel_ms:.2f} ms of "
           f"kernels in a {rec.span_ms:.2f} ms span ({rec.span_ms - rec.kernel_ms:.2f} ms idle between them) — "
           f"{cats} ms{reach(rec.by_category.get('GEMM'), floor_ms)}"]
    out += [f"{rec.arm}:   {k.ms_per_step:6.3f} ms  {k.calls_per_step:5.1f} calls  {k.name}" for k in rec.top]
    return out


def reach(gemm_ms: float | None, floor_ms: float | None) -> str:
    """What the GEMMs reach of the peak bandwidth on the weights; GEMMs faster than the weights can be read mean
    the matrix multiplies ran in kernels CATEGORIES does not call GEMM, and the line says so instead of a share."""
    if not gemm_ms or not floor_ms:
        return ""
    if gemm_ms < floor_ms:
        return (f"; the GEMM kernels take {gemm_ms:.2f} ms, less than the {floor_ms:.2f} ms weight-read floor: most "
                f"matrix multiplies ran in kernels not named as GEMMs (see the top kernels)")
    return (f"; the GEMMs take {gemm_ms:.2f} ms against the {floor_ms:.2f} ms weight-read floor "
            f"({100 * floor_ms / gemm_ms:.0f}% of peak bandwidth)")
