"""The page of a `run_bench.py --single-stream` run: where one stream's time per output token goes, arm by arm.

    build(run) -> the HTML: environment, the breakdown per arm as a stacked bar, the terminal's table
                  (llmhost.bench.stream_breakdown: the same cells, '-' = not measured), the GPU kernels of a
                  forward pass (stream_kernels.jsonl) and what was not measured
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from llmhost.bench.stream_breakdown import COLUMNS, Breakdown, breakdown, missing_notes, table_cells
from llmhost.bench import store
from llmhost.bench.stream_records import StreamArmRecord
from llmhost.report import environment, page
from llmhost.report.figures import Chart, _go, _layout, legend_on_top
from llmhost.report.load import SideRun
from llmhost.report.page import esc

# The parts of the client's mean gap, left to right. A part an instrument could not split is drawn whole under a
# name that says so, never split by a guess; a part with no number at all is left out (the notes say why).
SEGMENTS: tuple[tuple[str, Callable[[Breakdown], float | None], str], ...] = (
    ("weight-read floor", lambda b: b.floor_ms if b.gpu_forward_ms is not None else None, "#4e79a7"),  # in it
    ("GPU above floor", lambda b: b.gpu_above_floor_ms, "#76b7b2"),
    ("GPU forward (floor not stated)", lambda b: b.gpu_forward_ms if b.floor_ms is None else None, "#a0cbe8"),
    ("server step (not split: no GPU forward)",
     lambda b: b.server_step_ms if b.gpu_forward_ms is None else None, "#bab0ac"),
    ("CPU gap", lambda b: b.cpu_gap_ms, "#f28e2b"),
    ("streaming", lambda b: b.streaming_ms, "#59a14f"),
    ("client gap (not split: no server step)",
     lambda b: b.client_itl_mean_ms if b.server_step_ms is None else None, "#d7d7d7"),
)
EXTRA_COLUMNS = ("requests ok", "Decode lines")


def time_per_token(run: SideRun, parts: list[Breakdown]) -> Chart:
    title = "Where does one stream's time per output token go?"
    read = ("Milliseconds per output token at one running request: the weight-read floor (weights / datasheet "
            "bandwidth), the GPU forward above it, the CPU gap between forwards, then streaming (detokenize, HTTP, "
            "the client) up to the client's mean chunk gap at the bar's end; the tick marks the client's ITL p50.")
    if not any(f(b) is not None for _, f, _ in SEGMENTS for b in parts):
        return Chart("stream", title, read, None, "no arm measured a time per token — see What was not measured")
    go, fig = _go(), _go().Figure()
    arms = [run.arm_label(b.arm) for b in parts]
    for name, part, color in SEGMENTS:
        values = [part(b) for b in parts]
        if any(v is not None for v in values):
            fig.add_trace(go.Bar(y=arms, x=values, name=name, orientation="h", marker={"color": color},
                                 hovertemplate=f"{name}: %{{x:.2f}} ms<extra></extra>"))
    fig.add_trace(go.Scatter(y=arms, x=[b.client_itl_p50_ms for b in parts], name="client ITL p50",
                             mode="markers+text", textposition="top center",
                             text=["" if b.client_itl_p50_ms is None else f"p50 {b.client_itl_p50_ms:.2f}"
                                   for b in parts],
                             marker={"symbol": "line-ns-open", "size": 26, "line": {"width": 3}, "color": "#1d1d1f"}))
    fig.update_layout(barmode="relative")  # a negative part (a mean below a median's share) goes left of zero
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="ms per output token")
    return Chart("stream", title, read, legend_on_top(_layout(fig, 200 + 50 * len(parts))))


def table_rows(records: list[StreamArmRecord]) -> list[dict[str, Any]]:
    """One row per arm: the terminal table's cells by its column names, plus the requests and Decode lines."""
    cells = table_cells([breakdown(r) for r in records])
    return [{**dict(zip(COLUMNS, row)), "requests ok": str(r.requests_ok), "Decode lines": str(r.decode_lines)}
            for r, row in zip(records, cells)]


def notes_html(run: SideRun) -> str:
    notes = [(rec.arm, note) for rec in run.records for note in missing_notes(rec)]
    if not notes:
        return "<p class=read>Every instrument gave its numbers for every arm.</p>"
    items = "".join(f"<li><b>{esc(run.arm_label(arm))}</b>: {esc(note)}</li>" for arm, note in notes)
    return f"<p class=read>A '-' in the table is a number not measured, for these reasons:</p><ul>{items}</ul>"


def kernels_html(run: SideRun) -> str:
    """The kernel profile of each arm (stream_kernels.jsonl): kernel time per forward pass by category with its
    share, the span and idle, then the longest kernels; a line saying why when an arm has none."""
    loaded = store.RunStore(run.path).read_stream_kernels()
    if not loaded.records:
        return ("<p class=read>No kernel profile in this run (stream_kernels.jsonl is missing: a run recorded "
                "before the profile pass, or one cut short).</p>")
    out = ["<p class=read>One more request per arm with SGLang's profiler on (POST /start_profile, 100 forward "
           "passes, GPU activity; llmhost/bench/kernel_profile.py): GPU kernel time per forward pass by category "
           "(a regex on the kernel's name), the span from the first kernel to the last, and the idle in it.</p>"]
    for rec in loaded.records:
        label = esc(run.arm_label(rec.arm))
        if rec.status != "ok" or rec.kernel_ms is None or rec.span_ms is None:
            out.append(f"<p class=read><b>{label}</b>: no kernel profile — {esc(rec.error)}</p>")
            continue
        rows = [{"part": cat, "ms": f"{ms:.3f}", "share": f"{100 * ms / rec.span_ms:.0f}%"}
                for cat, ms in rec.by_category.items()]
        rows.append({"part": "idle between kernels", "ms": f"{rec.span_ms - rec.kernel_ms:.3f}",
                     "share": f"{100 * (rec.span_ms - rec.kernel_ms) / rec.span_ms:.0f}%"})
        out.append(f"<h3>{label}: {rec.kernel_ms:.2f} ms of kernels in a {rec.span_ms:.2f} ms span per forward "
                   f"pass ({rec.steps} passes, {esc(rec.trace_file)})</h3>")
        out.append(page.table([("part", lambda r: esc(r["part"])), ("ms per pass", lambda r: r["ms"]),
                               ("of the span", lambda r: r["share"])], rows))
        out.append(top_kernels_table([dataclasses.asdict(k) for k in rec.top]))
    return "".join(out)


def top_kernels_table(top: list[dict[str, Any]]) -> str:
    """The longest kernels of a profile (KernelShare fields as a dict): name, ms and calls per forward pass."""
    return page.table([("kernel", lambda k: esc(k["name"])), ("ms per pass", lambda k: f"{k['ms_per_step']:.3f}"),
                       ("calls per pass", lambda k: f"{k['calls_per_step']:.1f}")], top)


def build(run: SideRun) -> str:
    records: list[StreamArmRecord] = list(run.records)
    facts = [*environment.provenance_facts(run.manifest),
             ("Requests per arm", run.manifest.single_stream_requests),
             ("Arms", f"{len(records)} recorded, {sum(r.status == 'ok' for r in records)} ok")]
    columns = [(n, lambda r, n=n: esc(r[n])) for n in (*COLUMNS, *EXTRA_COLUMNS)]
    intro = ("<p class=read>Per arm, one restart with SGLang's instruments on, then sequential streamed requests; "
             "every part is a difference of two measured medians (llmhost/bench/stream_breakdown.py): GPU above "
             "floor = GPU forward − floor, CPU gap = server step − GPU forward, streaming = client mean gap − "
             "server step; BW share = floor / GPU forward. Milliseconds per output token.</p>")
    sections = [("overview", "Overview", environment.card(facts, run.warnings) + intro),
                ("breakdown", "Time per token", page.chart(time_per_token(run, [breakdown(r) for r in records]))),
                ("table", "Per arm", page.table(columns, table_rows(records))),
                ("kernels", "GPU kernels", kernels_html(run)),
                ("notes", "What was not measured", notes_html(run))]
    header = (f"<h1>One stream's time per token — {esc(run.run_id)}</h1>"
              f"<p class=read>{esc(environment.subtitle(run.manifest))} · built from {esc(run.path.name)}</p>")
    return page.document(f"Single stream {run.run_id}", sections, header)
