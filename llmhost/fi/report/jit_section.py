"""The JIT section of fi_report.html and its fi_summary.json numbers, from jit.json (`fi_bench.py jit`).

render_section(doc, out_dir) -> HTML fragment (intro, diagram, plotly divs without plotly.js, tables, the source
diff), or None without data (the page shows its placeholder); headline(doc) -> dict.
"""
from __future__ import annotations

import statistics
from html import escape
from typing import Any

from llmhost.fi.report import diagrams, figures
from llmhost.fi.report.figures import plot_html

COMMAND = "./fi_jit_setup.sh, then (with the environment it prints) $PY fi_bench.py jit"


def _ok(doc: dict) -> list[dict]:
    return [r for r in doc.get("variants", []) if r.get("ok")]


def headline(doc: dict | None) -> dict[str, Any]:
    """Numbers for fi_summary.json: typical and worst compile, cached start, how many modules one start compiles."""
    rows = _ok(doc) if doc else []
    if not rows:
        return {"variants": 0, "command": COMMAND}
    compiled = [r for r in rows if r.get("new_modules")]
    worst = max(rows, key=lambda r: r.get("compile_s") or 0)
    return {"variants": len(rows), "failed": len(doc["variants"]) - len(rows), "warm_cache": doc.get("warm"),
            "compile_s_median": statistics.median(r["compile_s"] for r in compiled) if compiled else None,
            "compile_s_max": worst.get("compile_s"), "slowest_variant": worst["variant"],
            "compile_s_total": sum(r.get("compile_s") or 0 for r in rows),
            "cached_first_call_s_median": statistics.median(r["first_call_cached_s"] for r in rows),
            "compile_cpu_s_total": sum(r.get("compile_cpu_s") or 0 for r in rows),
            "modules_built": sum(len(r.get("new_modules", [])) for r in rows),
            "cpu_cores": (doc.get("probe") or {}).get("cpu_cores"), "parallel_jobs": doc.get("jobs"),
            "stage_wall_s": doc.get("wall_s")}


def figure(doc: dict) -> str:
    """Stacked bars per variant: data setup, compile, and the cached first call (load + first run)."""
    import plotly.graph_objects as go

    rows = _ok(doc)
    names = [r["variant"] for r in rows]
    parts = (("data setup", "setup_s", "#9D755D"), ("JIT: generate + compile", "compile_s", "#F58518"),
             ("cached load + first run", "first_call_cached_s", "#4C78A8"))
    fig = go.Figure([go.Bar(y=names, x=[r.get(key) or 0 for r in rows], name=label, orientation="h",
                            marker_color=color) for label, key, color in parts])
    fig.update_layout(barmode="stack", height=110 + 28 * len(rows), xaxis_title="seconds",
                      yaxis={"autorange": "reversed"},
                      title="What does the first request of each attention variant wait for?")
    return plot_html(fig, "Orange is paid once per new module on a cold cache; blue is what every later "
                           "server start pays for that variant. A bar with no orange reused a module built "
                           "earlier (see 'modules built').")


def table(doc: dict) -> str:
    rows = []
    for r in doc.get("variants", []):
        if not r.get("ok"):
            rows.append([r["variant"], r.get("error", "failed"), "-", "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        compile_s, steady_ms = r.get("compile_s"), r.get("steady_median_ms")
        # how many steady kernel runs one compile costs: the scale of "first request" vs "every request"
        runs = compile_s * 1000 / steady_ms if r.get("new_modules") and compile_s and steady_ms else None
        rows.append([r["variant"], r.get("what", ""), ", ".join(r.get("new_modules") or ["none (reused)"]),
                     r.get("setup_s"), r.get("first_call_cold_s"), r.get("first_call_cached_s"), compile_s,
                     r.get("compile_cpu_s"), r.get("lanes_busy_at_start"), steady_ms, runs])
    return figures.table(["variant", "what differs", "modules built", "setup s", "first call cold s",
                          "first call cached s", "compile s (wall)", "compiler CPU s", "lanes busy",
                          "steady run ms", "compile = N runs"], rows)


def diff_block(doc: dict) -> str:
    diff = doc.get("diff")
    if not diff:
        return "<p>No source diff: the two --diff variants did not both build a module in this run.</p>"
    src, ninja = diff["sources"], diff["build_ninja"]
    return (f"<details><summary>Generated sources, {escape(diff['a'])} vs {escape(diff['b'])}: "
            f"{len(src['changed_files'])} file(s) differ ({escape(', '.join(src['changed_files']))}), "
            f"{len(src['identical_files'])} identical — click to open</summary>"
            f"<pre>{escape(src['text'])}</pre><p>build.ninja:</p><pre>{escape(ninja['text'] or '(same flags)')}"
            "</pre></details>")


TITLE = "JIT: what does a cold FlashInfer cache cost at server start?"


def render_section(doc: dict | None, out_dir: str) -> str | None:
    """The report's JIT section, or None without a measured variant."""
    if not doc or not _ok(doc):
        return None
    head = diagrams.jit()
    probe = doc.get("probe") or {}
    warm = ("<p class='bad'>Measured over a WARM cache (--allow-warm): first calls are cache hits, not compiles."
            "</p>" if doc.get("warm") else "")
    cache = escape(str(doc.get('cache_base')))
    intro = (f"<p>Each variant ran twice in fresh processes on a private JIT cache ({cache}): cold (generate + "
             "compile + load + first run), then cached (load + first run). compile = cold first "
             f"call - cached first call; compiler CPU s = CPU time of ninja/nvcc, which does not depend on what else "
             f"ran. Variants ran {doc.get('jobs') or 1} at a time (the stage took {figures.fmt(doc.get('wall_s'))} s): "
             f"wall compile times include the sharing of cores with the other lanes (column 'lanes busy'); "
             f"--jobs 1 times each alone. Build parallelism: {probe.get('cpu_cores')} CPU cores, MAX_JOBS="
             f"{escape(str(probe.get('max_jobs') or 'unset (ninja: cores + 2)'))}, FLASHINFER_NVCC_THREADS="
             f"{escape(str(probe.get('flashinfer_nvcc_threads') or '1 (default)'))}, CUDA archs "
             f"{escape(', '.join(probe.get('cuda_archs', [])))}. SGLang decodes Qwen3-4B (GQA group 4) on tensor "
             "cores, which is FlashInfer's prefill kernel: its decode needs no decode module at all.</p>")
    return head + warm + intro + figures.charts(figure, doc) + table(doc) + diff_block(doc)
