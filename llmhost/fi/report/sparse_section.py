"""The paged-KV decode section of fi_report.html, from sparse.json (`fi_bench.py sparse`): placement cost, bandwidth
against the ceilings, FP8 vs BF16 and why (the roofline lines), the timers compared, all cases.
"""
from __future__ import annotations

from html import escape
from typing import Any

from llmhost.fi import kv_layout, roofline
from llmhost.fi.sparse import best_step_saving_ms
from llmhost.fi.report import diagrams
from llmhost.fi.report.figures import charts, fmt, plot_html, table

COMMAND = "python3 fi_bench.py sparse --out-dir {out}"


TITLE = "Paged KV: does page size or placement slow decode down?"


def render_section(doc: dict | None, out_dir: str) -> str | None:
    """The section, or None when there is no data (the page then shows its placeholder)."""
    if not doc or not doc.get("cases"):
        return None
    found = doc.get("checks", [])
    failed = [c for c in found if not c.get("ok")]
    bitwise = sum(1 for c in found if c.get("bitwise_equal"))
    blind = [c for c in found if "detects_drop" in c and not c["detects_drop"]]
    errors = "".join(f"<p class='bad'>{escape(k)} not measured: {escape(v)}</p>"
                     for k, v in (doc.get("errors") or {}).items())
    errors += "".join(f"<p class='bad'>check failed: {escape(c.get('error', str(c)))}</p>" for c in failed[:10])
    return (
        f"{diagrams.paged_kv()}"
        "<p>Each case decodes one step of one layer for a batch with equal total tokens, calling FlashInfer as "
        "SGLang does. <b>contiguous</b> puts each request's pages in order, <b>random</b> scatters them over the "
        "whole pool, <b>churned</b> replays SGLang's allocator after background traffic (prompts in the holes "
        "evictions leave, decode tokens interleaved across the batch). <b>shared</b> and <b>shared-interleaved</b> "
        f"store one copy of a prompt's pages for every {kv_layout.SHARED_GROUP} requests, as SGLang's prefix cache "
        "does for a common system prompt, with a prompt's requests side by side in the batch or dealt "
        "round-robin.</p>"
        f"<p>Correctness, before any timing: {len(found) - len(failed)} of {len(found)} checks passed. Contiguous "
        "cases match a float32 reference within 1% of each request's output norm — a tolerance that a dropped or "
        "duplicated token of a 300-token request fails (the small-batch checks show the margin); "
        f"{len(blind)} reference check(s) on 16K-token requests could not have seen one token (reported, not "
        f"hidden). {bitwise} scattered cases are bit-identical to their contiguous case under the same plan; shared "
        "cases, whose pages hold other data, match the reference on two requests of one prompt and one of "
        f"another.</p>{errors}{timing_block(doc)}{charts(figures, doc)}{shared_block(doc)}{two_level_block(doc)}"
        f"{roofline_block(doc)}"
        f"{cases_table(doc)}"
        "<p>First plan() + run() of each kernel (module load from the JIT cache, or a compile):</p>"
        + table(["KV dtype / path", "seconds"], sorted((doc.get("first_call_s") or {}).items())))


def timing_block(doc: dict) -> str:
    """Which timer the numbers come from, and the event timer next to it, case by case (worst gaps first)."""
    cases = [c for c in doc["cases"] if c.get("event_over_precise")]
    method = (doc["cases"][0].get("timing") or "?") if doc["cases"] else "?"
    text = (f"<p>Times are from the <b>{escape(method)}</b> timer: FlashInfer's bench_gpu_time_with_cudagraph "
            "replays 10 captured calls per measurement, so the Python launch of wrapper.run() is not timed "
            "(CUPTI would be used where cupti-python is installed; the GPU host has none). Beside it, each case was "
            "also timed with a CUDA-event pair around an eager call after a read-only L2 flush; the ratio "
            "event / graph is mostly the launch gap that timer includes (the GPU waits while Python prepares the "
            "launch), plus the few MB of q, o and page table the graph timer finds in L2.</p>")
    if not cases:
        return text
    worst = sorted(cases, key=lambda c: -abs(c["event_over_precise"] - 1))[:8]
    rows = [[_label(c), c["median_us"], c["event_median_us"], c["event_median_us"] - c["median_us"],
             c["event_over_precise"]] for c in worst]
    return text + table(["case (largest gaps)", f"{method} us", "event us", "difference us", "event / " + method],
                        rows)


def shared_block(doc: dict) -> str:
    """Shared prompt pages against private ones: time, the bandwidth decode reads at, and the HBM bandwidth it would
    need if every repeated read of a shared page hit the L2 cache."""
    shared = [c for c in doc["cases"] if c["placement"] in kv_layout.SHARED_PLACEMENTS]
    if not shared:
        return ""
    rows = [[c["dtype"], c["path"], f"{c['batch']}x{c['seq_len']}", c["page_size"], c["placement"], c["median_us"],
             c.get("vs_contiguous"), c["gb_s"], c["pct_peak"], c.get("distinct_gb_s"), c.get("distinct_pct_peak")]
            for c in shared]
    return (f"<h3>Shared prompt pages: does decode read them once per request?</h3><p>Every {kv_layout.SHARED_GROUP}"
            f" requests share the first {kv_layout.SHARED_FRACTION:.0%} of their tokens. The kernel reads them for "
            "each request, so a time / contiguous near 1 means HBM delivered every read; below 1, the L2 cache "
            "served repeats (requests of one prompt reading the same pages at the same time). The last columns count "
            "each shared page once: near the peak, the repeats cost nothing. Side by side against round-robin is "
            "what the order of the batch is worth.</p>"
            + table(["KV dtype", "path", "batch", "page", "placement", "median us", "time / contiguous",
                     "GB/s read", "% peak read", "GB/s distinct", "% peak distinct"], rows))


def two_level_block(doc: dict) -> str:
    """The shared cases again, each prompt read once: two-level decode and FlashInfer's cascade wrapper against the
    one-level time, where the two-level time goes, and what it would save in a decode step of every layer."""
    records = doc.get("two_level") or []
    if not records:
        return ""
    shape = doc.get("shape") or {}
    layers = shape.get("num_layers")
    heads = f"M x {shape['num_qo_heads']} query heads on {shape['num_kv_heads']} KV heads" \
        if shape.get("num_qo_heads") and shape.get("num_kv_heads") else "M x the query heads"
    rows = [[f"{r['batch']}x{r['seq_len']}", r["page_size"], r["placement"], f"{r['groups']} x {r['members']}",
             r["prefix_tokens"], r["one_level_us"], r["two_level_us"], r["level0_us"], r["level1_us"],
             r["two_level_over_one_level"], r.get("two_level_pct_peak"), r["prefill_level0_us"],
             _plan_label(r.get("prefill_level0_plan")), r.get("one_launch_us"), _plan_label(r.get("one_launch_plan")),
             r["cascade_us"], r.get("cascade_backend") or "-",
             best_step_saving_ms(r, layers) if layers else None] for r in records]
    return ("<h3>Reading each shared prompt once: two-level decode</h3><p>The shared cases (BF16, tensor cores) "
            "again, with each prompt's pages read once per group instead of once per request. <b>two-level</b>: "
            "level 0 decodes each group's shared pages once for all its members, their query heads folded into one "
            f"row ({heads}); level 1 decodes each request's own pages; FlashInfer's "
            "merge_state joins the two by their log-sum-exp, which is exact. The query gathers and output scatters "
            "are inside the timed call. <b>prefill level 0</b>: the same, with level 0 on FlashInfer's prefill "
            "kernel (fa2), the members as a query sequence. <b>one launch</b>: both levels as the entries of one "
            "prefill plan (fa2) over the query gathered twice, each group's members over its prefix and each request "
            "alone over its own pages, so one kernel launch replaces two and level 1's short rows share the SMs with "
            "level 0's long ones; its query tile fits the average entry. <b>cascade</b>: FlashInfer's "
            "MultiLevelCascadeAttentionWrapper over the same two levels; it takes the prefill wrapper's default "
            "backend, on Hopper fa3, whose plan neither fuses a KV head's query heads into one tile nor splits the KV "
            "(PrefillSM90Plan), so each query head reads the prefix again in a 128-row tile holding M rows. All four "
            "match the float32 reference on the shared cases' check requests before they are timed. SGLang 0.5.17 "
            "has no "
            "shared-prefix decode for FlashInfer, so this is what an attention backend that found the groups in its "
            "token table would gain; the last column multiplies the fastest way's saving by the model's layers.</p>"
            + table(["batch", "page", "placement", "groups x members", "shared tokens", "one-level us",
                     "two-level us", "level 0 us", "level 1 us", "two-level / one-level", "% peak distinct",
                     "prefill level 0 us", "its level 0 plan", "one launch us", "its plan", "cascade us",
                     "cascade backend",
                     "saved per step, ms"], rows))


def _plan_label(plan: dict | None) -> str:
    if not plan:
        return "-"
    return (f"{plan['work_units']} units, {plan.get('cta_tile_q') or '?'}-row tiles, "
            + ("split" if plan["split_kv"] else "no split"))


def roofline_block(doc: dict) -> str:
    """Per kernel: intensity, achieved vs the memory bound, element rate; then the FP8/BF16 pair evidence."""
    ceilings = doc.get("ceilings") or {}
    rows = []
    for kernel in sorted({(c["dtype"], c["path"]) for c in doc["cases"]}):
        group = [c for c in doc["cases"] if (c["dtype"], c["path"]) == kernel and c.get("roofline")]
        if group:
            best = max(group, key=lambda c: c["gb_s"])
            line = best["roofline"]
            rows.append([" ".join(kernel), line["intensity_flop_per_byte"], line["binding"], line["memory_bound_us"],
                         line["compute_bound_us"], best["median_us"], line["pct_of_bound"],
                         line["achieved_tflops"], line["kv_elements_per_ns"], _label(best)])
    evidence = roofline.per_element_evidence(doc["cases"])
    pairs = [[path, e["pairs"], e["bytes_ratio"], e["time_ratio"], e["bf16_pct_peak_median"],
              e["fp8_pct_peak_median"], e["verdict"]] for path, e in evidence.items()]
    return ("<h3>Why each kernel stops where it does (roofline, best case per kernel)</h3>"
            f"<p>Bounds on this GPU: {fmt(ceilings.get('peak_gb_s'))} GB/s HBM, "
            f"{fmt(ceilings.get('bf16_tensor_tflops'))} TFLOP/s BF16 tensor cores, {fmt(ceilings.get('fp32_tflops'))}"
            " TFLOP/s FP32 CUDA cores. Decode does 4 x tokens x query heads x head_dim FLOPs over its bytes: with "
            "GQA group 4 that is 4 FLOP/byte for BF16 and 8 for FP8, far below either compute ridge, so the "
            "bound is always memory. A kernel far below that bound is limited by something per element.</p>"
            + table(["kernel", "FLOP/byte", "binding bound", "memory bound us", "compute bound us", "measured us",
                     "% of bound", "TFLOP/s", "KV elements/ns", "case"], rows)
            + "<p>FP8 against BF16 at the same tokens (medians over all matching cases): FP8 halves the bytes "
              "(ratio 0.5). If time followed bytes, time ratio would be 0.5; a time ratio near 1 means both dtypes "
              "process KV elements at the same rate — the per-element work (load, dequantise to BF16, multiply) "
              "binds, and FP8's GB/s is then about half of BF16's on the same path (compare the % peak "
              "columns).</p>"
            + table(["path", "pairs", "bytes FP8/BF16", "time FP8/BF16", "BF16 % peak", "FP8 % peak", "what binds"],
                    pairs))


def figures(doc: dict) -> str:
    import plotly.express as px

    df = _frame(doc)
    parts = []
    scattered = df[~df["placement"].isin(["contiguous", *kv_layout.SHARED_PLACEMENTS])]
    if not scattered.empty:
        fig = px.bar(scattered, x="page size", y="vs_contiguous", color="placement", barmode="group",
                     facet_row="kernel", facet_col="batch shape", height=220 * df["kernel"].nunique() + 120,
                     title="Does scattering KV pages slow decode down?", labels={"vs_contiguous": "time / contiguous"})
        fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
        parts.append(plot_html(fig, "Each bar is a decode step's time divided by the same batch stored contiguously "
                                    "(1 = no cost); rows are KV dtype and kernel path, columns batch shapes."))
    df = df[~df["placement"].isin(kv_layout.SHARED_PLACEMENTS)]  # their bytes count repeats: in their own table
    if df["pct_peak"].notna().any():
        fig = px.line(df, x="page size", y="pct_peak", color="kernel", line_dash="placement", markers=True,
                      facet_col="batch shape", height=420, labels={"pct_peak": "% of peak HBM bandwidth"},
                      title="How close to the memory-bandwidth ceiling does decode get?")
        ceil = doc.get("ceilings") or {}
        if ceil.get("copy_gb_s") and ceil.get("peak_gb_s"):
            fig.add_hline(y=100 * ceil["copy_gb_s"] / ceil["peak_gb_s"], line_dash="dot", line_color="#b00",
                          annotation_text="device-to-device copy (read + write)", annotation_position="bottom right")
        parts.append(plot_html(fig, "Bytes a decode step must move (K/V of every token, q, o, page table) over its "
                                    "median time, as % of the datasheet peak; the dotted line is what a plain copy "
                                    "(read + write bytes) reaches on this GPU. Decode only reads, so it can match "
                                    "that line."))
    return "".join(parts)


def _frame(doc: dict) -> Any:
    import pandas as pd

    df = pd.DataFrame([{k: v for k, v in c.items() if k not in ("samples_ms", "roofline")} for c in doc["cases"]])
    df["kernel"] = df["dtype"] + " · " + df["path"]
    df["batch shape"] = df["batch"].astype(str) + "x" + df["seq_len"].astype(str)
    df["page size"] = df["page_size"].astype(str)
    return df


def _label(c: dict) -> str:
    return f"{c['dtype']} {c['path']} {c['batch']}x{c['seq_len']} page {c['page_size']} {c['placement']}"


def cases_table(doc: dict) -> str:
    rows = [[c["dtype"], c["path"], f"{c['batch']}x{c['seq_len']}", c["page_size"], c["placement"], c["median_us"],
             c["p10_us"], c["p90_us"], c.get("event_median_us"), c["gb_s"], c["pct_peak"], c["pct_copy"],
             c.get("vs_contiguous"), c.get("split_kv"), c.get("work_units"),
             (c.get("roofline") or {}).get("pct_of_bound"), c["mean_run_pages"]] for c in doc["cases"]]
    header = ["KV dtype", "path", "batch", "page", "placement", "median us", "p10 us", "p90 us", "event us", "GB/s",
              "% peak", "% copy", "vs contiguous", "split", "work units", "% of bound", "mean run (pages)"]
    return f"<details><summary>All {len(rows)} cases</summary>{table(header, rows)}</details>"
