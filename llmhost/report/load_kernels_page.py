"""The dashboard's GPU kernels under load (`run_bench.py --kernel-profile`, point_kernels.jsonl): per profiled
closed-loop load, a forward pass's GPU time by kind beside the decode-bound table above it, so a step's milliseconds
are split by what ran rather than by the bytes it asked for."""
from __future__ import annotations

import dataclasses
from typing import Any

from llmhost.bench import store
from llmhost.bench.stream_records import PointKernelRecord
from llmhost.report import page
from llmhost.report.load import Run
from llmhost.report.page import esc, num
from llmhost.report.stream_page import top_kernels_table

INTRO = ("<p class=read>GPU kernels under load (<code>--kernel-profile</code>): the first repeat of each closed-loop "
         "load ran once more, unmeasured, from the same flushed (and primed) cache, with SGLang's profiler on for "
         "a quarter more consecutive forward passes than a request has output tokens, once a third of its requests "
         "had finished (llmhost/bench/load_profile.py): every slot of the closed loop finishes a request and "
         "extends the next inside that window. Passes are decode steps or extends (prefills of arriving requests), "
         "told apart by their attention kernels: an extend runs a causal one per layer. Milliseconds per forward "
         "pass, averaged over both kinds, except the columns per decode step and per extend; the two \"on the GPU's "
         "clock\" columns are a pass's wall time, idle included, from its first attention kernel to the next pass's. "
         "Idle = the span from the first kernel to the last minus the kernels. Decode-only bound = the load's "
         "concurrency of tokens per decode step: what the closed loop would produce if no pass were an extend and "
         "every slot decoded in each step; the measured throughput's distance from it is what extends and idle "
         "cost, and only a faster decode step raises it.</p>")


def rows(run: Run) -> list[dict[str, Any]]:
    """One row per profiled load, in the order profiled (failed ones with their reason)."""
    loaded = store.RunStore(run.path).read_point_kernels()
    return [row(r) for r in loaded.records]


def row(rec: PointKernelRecord) -> dict[str, Any]:
    ok = rec.status == "ok" and rec.kernel_ms is not None and rec.span_ms is not None
    return {"point_id": rec.point_id, "arm": rec.arm, "workload": rec.workload, "load": f"c={rec.concurrency}",
            "status": rec.status, "error": rec.error, "steps": rec.steps, "decode_steps": rec.decode_steps,
            "extend_passes": rec.extend_passes, "kernel_ms": rec.kernel_ms, "span_ms": rec.span_ms,
            "idle_ms": rec.span_ms - rec.kernel_ms if ok else None,
            "decode_attention_ms": rec.decode_attention_ms, "extend_attention_ms": rec.extend_attention_ms,
            "decode_step_ms": rec.decode_step_ms, "extend_pass_ms": rec.extend_pass_ms,
            "decode_only_tok_s": decode_only_bound(rec),
            "by_category": dict(rec.by_category), "top": [dataclasses.asdict(k) for k in rec.top]}


def decode_only_bound(rec: PointKernelRecord) -> float | None:
    """Output tok/s if every pass were a decode step of the whole closed loop: concurrency per decode step."""
    return rec.concurrency * 1000 / rec.decode_step_ms if rec.decode_step_ms and rec.concurrency else None


def _category(name: str) -> page.Cell:
    return lambda r: num(r["by_category"].get(name), 2)


def section_html(run: Run, profiled: list[dict[str, Any]]) -> str:
    """The table (its category columns: those any load measured, largest first), the longest kernels folded, and
    a line per load that has no profile; '' for a run without --kernel-profile."""
    if not profiled:
        return ""
    ok = [r for r in profiled if r["status"] == "ok"]
    categories = sorted({c for r in ok for c in r["by_category"]},
                        key=lambda c: -max(r["by_category"].get(c, 0.0) for r in ok))
    columns: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])),
        ("Load", lambda r: esc(r["load"])),
        ("Passes (decode / extend)", lambda r: f"{r['steps']} ({r['decode_steps']} / {r['extend_passes']})"),
        ("Span ms", lambda r: num(r["span_ms"], 2)), ("Kernels ms", lambda r: num(r["kernel_ms"], 2)),
        ("Idle ms", lambda r: num(r["idle_ms"], 2)),
        ("Decode step ms, GPU clock", lambda r: num(r["decode_step_ms"], 2)),
        ("Extend ms, GPU clock", lambda r: num(r["extend_pass_ms"], 2)),
        ("Decode-only bound, output tok/s", lambda r: num(r["decode_only_tok_s"], 0)),
        ("Attention ms per decode step", lambda r: num(r["decode_attention_ms"], 2)),
        ("Attention ms per extend", lambda r: num(r["extend_attention_ms"], 2)),
        *[(f"{c} ms", _category(c)) for c in categories]]
    failed = "".join(page.missing(f"{r['arm']} {r['workload']} {r['load']}: no kernel profile — {r['error']}")
                     for r in profiled if r["status"] != "ok")
    top = "".join(f"<details><summary>Longest kernels: {esc(r['arm'])} {esc(r['workload'])} {esc(r['load'])}"
                  "</summary>" + top_kernels_table(r["top"]) + "</details>" for r in ok)
    return "<h3>GPU kernels under load</h3>" + INTRO + (page.table(columns, ok, left=3) if ok else "") + failed + top
