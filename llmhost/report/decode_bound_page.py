"""The dashboard's "What bounds a decode step" section: each steady closed-loop point's step time beside the bytes
it must read (rows from llmhost.report.decode_bound)."""
from __future__ import annotations

from typing import Any

from llmhost.report import decode_bound, page
from llmhost.report.load import Run
from llmhost.report.page import esc, num

INTRO = ("<p class=read>Each decode step reads the weights once and, for every running request, that request's whole "
         "KV context — a prefix shared with other requests is still asked for once per request by the decode "
         "kernel. So with n requests running: KV ms = n × context tokens (mean prompt + half the mean output, over "
         "the steady window's successful requests) × KV bytes per token (layers × 2 × KV heads × head_dim × the "
         "arm's KV cache dtype bytes) / the GPU's datasheet bandwidth, weights ms = weight bytes / the same "
         "bandwidth, and their sum is the step's byte floor (roofline), set against the measured step: SGLang's own "
         "mean time per output token over the steady window (else the client's). n is SGLang's running-requests "
         "gauge over the window (else the concurrency c, which overstates it: a request between turns or in prefill "
         "is not decoding). The L2 cache serves most repeated reads of a prefix that requests decoding together "
         "share (fi_bench.py sparse's shared placements measure how much), so where most prompt tokens came from "
         "the prefix cache the KV ms is an upper bound, and a step below its floor is that. Otherwise a floor that "
         "explains most of the step says memory reads bind and which bytes to cut; one under "
         f"{decode_bound.MEMORY_BOUND_SHARE:.0%} of it says compute or overhead binds instead. Attention ms "
         "and decode step ms (profiled): what a decode step's attention kernels took under that load and the step "
         "on the GPU's clock, where the run has a --kernel-profile of it (GPU kernels under load, below); the "
         "reading is then the profile's, measured rather than derived from bytes.</p>")


def _gb(n_bytes: Any) -> str:
    return num(n_bytes / 1e9 if isinstance(n_bytes, (int, float)) else None, 2)


COLUMNS: list[tuple[str, page.Cell]] = [
    ("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])), ("Load", lambda r: esc(r["load"])),
    ("Running", lambda r: num(r["running"], 1) + (" <span class=noise>(c)</span>" if r["running_by"] == "c" else "")),
    ("Context tokens", lambda r: num(r["context_tokens"], 0)), ("KV dtype", lambda r: esc(r["kv_cache_dtype"])),
    ("KV B/token", lambda r: num(r["kv_bytes_per_token"], 0)), ("KV GB/step", lambda r: _gb(r["kv_bytes"])),
    ("Weights GB", lambda r: _gb(r["weight_bytes"])), ("Weights ms", lambda r: num(r["weights_ms"], 2)),
    ("KV ms", lambda r: num(r["kv_ms"], 2)), ("Roofline ms", lambda r: num(r["roofline_ms"], 2)),
    ("Measured ms", lambda r: num(r["measured_ms"], 2) + (f" <span class=noise>({esc(r['measured_by'])})</span>"
                                                          if r["measured_by"] else "")),
    ("KV share of step %", lambda r: num(r["kv_share_pct"], 0)),
    ("Attention ms (profiled)", lambda r: num(r.get("profiled_attention_ms"), 2)),
    ("Decode step ms (profiled)", lambda r: num(r.get("profiled_decode_step_ms"), 2)),
    ("Prompt tokens cached %", lambda r: num(r.get("cached_share_pct"), 0)), ("Reading", lambda r: esc(r["reading"]))]


def section_html(run: Run, rows: list[dict[str, Any]]) -> str:
    """The intro, then the table, or what is missing and how to get it."""
    why_not = decode_bound.unavailable(run)
    if why_not:
        return INTRO + page.missing(f"Not available: {why_not}.")
    if not rows:
        return INTRO + page.missing("Not available: no closed-loop point had a steady repeat — run ./run_bench.py "
                                    "with a concurrency sweep (see Steady state and repeats for why points were "
                                    "not steady).")
    gpu = run.manifest.provenance.gpu.name
    no_peak = "" if decode_bound.peak_gb_s(run) else page.missing(
        f"GPU {gpu or '(none recorded)'} has no datasheet bandwidth in llmhost/fi/gpu_specs.py: bytes are shown, "
        "no milliseconds.")
    return INTRO + no_peak + page.table(COLUMNS, rows, left=3)
