"""Assemble the benchmark dashboard from a loaded run: tables + KPI cards + figures -> page sections.

    build(run, slo)                 -> Dashboard (the HTML text and the summary rows)
    build(run, slo, other=run_b)    -> the same page plus a regression section (run vs run_b)
    build(run, slo, price=GpuPrice(3.5, "--gpu-hourly-usd"))  -> plus the cost card (dollars per M output tokens)
    write(dashboard, out_html)      -> out_html, summary.csv and summary.json beside it (atomic writes)
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shlex
from pathlib import Path
from typing import Any

from llmhost import cost, files, stats
from llmhost.report import (decode_bound, decode_bound_page, environment, figures, kpis, layouts, load_kernels_page,
                            page, steady, steady_page, tables, timeline, tuner)
from llmhost.report.load import Run
from llmhost.report.page import esc, num, with_ci

CHARTS = {**figures.FIGURES, "kv": timeline.kv_cache, "gpu": timeline.gpu}
SECTION_CHARTS = (("capacity", "Capacity", ("capacity", "qps")), ("latency", "Latency", ("latency", "survival")),
                  ("h2h", "Head to head", ("head2head",)), ("telemetry", "Telemetry", ("kv", "gpu")))
DIFF_METRICS = ("output_throughput", "ttft_p50", "ttft_p99", "tpot_p50", "goodput")


@dataclasses.dataclass(frozen=True, slots=True)
class Dashboard:
    html: str
    summary: list[dict[str, Any]]
    meta: dict[str, Any]


def build(run: Run, slo: stats.Slo, other: Run | None = None, seed: int = 0,
          price: cost.GpuPrice | None = None) -> Dashboard:
    """The page for `run` (the regression view against `other`; the cost card with `price`), plus the summary
    rows."""
    run = layouts.with_layout_labels(run)  # arms that differ in TP/DP/router say so wherever they are named
    groups = tables.build_groups(run)
    rows = tables.summary_rows(groups, slo, seed)
    ctx = figures.Context(run, groups, rows, tables.baseline_rows(run, groups, slo, seed), slo)
    colors = {a.name: (a.label, a.color) for a in run.arms}
    windows = steady.window_groups(run, groups, seed)
    steady_rows = steady.steady_rows(groups, windows, slo, seed)
    paired, unsteady = steady.paired_rows(run, groups, windows, slo), steady.not_steady_rows(groups, windows)
    profiled = load_kernels_page.rows(run)
    bound = decode_bound.with_profiles(decode_bound.bound_rows(run, steady_rows), profiled)
    headline = kpis.steady_view(rows, steady_rows, slo.pct)  # the cards' numbers: steady windows where there are
    cards = kpis.build_cards(run, headline, slo, price)
    sections = [("overview", "Overview", env_card(run, slo) + page.cards(cards, colors)),
                ("baseline", "Settings vs baseline", baseline_html(ctx)),
                ("steady", "Steady state and repeats", steady_page.section_html(run, steady_rows, paired, unsteady,
                                                                                 slo)),
                ("bound", "What bounds a decode step", decode_bound_page.section_html(run, bound)
                 + load_kernels_page.section_html(run, profiled))]
    tuner_html, tuner_ranking = tuner.section(run, slo, price)
    if tuner_html:  # a --tune run: its trials right after the overview
        sections.insert(1, ("tuner", "Tuner", tuner_html))
    for anchor, title, keys in SECTION_CHARTS:
        sections.append((anchor, title, "".join(page.chart(CHARTS[k](ctx)) for k in keys)))
    sections.append(("tools", "Tool calls", toolcalls_html(run)))
    if other is not None:
        cmp_rows = tables.compare_rows(groups, tables.build_groups(other), slo, seed)
        sections.append(("compare", f"Regression: {run.run_id} vs {other.run_id}", compare_html(run, other, cmp_rows)))
    sections += [("points", "All points", points_html(rows)), ("methods", "Methods", methods_html(run, slo))]
    header = (f"<h1>LLM serving benchmark — {esc(run.run_id)}</h1><p class=read>Built from {esc(run.path.name)} "
              "(stored results only; rebuild any time with other SLOs: ./make_dashboard.py RUN_DIR --slo-ttft-ms …)"
              "</p>")
    meta = {"run_id": run.run_id, "slo": dataclasses.asdict(slo), "compared_with": other.run_id if other else None,
            "baseline": ctx.baseline, "tune": tuner_ranking, "steady": steady_rows, "paired": paired, "not_steady": unsteady,
            "decode_bound": bound, "point_kernels": profiled,
            "layouts": layouts.arm_layouts(run), "estimate": run.reckoning and run.reckoning.to_json(),
            "cost": price and {**dataclasses.asdict(price), "points": kpis.cost_rows(
                headline, [a.name for a in run.arms], price.usd_per_hour)}}
    return Dashboard(page.document(f"Benchmark {run.run_id}", sections, header), rows, meta)


def env_card(run: Run, slo: stats.Slo) -> str:
    planned = {p.point_id for p in run.plan}
    done = {p.point_id for p in run.points}
    failed = sum(p.status != "ok" for p in run.points)
    facts = [*environment.provenance_facts(run.manifest), ("Seed", run.manifest.seed),
             ("SLO", f"TTFT ≤ {slo.ttft_ms:g} ms, TPOT ≤ {slo.itl_ms:g} ms, for ≥ {slo.pct:g}% of requests"
                     + ("" if run.slo == slo else " (none recorded: defaults)" if run.slo is None
                        else " (overridden at build time)")),
             ("Points", f"{len(done)} recorded of {len(planned) or len(done)} planned"
                        + (f" ({len(run.manifest.adaptive_repeats)} of them adaptive repeats: a headline point's "
                           "throughput CI was still wide)" if run.manifest.adaptive_repeats else "")
                        + (f", {failed} failed (see All points)" if failed else "")
                        + (f" — {len(planned - done)} never ran: ./run_bench.py --resume {run.path}"
                           if planned - done else "")),
             *timing_facts(run, is_finished=not planned - done)]
    return environment.card(facts, run.warnings)


def timing_facts(run: Run, is_finished: bool) -> list[tuple[str, str]]:
    """The run's time against its estimate, and its ETA swing (llmhost.bench.reckoning); none for a run that
    recorded no estimate."""
    if run.reckoning is None:
        return []
    took, *eta = run.reckoning.lines()
    return [("Time vs estimate", took if is_finished else f"so far (not finished): {took}"),
            *(("ETA swing", line) for line in eta)]


def _delta_cell(metric: str) -> page.Cell:
    m = tables.METRICS[metric]

    def cell(r: dict[str, Any]) -> str:
        verdict = r[f"{metric}_verdict"]
        cls = {"better": "better", "worse": "worse"}.get(verdict, "noise")
        d, lo, hi = r[f"{metric}_delta_pct"], r[f"{metric}_lo_pct"], r[f"{metric}_hi_pct"]
        unit = " pp" if r.get(f"{metric}_unit") == "pp" else "%"
        value = r[f"{metric}_b"]
        if math.isnan(d):  # "no data": a side's point failed or is missing; still show what this arm did
            shown = "" if value is None or math.isnan(value) else f"{num(value)} {esc(m.unit)}<br>"
            return f"{shown}<span class=noise>{esc(verdict)}</span>"
        ci = f" [{lo:+.1f}, {hi:+.1f}]" if not math.isnan(lo) else ""
        return (f"class={cls}|{num(value)} {esc(m.unit)}<br><b>{d:+.1f}{unit}</b>"
                f"<span class=noise>{ci}</span><br><small>{esc(verdict)}</small>")
    return cell


def diff_columns(first: str, first_fn: page.Cell) -> list[tuple[str, page.Cell]]:
    cols: list[tuple[str, page.Cell]] = [(first, first_fn), ("Point", lambda r: esc(
        f"{r['workload']} · {r['pattern']} · {r['load']}"))]
    return cols + [(f"{tables.METRICS[k].label} (Δ{' pp' if tables.METRICS[k].unit == '%' else '%'} [95% CI])",
                    _delta_cell(k)) for k in DIFF_METRICS]


def baseline_html(ctx: figures.Context) -> str:
    run, rows = ctx.run, ctx.baseline
    base = next((a for a in run.arms if a.is_baseline), run.arms[0] if run.arms else None)
    intro = (f"<p class=read>Each arm changes exactly one setting from the baseline arm, "
             f"<b>{esc(base.label if base else '?')}</b>. Cells: the arm's value, its change vs the baseline at the "
             "same point (goodput in percentage points, the rest in %), the 95% CI of that change (latencies, "
             "goodput: bootstrap over requests; throughput: Welch t over repeats), and a verdict — \"within noise\" "
             "when the CI includes 0, \"no CI\" when a side has too little data for one (throughput: a single "
             "repeat; run with --repeat 3), \"no data\" when a side's point failed. The latency CIs here pool "
             "every request, transients included, and treat them as independent; the paired, steady-window view "
             "in <a href='#steady'>Steady state and repeats</a> does not.</p>")
    base_rows = [r for r in ctx.rows if base and r["arm"] == base.name]
    if base and base_rows and not any(r["points_ok"] for r in base_rows):
        errors = "; ".join(sorted({r["point_errors"] for r in base_rows if r["point_errors"]})) or "no error text"
        intro += page.missing(f"Every point of the baseline arm {base.name} failed ({errors[:300]}), so no arm can "
                              f"be compared with it — fix that, then ./run_bench.py --resume {run.path}")
    if not rows:
        return intro + page.missing("No arm shares a point with the baseline arm — run ./run_bench.py with the "
                                    "baseline and at least one other arm (e.g. --arms baseline,fp8-kv).")
    labels = {a.name: a.label for a in run.arms}
    columns = diff_columns("Arm", lambda r: esc(labels.get(r["arm"], r["arm"])))
    ref = {(wl, next(iter(g.values())).concurrency) for wl, g in figures.reference_groups(ctx).items()}
    headline = [r for r in rows if r["pattern"] == "concurrency" and (r["workload"], r["concurrency"]) in ref]
    head = (f"<h3>At the reference load (the highest concurrency every arm ran, per workload)</h3>"
            f"{page.table(columns, headline, left=2)}" if headline else "")
    return (intro + head + f"<details{'' if headline else ' open'}><summary>All {len(rows)} matched points"
            f"</summary>{page.table(columns, rows, left=2)}</details>")


def compare_html(run: Run, other: Run, rows: list[dict[str, Any]]) -> str:
    intro = (f"<p class=read>Every point present in both runs (same arm, workload, pattern, load), {esc(run.run_id)} "
             f"relative to {esc(other.run_id)}: value in this run, change in %, 95% CI (bootstrap; throughput: "
             "Welch t over repeats), verdict.</p>")
    body = env_card(other, other.slo or stats.Slo(math.nan, math.nan, math.nan)).replace(
        "<h3>Environment</h3>", f"<h3>Environment of {esc(other.run_id)}</h3>", 1)
    if not rows:
        return intro + body + page.missing("The two runs share no point — compare runs of the same plan "
                                           "(same arms, workloads and loads).")
    chart = page.chart(figures.regression(run, other.run_id, rows))
    labels = {a.name: a.label for a in run.arms}
    return intro + body + chart + page.table(diff_columns("Arm", lambda r: esc(labels.get(r["arm"], r["arm"]))),
                                             rows, left=2)


def toolcalls_html(run: Run) -> str:
    intro = ("<p class=read>Does the server return correct tool calls? Right tool = the expected function was called; "
             "args OK = its arguments parsed and matched; no-tool respected = no call when none was expected.</p>")
    if not run.toolcalls:
        return intro + page.missing("No toolcalls.jsonl in this run — run_bench.py runs the tool-call check per arm "
                                    "(it is skipped with a reason on dummy weights).")
    cols: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(run.arm(r["arm"]).label)), ("Cases", lambda r: num(r["cases"], 0)),
        ("OK %", lambda r: num(r.get("ok_pct"))), ("Right tool %", lambda r: num(r.get("right_tool_pct"))),
        ("Args OK %", lambda r: num(r.get("args_ok_pct"))),
        ("No-tool respected %", lambda r: num(r.get("no_tool_respected_pct"))),
        ("Latency p50 ms", lambda r: num(r.get("latency_p50_ms"), 0)),
        ("Skipped because", lambda r: esc(r.get("skipped")))]
    return intro + page.table(cols, tables.toolcall_rows(run))


def points_html(rows: list[dict[str, Any]]) -> str:
    def flagged(key: str, ok_key: str) -> page.Cell:
        return lambda r: with_ci(r[key], r.get(key.replace("_ms", "_lo_ms")), r.get(key.replace("_ms", "_hi_ms"))) \
            + ("" if r[ok_key] else " <span class=flag title='too few samples'>⚠</span>")

    cols: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])),
        ("Pattern", lambda r: esc(r["pattern"])), ("Load", lambda r: esc(r["load"])),
        ("Repeats ok/failed", lambda r: f"{r['points_ok']}/" + (
            f"<span class=bad title='{esc(r['point_errors'])}'>{r['points_failed']}</span>" if r["points_failed"]
            else "0")),
        ("Requests (failed)", lambda r: f"{r['requests']:,} ({r['failed_requests']:,})"),
        ("Out tok/s [CI]", lambda r: with_ci(r["output_throughput"], r["output_throughput_lo"],
                                             r["output_throughput_hi"], 0)),
        ("Achieved req/s", lambda r: num(r["achieved_rate"], 2) + (" (client-bound)" if r["client_bound"] else "")),
        ("TTFT p50 ms", flagged("ttft_p50_ms", "ttft_p50_sufficient")),
        ("TTFT p99 ms", flagged("ttft_p99_ms", "ttft_p99_sufficient")),
        ("TTFT p99.9 ms", flagged("ttft_p999_ms", "ttft_p999_sufficient")),
        ("TPOT p50 ms", flagged("tpot_p50_ms", "tpot_p50_sufficient")),
        ("ITL p50 / p99 ms", lambda r: f"{num(r['itl_p50_ms'], 2)} / {num(r['itl_p99_ms'], 2)}"),
        ("Goodput % [CI]", lambda r: with_ci(r["goodput_pct"], r["goodput_lo_pct"], r["goodput_hi_pct"])),
        ("SLO", lambda r: "met" if r["meets_slo"] else "<span class=bad>missed</span>")]
    note = ("<p class=read>Every point (repeats pooled). ⚠ = fewer samples than the percentile needs "
            f"(≥ {stats.MIN_TAIL_SAMPLES} expected beyond it: p99 ≥ {stats.needed_samples(99):,}, "
            f"p99.9 ≥ {stats.needed_samples(99.9):,}). Also in summary.csv / summary.json.</p>")
    return note + (page.table(cols, rows, left=4) if rows else page.missing(
        "No points recorded yet — run ./run_bench.py (or --resume RUN_DIR) and rebuild."))


def methods_html(run: Run, slo: stats.Slo) -> str:
    cmd = shlex.join(run.manifest.provenance.command) or "(not recorded)"
    parts = [f"<h3>Benchmark command</h3><pre>{esc(cmd)}</pre><h3>Server launch command per arm</h3>"]
    for r in tables.methods_rows(run):
        parts.append(f"<p><b>{esc(r['label'])}</b> — flags vs baseline: <code>{esc(r['flags'])}</code>; ready in "
                     f"{num(r['ready_s'])} s; attention backend {esc(r['attention_backend'] or '?')}; decode: "
                     f"{esc(r['decode'] or 'not recorded')}</p>"
                     f"<pre>{esc(r['launch_command'])}</pre>")
    parts.append("<h3>Workloads</h3>" + "".join(
        f"<p><b>{esc(w.name)}</b> ({esc(w.kind)}): {esc(w.description)}</p><pre>{esc(json.dumps(w.params))}</pre>"
        for w in run.workloads))
    parts.append("<h3>Load patterns planned</h3>" + _plan_html(run))
    parts.append(
        "<h3>Statistics</h3><p class=read>Percentiles: linear interpolation (numpy default, as bench_serving). "
        f"CIs, 95%: latencies and goodput by percentile bootstrap over requests ({stats.DEFAULT_BOOT} seeded "
        "resamples); throughput, one value per repeat, by Student t (differences: Welch), since a bootstrap over 2-3 "
        "repeats gives [min, max] and covers the truth only about half the time. Goodput: share of requests sent "
        "that completed with TTFT ≤ "
        f"{slo.ttft_ms:g} ms and TPOT ((end-to-end − TTFT) / (output tokens − 1), as bench_serving) ≤ {slo.itl_ms:g} ms; a load meets the SLO "
        f"when ≥ {slo.pct:g}% are good. Capacity = highest load with it and every lower load meeting the SLO. "
        "Cost per million output tokens (with a GPU price): price per hour / (output tok/s × 3600) × 10⁶ at the "
        "capacity's mean throughput, its CI the throughput CI inverted (the upper bound gives the lower cost). "
        "ITL percentiles pool every token gap (bench_serving's definition).</p>"
        "<p class=read>Steady state and repeats: each repeat is windowed (llmhost/bench/window.py) and measured on "
        "its own; means and percentiles get CIs across repeats (Student t; a percentile's from resampling repeats "
        "and contiguous time blocks, never single requests), arms are compared paired by repeat index (same seed), "
        "and the formulas with their simulated coverage are in llmhost/repeats.py.</p>")
    return "".join(parts)


def _plan_html(run: Run) -> str:
    plan: dict[tuple, dict[str, dict]] = {}  # dicts as ordered sets: loads and arms keep the plan's order
    for p in run.plan or run.points:
        entry = plan.setdefault((p.workload, p.pattern), {"loads": {}, "prompts": {}, "repeats": {}, "arms": {}})
        entry["loads"][tables.load_label(p.pattern, p.concurrency, p.request_rate, p.num_prompts)] = None
        entry["prompts"][p.num_prompts] = None
        entry["repeats"][p.repeat] = None
        entry["arms"][p.arm] = None
    rows = [{"workload": k[0], "pattern": k[1], **{n: ", ".join(map(str, v)) for n, v in e.items()},
             "n_repeats": len(e["repeats"])} for k, e in plan.items()]
    cols: list[tuple[str, page.Cell]] = [
        ("Workload", lambda r: esc(r["workload"])), ("Pattern", lambda r: esc(r["pattern"])),
        ("Loads", lambda r: esc(r["loads"])), ("Prompts per point", lambda r: esc(r["prompts"])),
        ("Repeats", lambda r: num(r["n_repeats"], 0)), ("Arms", lambda r: esc(r["arms"]))]
    return page.table(cols, rows, left=6) if rows else page.missing("No plan recorded in manifest.json.")


def write(dash: Dashboard, out_html: Path) -> list[Path]:
    """Write the page and its summaries beside it (each atomically); return the paths. The default page
    dashboard.html gets summary.csv/.json; another name X.html gets X.summary.csv/.json, so two dashboards in one
    folder keep their own summaries."""
    stem = "summary" if out_html.name == "dashboard.html" else f"{out_html.stem}.summary"
    csv_path, json_path = out_html.with_name(f"{stem}.csv"), out_html.with_name(f"{stem}.json")
    files.write_text_atomic(out_html, dash.html)
    buf = io.StringIO()
    if dash.summary:
        writer = csv.DictWriter(buf, fieldnames=list(dash.summary[0]))
        writer.writeheader()
        writer.writerows(dash.summary)
    files.write_text_atomic(csv_path, buf.getvalue())
    files.write_json_atomic(json_path, _json_safe({**dash.meta, "points": dash.summary}))
    return [out_html, csv_path, json_path]


def _json_safe(value: Any) -> Any:
    """nan/inf -> null so summary.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
