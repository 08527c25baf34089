"""Pure figure builders: stored results in, plotly figures out (plotly imported lazily, inside the builders).

Every Chart carries a title that asks its question, one sentence on how to read it, and, when the data is absent,
`missing`: what is missing and the command that produces it. Arm order, colours and labels come from the manifest.
FIGURES is the registry the page renders, in order.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from llmhost import stats
from llmhost.report.load import Run
from llmhost.report.tables import Group

MAX_POINTS = 4000  # per trace; keeps the page light, enough to show every feature of a curve


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    run: Run
    groups: list[Group]
    rows: list[dict[str, Any]]  # summary rows, aligned with groups
    baseline: list[dict[str, Any]]  # tables.baseline_rows
    slo: stats.Slo


@dataclasses.dataclass(frozen=True, slots=True)
class Chart:
    key: str
    title: str
    how_to_read: str
    figure: Any | None
    missing: str = ""


def _go() -> Any:
    import plotly.graph_objects as go
    return go


def _subplots(rows: int, cols: int, titles: list[str], **kw: Any) -> Any:
    from plotly.subplots import make_subplots
    return make_subplots(rows=rows, cols=cols, subplot_titles=titles, **kw)


def _layout(fig: Any, height: int) -> Any:
    fig.update_layout(template="plotly_white", height=height, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.15}, hovermode="closest")
    return fig


def legend_at_right(fig: Any) -> Any:
    """The legend right of the plot, one entry per line: under a plot of a row or two it would cover the x axis
    title, and above subplots their titles."""
    fig.update_layout(legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
                      margin={"r": 150})
    return fig


def legend_on_top(fig: Any) -> Any:
    """The legend above the plot in trace order: under a short bar chart it would cover the x axis title."""
    fig.update_layout(legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
                      margin={"t": 40})
    return fig


def _workloads_with(ctx: Context, pattern: str) -> list[str]:
    names = [w.name for w in ctx.run.workloads]
    have = {r["workload"] for r in ctx.rows if r["pattern"] == pattern and r["points_ok"]}
    return [w for w in names if w in have] + sorted(have - set(names))


def _arm_rows(ctx: Context, arm: str, workload: str, pattern: str) -> list[dict[str, Any]]:
    return [r for r in ctx.rows if r["arm"] == arm and r["workload"] == workload and r["pattern"] == pattern
            and r["points_ok"]]


def _err(rows: list[dict], key: str, lo: str, hi: str) -> dict[str, Any]:
    plus = [r[hi] - r[key] if not math.isnan(r[hi]) else 0 for r in rows]
    minus = [r[key] - r[lo] if not math.isnan(r[lo]) else 0 for r in rows]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "visible": True}


def _log_x(fig: Any, loads: list[Any], title: str, **where: Any) -> None:
    """Log x axis ticked at the loads actually tested (plotly's default log ticks crowd small ranges)."""
    ticks = sorted({float(v) for v in loads if v is not None})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], title_text=title, **where)


def capacity(ctx: Context) -> Chart:
    title = "How much throughput does each setting deliver as concurrency grows?"
    read = ("Output tokens/s per concurrency level (mean over repeats, bars = 95% Student-t CI over repeats); a "
            "curve that flattens has hit its capacity, open markers missed the SLO; log x.")
    wls = _workloads_with(ctx, "concurrency")
    if not wls:
        return Chart("capacity", title, read, None, "no concurrency sweep succeeded — run ./run_bench.py")
    go, fig = _go(), _subplots(1, len(wls), wls)
    for col, wl in enumerate(wls, 1):
        for arm in ctx.run.arms:
            rows = _arm_rows(ctx, arm.name, wl, "concurrency")
            if not rows:
                continue
            fig.add_trace(go.Scatter(
                x=[r["concurrency"] for r in rows], y=[r["output_throughput"] for r in rows], name=arm.label,
                legendgroup=arm.name, showlegend=col == 1, mode="lines+markers", line={"color": arm.color},
                marker={"symbol": ["circle" if r["meets_slo"] else "circle-open" for r in rows], "size": 9},
                error_y=_err(rows, "output_throughput", "output_throughput_lo", "output_throughput_hi")),
                row=1, col=col)
        _log_x(fig, [r["concurrency"] for r in ctx.rows if r["workload"] == wl and r["pattern"] == "concurrency"],
               "concurrency", row=1, col=col)
    fig.update_yaxes(title_text="output tok/s", row=1, col=1)
    fig.update_yaxes(rangemode="nonnegative")  # wide CIs of 2 repeats must not push the axis below 0
    return Chart("capacity", title, read, _layout(fig, 420))


LOAD_AXES = {"concurrency": ("concurrency", "concurrency"), "qps": ("request_rate", "offered req/s")}


def latency_vs_load(ctx: Context) -> Chart:
    title = "How do first-token and per-token latency grow with load?"
    read = ("Solid = p50, dashed = p99 (log scales), bars = 95% bootstrap CI; open markers: too few samples for "
            "that percentile (p99 needs 1,000). The grey line is the SLO limit. TTFT top, TPOT ((end-to-end - TTFT) / "
            "(tokens - 1) per request) bottom; one column per workload and sweep (concurrency, Poisson QPS).")
    panels = [(wl, pattern) for pattern in LOAD_AXES for wl in _workloads_with(ctx, pattern)]
    if not panels:
        return Chart("latency", title, read, None, "no concurrency or QPS sweep succeeded — run ./run_bench.py")
    titles = [f"{wl} {p}: {m}" for m in ("TTFT", "TPOT") for wl, p in panels]
    go, fig = _go(), _subplots(2, len(panels), titles)
    for col, (wl, pattern) in enumerate(panels, 1):
        key, axis = LOAD_AXES[pattern]
        for arm in ctx.run.arms:
            rows = [r for r in _arm_rows(ctx, arm.name, wl, pattern) if r[key] is not None]
            for row, metric in ((1, "ttft"), (2, "tpot")):
                for pct, dash in (("p50", "solid"), ("p99", "dash")):
                    name = f"{metric}_{pct}"
                    fig.add_trace(go.Scatter(
                        x=[r[key] for r in rows], y=[r[f"{name}_ms"] for r in rows],
                        name=f"{arm.label} {pct}", legendgroup=arm.name, mode="lines+markers",
                        showlegend=col == 1 and row == 1, line={"color": arm.color, "dash": dash},
                        marker={"symbol": ["circle" if r[f"{name}_sufficient"] else "circle-open" for r in rows]},
                        error_y=_err(rows, f"{name}_ms", f"{name}_lo_ms", f"{name}_hi_ms")),
                        row=row, col=col)
        fig.add_hline(y=ctx.slo.ttft_ms, line={"color": "#999", "dash": "dot"}, row=1, col=col)
        fig.add_hline(y=ctx.slo.itl_ms, line={"color": "#999", "dash": "dot"}, row=2, col=col)
        loads = [r[key] for r in ctx.rows if r["workload"] == wl and r["pattern"] == pattern]
        _log_x(fig, loads, "", row=1, col=col)
        _log_x(fig, loads, axis, row=2, col=col)
    ys = [r[f"{m}_{p}_ms"] for r in ctx.rows for m in ("ttft", "tpot") for p in ("p50", "p99")]
    fig.update_yaxes(type="log", title_text="ms", **_log_ticks(ys + [ctx.slo.ttft_ms, ctx.slo.itl_ms]))
    return Chart("latency", title, read, _layout(fig, 640))


def _log_ticks(values: list[Any]) -> dict[str, Any]:
    """1-2-5 ticks with full labels over the values' range (plotly's log minor ticks read '2, 5' for 200, 500)."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if not finite:
        return {}
    lo, hi = math.floor(math.log10(min(finite))), math.ceil(math.log10(max(finite)))
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    return {"tickvals": ticks, "ticktext": [f"{t:,.{0 if t >= 1 else 2}f}" for t in ticks]}


def qps_sweep(ctx: Context) -> Chart:
    title = "Did the server keep up with the offered request rate?"
    read = ("Achieved vs offered requests/s under Poisson arrivals; on the diagonal = kept up; an ✕ marks a "
            "client-bound point (achieved short of offered by more than 5% and more than Poisson noise, 3/√n: the "
            "load generator, not the server, was the limit).")
    wls = _workloads_with(ctx, "qps")
    if not wls:
        return Chart("qps", title, read, None, "no QPS sweep in this run — run ./run_bench.py (it plans qps points)")
    go, fig = _go(), _subplots(1, len(wls), wls)
    for col, wl in enumerate(wls, 1):
        top = 0.0
        for arm in ctx.run.arms:
            rows = [r for r in _arm_rows(ctx, arm.name, wl, "qps") if r["request_rate"] is not None]
            if not rows:
                continue
            top = max(top, *(r["request_rate"] for r in rows))
            fig.add_trace(go.Scatter(
                x=[r["request_rate"] for r in rows], y=[r["achieved_rate"] for r in rows], name=arm.label,
                legendgroup=arm.name, showlegend=col == 1, mode="lines+markers", line={"color": arm.color},
                marker={"symbol": ["x" if r["client_bound"] else "circle" for r in rows], "size": 10},
                text=["client-bound" if r["client_bound"] else "" for r in rows]), row=1, col=col)
        fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="offered = achieved",
                                 line={"color": "#999", "dash": "dot"}, showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(title_text="offered req/s", row=1, col=col)
    fig.update_yaxes(title_text="achieved req/s", row=1, col=1)
    return Chart("qps", title, read, _layout(fig, 420))


def reference_groups(ctx: Context) -> dict[str, dict[str, Group]]:
    """Per workload: the highest concurrency every arm with data ran successfully, and each arm's group there."""
    out: dict[str, dict[str, Group]] = {}
    arms = [a.name for a in ctx.run.arms]
    for wl in _workloads_with(ctx, "concurrency"):
        by_arm: dict[str, dict[int, Group]] = {}
        for g in ctx.groups:
            if g.workload == wl and g.pattern == "concurrency" and g.ok_points and g.concurrency is not None:
                by_arm.setdefault(g.arm, {})[g.concurrency] = g
        present = [a for a in arms if a in by_arm]  # an arm whose every point failed cannot be compared
        common = set.intersection(*(set(by_arm[a]) for a in present)) if present else set()
        if common:
            out[wl] = {a: by_arm[a][max(common)] for a in present}
    return out


def survival(ctx: Context) -> Chart:
    title = "How often does a request wait longer than x for its first token?"
    read = ("P(TTFT > x) on a log scale at the highest concurrency every arm ran: the further left a curve drops, "
            "the shorter the tail; a curve reaching 10⁻³ needs ≥ 1,000 requests behind it.")
    ref = reference_groups(ctx)
    if not ref:
        return Chart("survival", title, read, None, "no concurrency level succeeded on every arm — run "
                     "./run_bench.py (or --resume the run) so each arm has a sweep")
    go, fig = _go(), _subplots(1, len(ref), [f"{wl} at c={next(iter(g.values())).concurrency}"
                                             for wl, g in ref.items()])
    for col, (wl, groups) in enumerate(ref.items(), 1):
        for arm in ctx.run.arms:
            x = np.sort(stats.clean(groups[arm.name].requests.ttft_ms) if arm.name in groups else np.array([]))
            if not x.size:
                continue
            y = 1.0 - np.arange(1, x.size + 1) / x.size
            keep = y > 0  # the last sample has P = 0, invisible on a log axis
            x, y = _thin(x[keep], y[keep])
            fig.add_trace(go.Scatter(x=x, y=y, name=arm.label, legendgroup=arm.name, showlegend=col == 1,
                                     mode="lines", line={"color": arm.color, "shape": "hv"}), row=1, col=col)
        fig.add_vline(x=ctx.slo.ttft_ms, line={"color": "#999", "dash": "dot"}, row=1, col=col)
        fig.update_xaxes(title_text="TTFT x (ms)", row=1, col=col)
    fig.update_yaxes(type="log", exponentformat="power")
    fig.update_yaxes(title_text="P(TTFT > x)", row=1, col=1)
    return Chart("survival", title, read, _layout(fig, 420))


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float]]:
    if x.size > MAX_POINTS:
        idx = np.unique(np.concatenate([np.linspace(0, x.size - 1, MAX_POINTS).astype(int),
                                        np.arange(max(0, x.size - 200), x.size)]))  # keep the whole tail
        x, y = x[idx], y[idx]
    return x.tolist(), y.tolist()


def head_to_head(ctx: Context) -> Chart:
    title = "What does each setting change relative to the baseline at the reference load?"
    read = ("Change vs baseline in % (bars = 95% CI: bootstrap, throughput Welch t) at the highest concurrency every "
            "arm ran; for throughput and goodput up is better, for latencies down is better; a bar whose CI crosses 0 "
            "is noise.")
    ref = reference_groups(ctx)
    metrics = [("output_throughput", "tok/s"), ("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"),
               ("tpot_p50", "TPOT p50"), ("goodput", "goodput")]
    wl = next(iter(ref), None)
    conc = next(iter(ref[wl].values())).concurrency if wl else None
    rows = [r for r in ctx.baseline if r["workload"] == wl and r["pattern"] == "concurrency"
            and r["concurrency"] == conc]
    if not rows:
        return Chart("head2head", title, read, None, "needs a baseline arm and at least one other arm at a common "
                     "concurrency — run ./run_bench.py with two or more arms")
    go, fig = _go(), _subplots(1, len(metrics), [label for _, label in metrics])
    for arm in ctx.run.arms:  # one panel per metric: each keeps its own scale (a -80% must not flatten a +3%)
        row = next((r for r in rows if r["arm"] == arm.name), None)
        if row is None:
            continue
        for col, (m, label) in enumerate(metrics, 1):
            d = row[f"{m}_delta_pct"]
            has_ci = not (math.isnan(row[f"{m}_lo_pct"]) or math.isnan(row[f"{m}_hi_pct"]))
            unit = " pp" if row.get(f"{m}_unit") == "pp" else "%"
            fig.add_trace(go.Bar(  # no CI: no error bar (a flat one would look precise) and a faded bar
                x=[arm.label], y=[d], name=arm.label, legendgroup=arm.name, showlegend=col == 1,
                marker={"color": arm.color, "opacity": 1.0 if has_ci else 0.35}, text=[row[f"{m}_verdict"]],
                hovertext=[f"{label}: {d:+.1f}{unit}"],
                error_y={"type": "data", "symmetric": False, "visible": has_ci,
                         "array": [_nz(row[f"{m}_hi_pct"] - d)], "arrayminus": [_nz(d - row[f"{m}_lo_pct"])]}),
                row=1, col=col)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(zeroline=True, zerolinecolor="#444")
    fig.update_yaxes(title_text=f"change vs baseline (%; goodput: pp), {wl} at c={conc}", row=1, col=1)
    return Chart("head2head", title, read, _layout(fig, 440))


def _nz(v: float) -> float:
    return 0.0 if math.isnan(v) else v


def regression(run: Run, other_id: str, rows: list[dict[str, Any]]) -> Chart:
    """Run-vs-run deltas at every shared concurrency point (rows from tables.compare_rows)."""
    title = f"Did throughput or tail latency move since {other_id}?"
    read = (f"This run relative to {other_id} at every shared concurrency point, per arm (bars = 95% CI: bootstrap, "
            "throughput Welch t); throughput up and TTFT p99 down are improvements, a CI crossing 0 is noise.")
    rows = [r for r in rows if r["pattern"] == "concurrency"]
    if not rows:
        return Chart("regression", title, read, None, "the runs share no concurrency point — compare two runs of the "
                     "same plan (same arms, workloads, concurrency levels)")
    go = _go()
    panels = (("output_throughput", "output tok/s change (%)"), ("ttft_p99", "TTFT p99 change (%)"))
    fig = _subplots(len(panels), 1, [p[1] for p in panels], shared_xaxes=True)
    for arm in run.arms:
        mine = [r for r in rows if r["arm"] == arm.name]
        if not mine:
            continue
        x = [f"{r['workload']} c={r['concurrency']}" for r in mine]
        for i, (m, _) in enumerate(panels, 1):
            d = [r[f"{m}_delta_pct"] for r in mine]
            has_ci = [not (math.isnan(r[f"{m}_lo_pct"]) or math.isnan(r[f"{m}_hi_pct"])) for r in mine]
            fig.add_trace(go.Bar(  # bars without a CI are faded and carry no error bar (0-width looked precise)
                x=x, y=d, name=arm.label, legendgroup=arm.name, showlegend=i == 1, text=[r[f"{m}_verdict"] for r in mine],
                marker={"color": arm.color, "opacity": [1.0 if c else 0.35 for c in has_ci]},
                error_y={"type": "data", "symmetric": False, "visible": True,
                         "array": [_nz(r[f"{m}_hi_pct"] - v) if c else 0 for r, v, c in zip(mine, d, has_ci)],
                         "arrayminus": [_nz(v - r[f"{m}_lo_pct"]) if c else 0 for r, v, c in zip(mine, d, has_ci)],
                         "thickness": 1.5, "width": 4}), row=i, col=1)
    fig.update_layout(barmode="group")
    fig.update_yaxes(zeroline=True, zerolinecolor="#444")
    return Chart("regression", title, read, _layout(fig, 560))


FIGURES: dict[str, Callable[[Context], Chart]] = {
    "capacity": capacity,
    "latency": latency_vs_load,
    "qps": qps_sweep,
    "survival": survival,
    "head2head": head_to_head,
}
