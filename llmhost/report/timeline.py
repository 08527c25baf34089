"""Telemetry-over-time figures: KV-pool usage and prefix-cache hit rate (SGLang /metrics), GPU telemetry (NVML).

The hit rate comes from the cumulative counters (cached / prompt tokens since the server started), not from the
sglang:cache_hit_rate gauge: SGLang 0.5.17 sets that gauge to the last prefill batch's rate and back to 0.0 at
every decode step, so sampled at 1 Hz during a benchmark it reads ~0 whatever the cache does.

Samples are coloured by the arm whose point was running (telemetry.jsonl's point_id); samples between points are
grey. Lines break where sampling paused (> GAP_S), so server restarts between arms do not draw fake ramps.
Several workers (behind the router: labels {"worker": ...}; SGLang's own DP ranks: {"dp_rank": ...}) add one
dashed line each beside the arm's line over all of them; several GPUs get one line per GPU (dash style = GPU).
"""
from __future__ import annotations

from typing import Any

from llmhost.report import layouts
from llmhost.report.figures import Chart, Context, MAX_POINTS, _go, _layout, _subplots

GAP_S = 5.0
FILL_TICKS = 3  # a worker's counters carry over this many missed scrapes, so one slow scrape is not a dip
KV_USED = "sglang:token_usage"
CACHED, PROMPT = "sglang:cached_tokens_total", "sglang:prompt_tokens_total"
GPU_SERIES = (("gpu_util_pct", "GPU util (%)"), ("gpu_mem_used_gb", "memory used (GB)"), ("gpu_power_w", "power (W)"),
              ("gpu_sm_clock_mhz", "SM clock (MHz)"))
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
KEYS = ["t", "minute", "arm"]
HOW_TO_GET = ("no {what} samples in telemetry.jsonl — run_bench.py samples them at ≥ 1 Hz while points run{hint}; "
              "re-run ./run_bench.py (or --resume) with the server's metrics enabled")


def frame(ctx: Context, source: str) -> Any:
    """Telemetry of one source as a DataFrame: minutes since run start, name, value, arm (or '' between points),
    and the worker, DP rank and GPU labels ('' where absent)."""
    import pandas as pd
    arm_of = {p.point_id: p.arm for p in (*ctx.run.points, *ctx.run.plan)}
    rows = [(t.t, t.name, t.value, arm_of.get(t.point_id or "", ""), t.labels.get("worker", ""),
             t.labels.get("dp_rank", ""), t.labels.get("gpu", "")) for t in ctx.run.telemetry if t.source == source]
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm", "worker", "rank", "gpu"]).astype(
        {"t": float, "value": float})
    df["minute"] = (df["t"] - ctx.run.t0) / 60.0
    return df


def _trace_xy(sub: Any) -> tuple[list[Any], list[Any]]:
    """x/y lists with None inserted at sampling gaps, thinned to MAX_POINTS."""
    sub = sub.sort_values("t")
    step = max(1, -(-len(sub) // MAX_POINTS))  # keep every step-th sample; gaps scale with it
    sub = sub.iloc[::step]
    x: list[Any] = []
    y: list[Any] = []
    last = None
    for t, minute, value in zip(sub["t"], sub["minute"], sub["value"]):
        if last is not None and t - last > GAP_S * step:
            x.append(None)
            y.append(None)
        x.append(minute)
        y.append(value)
        last = t
    return x, y


def _add_by_arm(ctx: Context, fig: Any, df: Any, row: int, first: bool) -> None:
    """One line per arm and series (df column "series"; '' = the arm's own line, solid), coloured by arm; each
    named series gets its dash style, the same in every arm."""
    go = _go()
    labels = [(a.name, a.label, a.color) for a in ctx.run.arms] + [("", "between points", "#bbbbbb")]
    named = sorted(set(df["series"]) - {""})
    skip = int("" in set(df["series"]))  # solid stays the arm's own line's where there is one
    dash = {s: DASHES[(i + skip) % len(DASHES)] for i, s in enumerate(named)}
    for name, label, color in labels:
        for series in ["", *named]:
            sub = df[(df["arm"] == name) & (df["series"] == series)]
            if sub.empty:
                continue
            x, y = _trace_xy(sub)
            fig.add_trace(go.Scatter(x=x, y=y, name=f"{label} · {series}" if series else label,
                                     legendgroup=name or "idle", showlegend=first, mode="lines",
                                     line={"color": color, "width": 1 if series else 1.5,
                                           "dash": dash.get(series, "solid")}), row=row, col=1)


def _with_each(per: Any, total: Any) -> Any:
    """The arm's line over all series (series '') and, for an arm with several series, each one's own line (not
    between points, where the series of different boots meet)."""
    import pandas as pd
    several = (per.groupby("arm")["series"].transform("nunique") > 1) & (per["arm"] != "")
    return pd.concat([total.assign(series=""), per[several]], ignore_index=True)


def kv_used(df: Any) -> Any:
    """Per tick: 100 x sglang:token_usage (share of KV slots held), one series per engine (worker, and DP rank
    within a server: 'worker0', 'dp1', 'worker0 dp1'), and the arm's mean over its engines (series '')."""
    used = df[df["name"] == KV_USED]
    used = used.assign(value=100.0 * used["value"], series=[
        " ".join(p for p in (w, f"dp{r}" if r else "") if p) for w, r in zip(used["worker"], used["rank"])])
    per = used.groupby([*KEYS, "series"], as_index=False)["value"].mean()
    return _with_each(per, per.groupby(KEYS, as_index=False)["value"].mean())


def _summed(per: Any) -> Any:
    """Per tick and arm, each counter summed over the workers, a worker's last value carried over FILL_TICKS
    missed scrapes (counters only grow: a missed scrape would otherwise draw a dip)."""
    wide = per.pivot_table(index=KEYS, columns="series", values=[CACHED, PROMPT])  # columns: (counter, worker)
    filled = wide.groupby(level="arm").ffill(limit=FILL_TICKS)
    return filled.T.groupby(level=0).sum().T.reset_index()  # by counter (filled[c] would drop a '' worker level)


def cumulative_hit_rate(df: Any) -> Any:
    """Per sample: 100 * cached / prompt tokens since the server started, each counter summed over its label sets
    (is_streaming, cache_source); series '' = the arm's over all its workers (sum of cached / sum of prompt),
    plus each worker's own (series = its label) where an arm has several. Samples before the first prompt token
    are dropped (0 / 0). A server restart resets both counters, so each arm's line starts afresh. SGLang registers
    cached_tokens_total only on the first request: until then it counts as 0."""
    sums = df[df["name"].isin([CACHED, PROMPT])].groupby([*KEYS, "worker", "name"], as_index=False)["value"].sum()
    wide = sums.pivot_table(index=[*KEYS, "worker"], columns="name", values="value").reset_index()
    if PROMPT not in wide:  # no prompt counter scraped (cached tokens alone, or nothing): nothing to divide by
        import pandas as pd
        return pd.DataFrame(columns=[*KEYS, "series", "value"])
    wide[CACHED] = wide[CACHED].fillna(0.0) if CACHED in wide else 0.0
    per = wide.rename(columns={"worker": "series"})
    both = _with_each(per, _summed(per))
    both = both[both[PROMPT] > 0]
    return both.assign(value=100.0 * both[CACHED] / both[PROMPT])[[*KEYS, "series", "value"]]


def kv_cache(ctx: Context) -> Chart:
    title = "How full is the KV pool, and how often does the prefix cache hit?"
    read = ("SGLang's own series over the run (minutes since start), coloured by the arm being measured: KV pool "
            "used = share of KV-cache token slots held (near 100% = requests queue for memory); hit rate = share of "
            "all prompt tokens since the server started that were served from the prefix cache (cached_tokens_total "
            "/ prompt_tokens_total; each arm starts a fresh server).")
    df = frame(ctx, "metrics")
    series = [("KV pool used (%)", kv_used(df)), ("prefix-cache hit since start (%)", cumulative_hit_rate(df))]
    if all(sub.empty for _, sub in series):
        return Chart("kv", title, read, None, HOW_TO_GET.format(
            what="sglang:token_usage / cached_tokens_total / prompt_tokens_total",
            hint=" (from the server's /metrics)"))
    if any((sub["series"] != "").any() for _, sub in series):
        read += (" Arms with several workers: the solid line is all of them (KV: the mean of their pools' shares; "
                 "hit rate: their cached tokens summed over their prompt tokens summed), a thinner dashed line each "
                 "worker's own.")
    fig = _subplots(len(series), 1, [axis for axis, _ in series], shared_xaxes=True)
    for row, (axis, sub) in enumerate(series, 1):
        if not sub.empty:
            _add_by_arm(ctx, fig, sub, row, row == 1)
        fig.update_yaxes(title_text=axis, range=[0, 105], row=row, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=len(series), col=1)
    return Chart("kv", title, read, _layout(fig, 520))


def per_gpu(df: Any, gpus: set[str] | None) -> Any:
    """GPU samples of the layouts' GPUs (`gpus`; None or none matching: every GPU sampled), one series per GPU
    ('GPU 1') when there are several, else series ''."""
    shown = df[df["gpu"].isin(gpus)] if gpus and df["gpu"].isin(gpus).any() else df
    several = shown["gpu"].nunique() > 1
    return shown.assign(series=[f"GPU {g}" if several else "" for g in shown["gpu"]])


def gpu(ctx: Context) -> Chart:
    title = "Was each GPU busy, and at what memory, power and clock?"
    read = ("NVML samples over the run, coloured by arm; low utilisation at high load points to a CPU-side "
            "bottleneck (tokenizer, scheduler), a clock drop at high power to throttling.")
    df = per_gpu(frame(ctx, "gpu"), layouts.layout_gpus(ctx.run))
    if df.empty:
        return Chart("gpu", title, read, None, HOW_TO_GET.format(what="GPU", hint=" (NVML or nvidia-smi)"))
    if (df["series"] != "").any():
        read += " One line per GPU of the arms' layouts (dash style = GPU, the same in every arm)."
    present = [s for s in GPU_SERIES if (df["name"] == s[0]).any()]
    fig = _subplots(len(present), 1, [s[1] for s in present], shared_xaxes=True)
    for row, (name, axis) in enumerate(present, 1):
        sub = df[df["name"] == name].groupby([*KEYS, "series"], as_index=False)["value"].mean()
        _add_by_arm(ctx, fig, sub, row, row == 1)
        fig.update_yaxes(title_text=axis, row=row, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=len(present), col=1)
    return Chart("gpu", title, read, _layout(fig, 180 * len(present) + 120))
