"""The page of a `run_bench.py --startup` run: where each arm's restart spends its time.

    build(run) -> the HTML: environment, the median phases per arm, every restart on its own, the table of
                  medians (llmhost.bench.startup_bench.summarize, the terminal table's numbers), the import
                  profile's medians when the run took one (--import-profile) and the failures
"""
from __future__ import annotations

import shlex
from typing import Any

from llmhost.bench.records import StartupRecord
from llmhost.bench.startup_bench import ArmStartup, summarize
from llmhost.report import environment, page
from llmhost.report.figures import Chart, _go, _layout, legend_on_top
from llmhost.report.load import SideRun
from llmhost.report.page import esc, num
from llmhost.serve.import_profile import TOP
from llmhost.serve.startup import PHASE_ORDER

# One colour per phase, the same on every page; phases SGLang may log one day get the rest of the palette.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
FAILED_COLOR = "#b91c1c"


def phase_order(records: list[StartupRecord]) -> list[str]:
    """Every phase the restarts logged, in log order (a phase only some restarts logged keeps its place)."""
    seen = list(dict.fromkeys(name for r in records for name in r.phases))
    known = [p for p in PHASE_ORDER if p in seen]
    return known + [p for p in seen if p not in known]


def phase_colors(phases: list[str]) -> dict[str, str]:
    unknown = [p for p in phases if p not in PHASE_ORDER]
    colors = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(PHASE_ORDER)}
    return {p: colors.get(p) or PALETTE[(len(PHASE_ORDER) + unknown.index(p)) % len(PALETTE)] for p in phases}


def _stacked(bars: list[str], phases: list[str], seconds: list[dict[str, float]], ready: list[float | None],
             ready_name: str) -> Any:
    """Horizontal stacked bars (one per label, top to bottom), one trace per phase, ready times marked."""
    go, fig, colors = _go(), _go().Figure(), phase_colors(phases)
    for phase in phases:
        fig.add_trace(go.Bar(y=bars, x=[s.get(phase) for s in seconds], name=phase, orientation="h",
                             marker={"color": colors[phase]}, hovertemplate=f"{phase}: %{{x:.1f}} s<extra></extra>"))
    fig.add_trace(go.Scatter(y=bars, x=ready, name=ready_name, mode="markers+text", textposition="middle right",
                             text=["" if r is None else f" {r:.1f} s" for r in ready],
                             marker={"symbol": "diamond", "size": 10, "color": "#1d1d1f"}))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text="seconds from launch", rangemode="nonnegative")
    return legend_on_top(_layout(fig, 200 + 34 * len(bars)))


def median_phases(run: SideRun, arms: list[ArmStartup], phases: list[str]) -> Chart:
    title = "Where does a restart's time go, arm by arm?"
    read = ("Median seconds of each start-up phase over the arm's successful restarts, in the order SGLang logs "
            "them; the diamond and the number: the arm's median launch-to-ready time (a sum of medians need not "
            "equal the median of the sums exactly).")
    shown = [a for a in arms if a.ok]
    if not shown:
        return Chart("startup-median", title, read, None, "no restart reached ready — see Failed restarts below")
    fig = _stacked([run.arm_label(a.arm) for a in shown], phases, [a.phases for a in shown],
                   [a.ready_s for a in shown], "ready (median)")
    return Chart("startup-median", title, read, fig)


def every_restart(run: SideRun, phases: list[str]) -> Chart:
    title = "Was any restart unlike the others (a cold first start, a slow one)?"
    read = ("Every restart in the order it ran, its phases stacked as above, the diamond its launch-to-ready time; "
            "a red bar is a restart that failed, as long as it took to give up (its error is in Failed restarts).")
    records: list[StartupRecord] = list(run.records)
    bars = [f"{run.arm_label(r.arm)} #{r.repeat}" for r in records]
    fig = _stacked(bars, phases, [r.phases if r.status == "ok" else {} for r in records],
                   [r.ready_s if r.status == "ok" else None for r in records], "ready")
    if any(r.status != "ok" for r in records):
        fig.add_trace(_go().Bar(y=bars, x=[None if r.status == "ok" else r.restart_s for r in records],
                                orientation="h", name="failed", marker={"color": FAILED_COLOR},
                                hovertext=[r.error for r in records]))
    return Chart("startup-each", title, read, fig)


def table_rows(run: SideRun, arms: list[ArmStartup]) -> list[dict[str, Any]]:
    """One row per arm: the page's table, cells as text ('—' = not measured)."""
    flags = {a.name: shlex.join(a.flags) or "(our defaults)" for a in run.manifest.arms}

    def span(a: ArmStartup) -> str:
        return "—" if a.ready_s is None else f"{num(a.ready_s)} ({num(a.ready_min_s)}–{num(a.ready_max_s)})"

    return [{"Arm": run.arm_label(a.arm), "Flags": flags.get(a.arm, "(not in manifest)"),
             "Starts ok / failed": f"{a.ok} / {a.failed}", "Ready s, median (min–max)": span(a),
             "Restart s, median": num(a.restart_s), **{f"{p} s": num(s) for p, s in a.phases.items()}}
            for a in arms]


def medians_table(run: SideRun, arms: list[ArmStartup], phases: list[str]) -> str:
    rows = table_rows(run, arms)
    names = [*(list(rows[0])[:5] if rows else []), *(f"{p} s" for p in phases)]
    columns = [(n, lambda r, n=n: esc(r.get(n, "—"))) for n in names]
    return page.table(columns, rows, left=2)


def imports_html(run: SideRun, arms: list[ArmStartup]) -> str:
    """Per arm, the median import seconds of the packages that took the most (any arm's top TOP), the rest and the
    sum; '' when no restart was profiled."""
    profiled = [a for a in arms if a.imports]
    if not profiled:
        return ""
    top = list(dict.fromkeys(n for a in profiled for n in list(a.imports.packages_s)[:TOP]))
    rows = [{"arm": run.arm_label(a.arm), "starts": a.imports_starts, "processes": a.imports.processes,
             **{n: a.imports.packages_s.get(n, 0.0) for n in top},
             "the rest": a.imports.total_s - sum(a.imports.packages_s.get(n, 0.0) for n in top),
             "sum": a.imports.total_s} for a in profiled]
    columns: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(r["arm"])), ("Starts", lambda r: num(r["starts"], 0)),
        ("Processes", lambda r: num(r["processes"], 0)),
        *((f"{n} s", lambda r, n=n: num(r[n], 1)) for n in [*top, "the rest", "sum"])]
    return ("<p class=read>CPython's import profile (PYTHONPROFILEIMPORTTIME=1) of every process the server started: "
            "per top-level package, the seconds its modules took to import (their own time, not what they imported "
            "in turn), summed over the processes, median over the profiled starts. Processes that import side by "
            "side overlap, so the sum is import work, not seconds of the start.</p>" + page.table(columns, rows))


def failures_html(run: SideRun) -> str:
    failed = [r.to_dict() for r in run.records if r.status != "ok"]
    if not failed:
        return "<p class=read>Every restart reached ready.</p>"
    columns: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(run.arm_label(r["arm"]))), ("Restart", lambda r: num(r["repeat"], 0)),
        ("Began (UTC)", lambda r: esc(r["started_at"])), ("Gave up after s", lambda r: num(r["restart_s"])),
        ("Error", lambda r: f"<span class=bad>{esc(r['error'] or 'no error recorded')}</span>")]
    return page.table(columns, failed, left=5)


def build(run: SideRun) -> str:
    records: list[StartupRecord] = list(run.records)
    arms, phases = summarize(records), phase_order(records)
    facts = [*environment.provenance_facts(run.manifest),
             ("Restarts", f"{len(records)} recorded, {run.manifest.startup_restarts} planned per arm"),
             ("Command", shlex.join(run.manifest.provenance.command) or None)]
    intro = ("<p class=read>Each arm's server restarted as ./serve.sh restart does, with the arm's flags; ready = "
             "launch to the first generation answered, phases read from SGLang's log (llmhost.serve.startup). "
             "Medians over the restarts that reached ready.</p>")
    imports = imports_html(run, arms)
    sections = [("overview", "Overview", environment.card(facts, run.warnings) + intro),
                ("phases", "Phases", page.chart(median_phases(run, arms, phases))
                 + page.chart(every_restart(run, phases))),
                ("table", "Per arm", medians_table(run, arms, phases)),
                *([("imports", "Imports", imports)] if imports else []),
                ("failed", f"Failed restarts ({sum(r.status != 'ok' for r in records)})", failures_html(run))]
    header = (f"<h1>Server start-up — {esc(run.run_id)}</h1>"
              f"<p class=read>{esc(environment.subtitle(run.manifest))} · built from {esc(run.path.name)}</p>")
    return page.document(f"Start-up {run.run_id}", sections, header)
