"""The live-trace section of fi_report.html and its fi_summary.json numbers, from trace.json (`fi_trace.py`).

render_section(doc, out_dir) -> HTML fragment (intro, sharing/fragmentation diagram, the tracer's own cost, plotly
divs, tables), or None without samples (the page shows its placeholder); headline(doc) -> dict (accepts None).
"""
from __future__ import annotations

from typing import Any

from llmhost.fi.report import figures
from llmhost.fi.report.figures import plot_html

COMMAND = "./fi_trace.py capture   (restarts ./serve.sh with the tracer, drives traffic, restores the server)"
COLORS = ("#4C78A8", "#F58518", "#54A24B")


def headline(doc: dict | None) -> dict[str, Any]:
    """Sharing, batch size and fragmentation of decode batches, and the graph/eager evidence."""
    if not doc or not doc.get("samples"):
        return {"samples": 0, "command": COMMAND}
    decode, prefill = doc["summary"].get("decode", {}), doc["summary"].get("prefill", {})
    proof, traffic = doc["graph_proof"], doc.get("traffic") or {}
    cost = traffic.get("overhead") or {}
    return {"samples": doc["samples"], "decode_requests_mean": decode.get("mean_requests"),
            "decode_sharing_ratio": decode.get("sharing_ratio"), "decode_mean_run_pages": decode.get("mean_run_len"),
            "prefill_sharing_ratio": prefill.get("sharing_ratio"),
            "decode_steps_graph": proof["decode_steps_graph"], "decode_steps_eager": proof["decode_steps_eager"],
            "server_cache_hit_ratio": traffic.get("cache_hit_ratio"),
            "tracer_throughput_change_pct": (cost.get("output_tok_s") or {}).get("change_pct"),
            "tracer_tpot_change_pct": (cost.get("tpot_ms_median") or {}).get("change_pct"),
            "tracer_noise_pct": (cost.get("output_tok_s") or {}).get("noise_pct"),
            "tracer_verdict": (cost.get("output_tok_s") or {}).get("verdict")}


def diagram() -> str:
    """Two requests of one batch: a shared prefix (same physical pages) and private pages in runs."""
    cell, y0, y1 = 34, 58, 128
    req0 = [10, 11, 12, 13, 20, 21]
    req1 = [10, 11, 12, 13, 30, 31]
    pool = list(range(8, 34))
    body = ['<text x="10" y="18" font-size="13" font-weight="bold">One batch in the KV pool: shared prefix pages '
            'and page runs</text>']
    for row, (name, pages, y) in enumerate((("request 0", req0, y0 - 26), ("request 1", req1, y0 + 2))):
        body.append(f'<text x="10" y="{y + 17}">{name}</text>')
        for i, page in enumerate(pages):
            color = COLORS[2] if page < 14 else COLORS[row]
            body.append(f'<rect x="{90 + i * cell}" y="{y}" width="{cell - 4}" height="24" fill="{color}"/>'
                        f'<text x="{90 + i * cell + 15}" y="{y + 17}" fill="#fff" text-anchor="middle">{page}</text>')
    body.append(f'<text x="10" y="{y1 + 17}">pool</text>')
    for i, page in enumerate(pool):
        used = page in req0 + req1
        color = COLORS[2] if 10 <= page < 14 else (COLORS[0] if page in req0 else COLORS[1] if used else "#ddd")
        body.append(f'<rect x="{90 + i * 22}" y="{y1}" width="20" height="24" fill="{color}"/>')
    body += [f'<text x="300" y="{y0 - 9}">green: read by both requests (prefix cache hit) -> sharing ratio '
             '8 / 12</text>',
             f'<text x="300" y="{y0 + 40}">runs: 10-13, 20-21 | 10-13, 30-31 -> mean run length 12 / 4 = 3 '
             'pages</text>']
    return ('<svg class="diagram" viewBox="0 0 760 170" width="100%" style="max-width:760px" role="img" '
            'aria-label="shared prefix pages and page runs" xmlns="http://www.w3.org/2000/svg" '
            'font-family="sans-serif" font-size="12">' + "".join(body) + "</svg>")


def figure(doc: dict) -> str:
    """Per-window evolution: requests per batch, sharing ratio, mean run length (decode and prefill)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = (("mean_requests", "requests per batch"), ("sharing_ratio", "sharing ratio"),
              ("mean_run_len", "mean run length (pages)"))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, subplot_titles=[t for _, t in panels])
    for color, mode in zip(COLORS, ("decode", "prefill")):
        points = [w for w in doc.get("windows", []) if w["mode"] == mode]
        mid = [(w["start_s"] + w["end_s"]) / 2 for w in points]
        for row, (key, _) in enumerate(panels, 1):
            fig.add_trace(go.Scatter(x=mid, y=[w[key] for w in points], name=mode, legendgroup=mode,
                                     showlegend=row == 1, mode="lines+markers", line={"color": color}), row=row,
                          col=1)
    fig.update_layout(height=620, title="How do batch size, prefix sharing and page contiguity evolve under load?")
    fig.update_xaxes(title_text="seconds since the first sample", row=3, col=1)
    return plot_html(fig, "Sharing rises as requests of one system prompt batch together (their prefix is read "
                     "from the same physical pages); run length falls as the pool fragments with churn.")


def scatter(doc: dict) -> str:
    """Every sampled decode batch: size vs sharing ratio, coloured by mean run length."""
    import plotly.graph_objects as go

    rows = [r for r in doc.get("batches", []) if r["mode"] == "decode"]
    fig = go.Figure(go.Scatter(x=[r["requests"] for r in rows], y=[r["sharing_ratio"] for r in rows],
                               mode="markers", marker={"color": [r["mean_run_len"] for r in rows], "showscale": True,
                                                       "colorbar": {"title": "run len"}, "size": 6, "opacity": 0.7},
                               text=[r["kind"] for r in rows]))
    fig.update_layout(height=380, xaxis_title="requests in the batch (padding excluded)",
                      yaxis_title="sharing ratio", title="Do bigger decode batches share more of their KV?")
    return plot_html(fig, "One dot per sampled decode step; hover shows whether it was a CUDA-graph replay.")


def tables(doc: dict) -> str:
    summary = doc["summary"]
    keys = ("batches", "mean_requests", "p90_requests", "mean_padding", "mean_kv_len", "sharing_ratio",
            "dedup_ratio", "mean_run_len", "contiguous_pairs", "truncated")
    rows = [[key.replace("_", " ")] + [summary.get(mode, {}).get(key) for mode in ("decode", "prefill")]
            for key in keys]
    traffic = doc.get("traffic") or {}
    extra = ""
    if traffic:
        extra = figures.table(["traffic", "value"], [[k.replace("_", " "), traffic.get(k)] for k in
                                                      ("requests", "ok", "failed", "prompt_tokens", "cached_tokens",
                                                       "cache_hit_ratio")])
    return figures.table(["metric", "decode", "prefill"], rows) + extra


def overhead_block(doc: dict) -> str:
    """The tracer's cost: phases (tracer off, on, on, off) of the same load in one server boot."""
    traffic = doc.get("traffic") or {}
    phases, cost = traffic.get("phases") or [], traffic.get("overhead") or {}
    if not phases:
        return "<p>No overhead phases in this trace (captured before the tracer could be paused).</p>"
    rows = [[i + 1, p["arm"], p["requests"], p["ok"], p["duration_s"], p["output_tok_s"], p["tpot_ms_median"],
             p["tpot_ms_p90"], p["ttft_ms_median"]] for i, p in enumerate(phases)]
    lines = [[metric, c["off"], c["on"], c["change_pct"], c["noise_pct"], c["verdict"]]
             for metric, c in (("output tokens/s", cost.get("output_tok_s")),
                               ("TPOT ms (median)", cost.get("tpot_ms_median"))) if c]
    return ("<h3>What does the tracer cost the server?</h3><p>The same closed-loop load (after a warm-up that fills "
            "the prefix cache) ran in four phases of one server boot, the tracer sampling ('on') or paused ('off': "
            "the patched function calls straight through after one attribute test, well under 1 us against a "
            "decode step of several ms), in the order off, on, on, off so that a slow drift hits both arms alike. "
            "TPOT is each request's mean inter-token latency, (last token - first token) / (tokens - 1). The noise "
            "column is how far the two phases of one arm differ; a change inside it is not a measured cost.</p>"
            + figures.table(["metric", "tracer off", "tracer on", "change %", "noise %", "verdict"], lines)
            + figures.table(["phase", "tracer", "requests", "ok", "seconds", "output tok/s", "TPOT ms p50",
                             "TPOT ms p90", "TTFT ms p50"], rows))


TITLE = "Live trace: how do real batches use the paged KV cache?"


def render_section(doc: dict | None, out_dir: str) -> str | None:
    """The report's trace section, or None without samples."""
    if not doc or not doc.get("samples"):
        return None
    head = diagram()
    proof = doc["graph_proof"]
    seen = (f"<p>The tracer patched SGLang's indices updaters in {doc.get('processes')} process(es) and, while "
            f"sampling, saw <b>{proof['decode_steps_graph']}</b> CUDA-graph decode replays and "
            f"<b>{proof['decode_steps_eager']}</b> eager decode steps and {proof['prefill_steps']} prefill steps "
            f"(it was paused during server start-up, graph capture and the warm-up); {doc['samples']} batches were "
            f"sampled ({doc['counters'].get('dropped_busy', 0)} dropped while the writer was busy). Padding slots "
            "of graph batches are excluded.</p>")
    if not proof["sees_graph_replays"]:
        seen += ("<p class='bad'>No CUDA-graph replay was seen: the server ran with CUDA graphs off, or every "
                 "batch was larger than the largest captured size.</p>")
    return (head + seen + overhead_block(doc) + figures.charts(figure, doc) + figures.charts(scatter, doc)
            + tables(doc))
