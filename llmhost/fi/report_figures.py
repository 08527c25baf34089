"""Tables and plotly figures of the FlashInfer report, built from the stage JSON documents.

Every figure's title asks its question and a sentence under it says how to read it. plotly and pandas are imported
inside the figure functions only (the page inlines plotly.js once; figures are emitted without it).
"""
from __future__ import annotations

from collections.abc import Iterator
from html import escape
from typing import Any


def fmt(value: Any) -> str:
    """Numbers to 3 significant digits (thousands kept whole), None to '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


LABEL_WORDS = (("gb_s", "GB/s"), ("pct_peak", "% of peak"), ("pct_copy", "% of copy"), ("_us", " (us)"),
               ("fp8", "FP8"), ("bf16", "BF16"), ("kv", "KV"), ("_", " "))


def label(key: str) -> str:
    """'decode_gb_s_best' -> 'decode GB/s best': units spelled out for the headline table."""
    for old, new in LABEL_WORDS:
        key = key.replace(old, new)
    return key


def flatten(data: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Headline rows: nested dicts become 'a / b' labels; a dict of plain values stays one 'k v · k v' cell."""
    for key, value in data.items():
        label_ = f"{prefix}{label(str(key))}"
        if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
            yield from flatten(value, f"{label_} / ")
        elif isinstance(value, dict):
            yield label_, " · ".join(f"{label(str(k))}: {fmt(v)}" for k, v in value.items())
        else:
            yield label_, value


def table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(fmt(v) if not isinstance(v, str) else v)}</td>" for v in row)
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(fig: Any, how: str) -> str:
    import plotly.io as pio

    fig.update_layout(template="plotly_white", margin={"t": 70, "l": 60, "r": 20, "b": 50})
    return pio.to_html(fig, include_plotlyjs=False, full_html=False) + f'<p class="how">{escape(how)}</p>'


def _sparse_frame(doc: dict) -> Any:
    import pandas as pd

    df = pd.DataFrame([{k: v for k, v in c.items() if k != "samples_ms"} for c in doc["cases"]])
    df["kernel"] = df["dtype"] + " · " + df["path"]
    df["batch shape"] = df["batch"].astype(str) + "x" + df["seq_len"].astype(str)
    df["page size"] = df["page_size"].astype(str)
    return df


def sparse_figures(doc: dict) -> str:
    import plotly.express as px

    df = _sparse_frame(doc)
    parts = []
    scattered = df[df["placement"] != "contiguous"]
    if not scattered.empty:
        fig = px.bar(scattered, x="page size", y="vs_contiguous", color="placement", barmode="group",
                     facet_row="kernel", facet_col="batch shape", height=220 * df["kernel"].nunique() + 120,
                     title="Does scattering KV pages slow decode down?",
                     labels={"vs_contiguous": "time / contiguous"})
        fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
        parts.append(_figure(fig, "Each bar is a decode step's time divided by the same batch stored contiguously "
                                  "(1 = no cost); rows are KV dtype and kernel path, columns batch shapes."))
    if df["pct_peak"].notna().any():
        fig = px.line(df, x="page size", y="pct_peak", color="kernel", line_dash="placement", markers=True,
                      facet_col="batch shape", height=420, labels={"pct_peak": "% of peak HBM bandwidth"},
                      title="How close to the memory-bandwidth ceiling does decode get?")
        ceil = doc.get("ceilings") or {}
        if ceil.get("copy_gb_s") and ceil.get("peak_gb_s"):
            fig.add_hline(y=100 * ceil["copy_gb_s"] / ceil["peak_gb_s"], line_dash="dot", line_color="#b00",
                          annotation_text="device-to-device copy (read + write)", annotation_position="bottom right")
        parts.append(_figure(fig, "Bytes a decode step must move (K/V of every token, q, o, page table) over its "
                                  "median time, as % of the datasheet peak; the dotted line is what a plain copy "
                                  "(read + write bytes) reaches on this GPU. Decode only reads, so it can "
                                  "match that line."))
    fp8 = _fp8_speedups(df)
    if fp8:
        import pandas as pd

        fig = px.bar(pd.DataFrame(fp8), x="batch shape", y="speedup", color="placement", barmode="group",
                     facet_col="path", height=380, title="How much faster is decode with an FP8 KV cache?",
                     labels={"speedup": "BF16 time / FP8 time"})
        fig.add_hline(y=2.0, line_dash="dot", line_color="#555", annotation_text="2x: half the bytes")
        parts.append(_figure(fig, "Above 1, FP8 (e5m2) KV decodes faster than BF16 (median over page sizes); "
                                  "2 is the limit if decode were purely bandwidth-bound, since FP8 halves KV bytes."))
    return "".join(parts)


def _fp8_speedups(df: Any) -> list[dict]:
    import statistics

    key = ["path", "batch shape", "placement", "page_size"]
    bf16 = {tuple(r[k] for k in key): r["median_us"] for _, r in df[df["dtype"] == "bf16"].iterrows()}
    fp8 = {tuple(r[k] for k in key): r["median_us"] for _, r in df[df["dtype"] == "fp8"].iterrows()}
    groups: dict[tuple, list[float]] = {}
    for k, us in bf16.items():
        if k in fp8:
            groups.setdefault(k[:3], []).append(us / fp8[k])
    return [{"path": k[0], "batch shape": k[1], "placement": k[2], "speedup": statistics.median(v)}
            for k, v in groups.items()]


def sparse_table(doc: dict) -> str:
    rows = [[c["dtype"], c["path"], f"{c['batch']}x{c['seq_len']}", c["page_size"], c["placement"], c["median_us"],
             c["p10_us"], c["p90_us"], c["gb_s"], c["pct_peak"], c["pct_copy"], c.get("vs_contiguous"),
             c["mean_run_pages"]] for c in doc["cases"]]
    header = ["KV dtype", "path", "batch", "page", "placement", "median us", "p10 us", "p90 us", "GB/s", "% peak",
              "% copy", "vs contiguous", "mean run (pages)"]
    return f"<details><summary>All {len(rows)} cases</summary>{table(header, rows)}</details>"


def balance_figures(doc: dict) -> str:
    import pandas as pd
    import plotly.express as px

    parts = []
    speed = [{"distribution": d, "batch": b, "speedup": s}
             for d, per in (doc.get("speedup_by_distribution") or {}).items() for b, s in per.items()]
    if speed:
        fig = px.bar(pd.DataFrame(speed), x="distribution", y="speedup", color="batch", barmode="group",
                     height=400, title="When does split-KV pay off?",
                     labels={"speedup": "time without split / with split", "batch": "batch size"})
        fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
        parts.append(_figure(fig, "Above 1, letting the planner split long requests across CTAs is faster than one "
                                  "CTA per request; every bar holds the same total tokens, only their spread "
                                  "over requests differs."))
    on = pd.DataFrame([c for c in doc["cases"] if c["split"] == "on"])
    if not on.empty:
        per_batch = on.groupby("batch")[["plan_us", "median_us", "kernel_us_per_forward"]].median().reset_index()
        long = per_batch.melt(id_vars="batch", var_name="what", value_name="us").replace(
            {"plan_us": "plan() per step (CPU)", "median_us": "kernel per layer",
             "kernel_us_per_forward": f"kernel x {doc.get('num_layers')} layers"})
        long["batch"] = long["batch"].astype(str)
        fig = px.bar(long, x="batch", y="us", color="what", barmode="group", log_y=True, height=400,
                     title="What does plan() cost next to the kernel time it schedules?",
                     labels={"us": "microseconds (log)", "batch": "batch size"})
        parts.append(_figure(fig, "plan() runs once per decode step on the CPU (median over distributions); "
                                  "compare it with one layer's kernel and with the whole step's attention."))
    return "".join(parts)


def balance_table(doc: dict) -> str:
    rows = [[c["batch"], c["distribution"], c["split"], c["max_len"], c["imbalance"], c["median_us"], c["p10_us"],
             c["p90_us"], c["plan_us"], c["plan_us_per_layer"], c["kernel_us_per_forward"]] for c in doc["cases"]]
    header = ["batch", "distribution", "split", "longest", "max/mean", "median us", "p10 us", "p90 us",
              "plan us", "plan us / layer", "kernel us / step"]
    return f"<details><summary>All {len(rows)} cases</summary>{table(header, rows)}</details>"
