"""The split-KV section of fi_report.html, from balance.json (`fi_bench.py balance`): the planner's decisions, what
splitting gains where it splits and what a forced split does where it declines, SGLang's CUDA-graph planning, and
plan() vs fast_decode_plan next to the kernel time.
"""
from __future__ import annotations

from html import escape

from llmhost.fi import split_plan
from llmhost.fi.report import diagrams
from llmhost.fi.report.figures import charts, plot_html, table

COMMAND = "python3 fi_bench.py balance --out-dir {out}"


def planner_note(doc: dict) -> str:
    """Where the planner stops splitting on this GPU, and which planning cost SGLang pays per step."""
    cap = split_plan.planner_cap(doc.get("sm_count"), doc.get("num_kv_heads"))
    where = (f"2 x {doc['sm_count']} SMs / {doc['num_kv_heads']} KV heads = {cap} work units" if cap
             else "2 x SMs / KV heads work units")
    return (f"FlashInfer's planner splits only while the split work fits {where}; above that it keeps one chunk per "
            "request. 'off' is therefore timed only where the planner split (off / auto = its gain), and 'forced' "
            "(fixed_split_size = half the mean request) only where it declined (auto / forced = what that split "
            "would have saved, below 1 = cost). 'graph' is the same batch planned as SGLang's CUDA-graph decode "
            "plans it: a use_cuda_graph wrapper replanned with fast_decode_plan and host-side indptr. SGLang pays "
            "fast_decode_plan per step for batches within its captured graph sizes, plan() above them.")


TITLE = "Split-KV and planning: when does splitting pay, what does planning cost?"


def render_section(doc: dict | None, out_dir: str) -> str | None:
    if not doc or not doc.get("cases"):
        return None
    control = doc.get("split_control") or {}
    errors = "".join(f"<p class='bad'>{escape(k)}: {escape(v)}</p>" for k, v in (doc.get("errors") or {}).items())
    return (
        f"{diagrams.split_kv()}"
        f"<p>Split-KV controls: off = <code>{escape(str(control.get('off')))}</code>, forced = "
        f"<code>{escape(str(control.get('forced')))}</code> ({escape(control.get('note', ''))}); kernel path: "
        f"{escape(doc.get('path', ''))}; timer: {escape(str(doc.get('timing')))}. "
        f"Planning: {escape(doc.get('planning', ''))}; per-layer share = plan / {doc.get('num_layers')} layers.</p>"
        f"<p>{escape(planner_note(doc))}</p>{errors}"
        + decisions_table(doc) + charts(figures, doc) + cases_table(doc))


def decisions_table(doc: dict) -> str:
    """One row per (batch, distribution): the planner's decision, and each variant's time."""
    groups: dict[tuple, dict[str, dict]] = {}
    for c in doc["cases"]:
        groups.setdefault((c["batch"], c["distribution"]), {})[c["split"]] = c
    rows = []
    for (batch, dist), by in sorted(groups.items()):
        auto = by.get("auto", {})
        decision = f"split, {auto.get('work_units')} units" if auto.get("split_kv") else "no split"
        graph = by.get("graph", {})
        rows.append([batch, dist, decision, auto.get("kv_chunk_tokens"), auto.get("median_us"),
                     (by.get("off") or {}).get("median_us"), (by.get("forced") or {}).get("median_us"),
                     graph.get("median_us"), "split" if graph.get("split_kv") else ("no split" if graph else "-"),
                     auto.get("plan_us"), graph.get("fast_plan_us")])
    return table(["batch", "lengths", "planner", "chunk (tokens)", "auto us", "off us", "forced us", "graph us",
                  "graph plan", "plan() us", "fast_decode_plan us"], rows)


def figures(doc: dict) -> str:
    import pandas as pd
    import plotly.express as px

    parts = []
    gains = [{**pair, "batch": str(pair["batch"]), "variant": variant}
             for variant, base, split in (("planner's split vs off", "off", "auto"),
                                          ("forced split vs unsplit", "auto", "forced"))
             for pair in _pairs(doc["cases"], base, split)]
    if gains:
        fig = px.bar(pd.DataFrame(gains), x="distribution", y="ratio", color="batch", barmode="group",
                     facet_col="variant", height=400, title="When does split-KV pay off, and what would it do "
                     "where the planner declines?", labels={"ratio": "unsplit time / split time"})
        fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
        parts.append(plot_html(fig, "Above 1 the split is faster. Left: where the planner split, against "
                                    "disable_split_kv. Right: where it declined, a forced split against its "
                                    "unsplit plan. Every bar holds the same total tokens."))
    auto = [c for c in doc["cases"] if c["split"] == "auto"]
    graph = {c["batch"]: c.get("fast_plan_us") for c in doc["cases"] if c["split"] == "graph"}
    if auto:
        rows = []
        for batch in sorted({c["batch"] for c in auto}):
            group = [c for c in auto if c["batch"] == batch]
            rows += [{"batch": str(batch), "what": "plan() (eager steps)", "us": _med([c["plan_us"] for c in group])},
                     {"batch": str(batch), "what": "fast_decode_plan (graph steps)", "us": graph.get(batch)},
                     {"batch": str(batch), "what": "kernel, one layer", "us": _med([c["median_us"] for c in group])}]
        fig = px.bar(pd.DataFrame([r for r in rows if r["us"]]), x="batch", y="us", color="what", barmode="group",
                     log_y=True, height=400, title="What does planning cost next to the kernel it schedules?",
                     labels={"us": "microseconds (log)", "batch": "batch size"})
        parts.append(plot_html(fig, "Planning runs once per decode step on the CPU; SGLang's CUDA-graph steps pay "
                                    "fast_decode_plan, eager steps plan(). Compare with one layer's kernel."))
    return "".join(parts)


def _pairs(cases: list[dict], base: str, split: str) -> list[dict]:
    times = {(c["distribution"], c["batch"], c["split"]): c["median_us"] for c in cases}
    return [{"distribution": d, "batch": b, "ratio": times[(d, b, base)] / us}
            for (d, b, s), us in sorted(times.items()) if s == split and (d, b, base) in times]


def _med(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def cases_table(doc: dict) -> str:
    rows = [[c["batch"], c["distribution"], c["split"], c.get("split_kv"), c.get("work_units"),
             c.get("kv_chunk_tokens"), c["max_len"], c["imbalance"], c["median_us"], c["p10_us"], c["p90_us"],
             c.get("event_median_us"), c.get("plan_us") or c.get("fast_plan_us"), c["kernel_us_per_forward"]]
            for c in doc["cases"]]
    header = ["batch", "distribution", "variant", "split", "work units", "chunk", "longest", "max/mean", "median us",
              "p10 us", "p90 us", "event us", "planning us", "kernel us / step"]
    return f"<details><summary>All {len(rows)} cases</summary>{table(header, rows)}</details>"
