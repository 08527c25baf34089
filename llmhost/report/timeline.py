"""Telemetry-over-time figures: KV-pool usage and prefix-cache hit rate (SGLang /metrics), GPU telemetry (NVML).

The hit rate comes from the cumulative counters (cached / prompt tokens since the server started), not from the
sglang:cache_hit_rate gauge: SGLang 0.5.17 sets that gauge to the last prefill batch's rate and back to 0.0 at
every decode step, so sampled at 1 Hz during a benchmark it reads ~0 whatever the cache does.

Samples are coloured by the arm whose point was running (telemetry.jsonl's point_id); samples between points are
grey. Lines break where sampling paused (> GAP_S), so server restarts between arms do not draw fake ramps.
"""
from __future__ import annotations

from typing import Any

from llmhost.report.figures import Chart, Context, MAX_POINTS, _go, _layout, _subplots

GAP_S = 5.0
KV_USED = "sglang:token_usage"
CACHED, PROMPT = "sglang:cached_tokens_total", "sglang:prompt_tokens_total"
# name, axis title, how several GPUs combine (sum for totals, mean for rates)
GPU_SERIES = (("gpu_util_pct", "GPU util (%)", "mean"), ("gpu_mem_used_gb", "memory used (GB)", "sum"),
              ("gpu_power_w", "power (W)", "sum"), ("gpu_sm_clock_mhz", "SM clock (MHz)", "mean"))
HOW_TO_GET = ("no {what} samples in telemetry.jsonl — run_bench.py samples them at ≥ 1 Hz while points run{hint}; "
              "re-run ./run_bench.py (or --resume) with the server's metrics enabled")


def frame(ctx: Context, source: str) -> Any:
    """Telemetry of one source as a DataFrame: minutes since run start, name, value, arm (or '' between points)."""
    import pandas as pd
    arm_of = {p.point_id: p.arm for p in (*ctx.run.points, *ctx.run.plan)}
    rows = [(t.t, t.name, t.value, arm_of.get(t.point_id or "", ""))
            for t in ctx.run.telemetry if t.source == source]
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm"]).astype({"t": float, "value": float})
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
    go = _go()
    labels = [(a.name, a.label, a.color) for a in ctx.run.arms] + [("", "between points", "#bbbbbb")]
    for name, label, color in labels:
        sub = df[df["arm"] == name]
        if sub.empty:
            continue
        x, y = _trace_xy(sub)
        fig.add_trace(go.Scatter(x=x, y=y, name=label, legendgroup=name or "idle", showlegend=first,
                                 mode="lines", line={"color": color, "width": 1.5}), row=row, col=1)


def cumulative_hit_rate(df: Any) -> Any:
    """Per sample: 100 * cached / prompt tokens since the server started, each counter summed over its label sets
    (is_streaming, cache_source); samples before the first prompt token are dropped (0 / 0). A server restart
    resets both counters, so each arm's line starts afresh. SGLang registers cached_tokens_total only on the
    first request: until then it counts as 0."""
    sums = df[df["name"].isin([CACHED, PROMPT])].groupby(["t", "minute", "arm", "name"], as_index=False)["value"].sum()
    wide = sums.pivot_table(index=["t", "minute", "arm"], columns="name", values="value").reset_index()
    if PROMPT not in wide:
        return wide.assign(value=[])[["t", "minute", "arm", "value"]]
    cached = wide[CACHED].fillna(0.0) if CACHED in wide else 0.0
    wide = wide.assign(value=100.0 * cached / wide[PROMPT])
    return wide[wide[PROMPT] > 0][["t", "minute", "arm", "value"]]


def kv_cache(ctx: Context) -> Chart:
    title = "How full is the KV pool, and how often does the prefix cache hit?"
    read = ("SGLang's own series over the run (minutes since start), coloured by the arm being measured: KV pool "
            "used = share of KV-cache token slots held (near 100% = requests queue for memory); hit rate = share of "
            "all prompt tokens since the server started that were served from the prefix cache (cached_tokens_total "
            "/ prompt_tokens_total; each arm starts a fresh server).")
    df = frame(ctx, "metrics")
    series = [("KV pool used (%)", df[df["name"] == KV_USED].assign(value=lambda d: 100.0 * d["value"])),
              ("prefix-cache hit since start (%)", cumulative_hit_rate(df))]
    if all(sub.empty for _, sub in series):
        return Chart("kv", title, read, None, HOW_TO_GET.format(
            what="sglang:token_usage / cached_tokens_total / prompt_tokens_total", hint=" (from the server's /metrics)"))
    fig = _subplots(len(series), 1, [axis for axis, _ in series], shared_xaxes=True)
    for row, (axis, sub) in enumerate(series, 1):
        if not sub.empty:
            _add_by_arm(ctx, fig, sub.groupby(["t", "minute", "arm"], as_index=False)["value"].mean(), row, row == 1)
        fig.update_yaxes(title_text=axis, range=[0, 105], row=row, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=len(series), col=1)
    return Chart("kv", title, read, _layout(fig, 520))


def gpu(ctx: Context) -> Chart:
    title = "Was the GPU busy, and at what power and clock?"
    read = ("NVML samples over the run, coloured by arm; low utilisation at high load points to a CPU-side "
            "bottleneck (tokenizer, scheduler), a clock drop at high power to throttling.")
    df = frame(ctx, "gpu")
    if df.empty:
        return Chart("gpu", title, read, None, HOW_TO_GET.format(what="GPU", hint=" (NVML or nvidia-smi)"))
    present = [s for s in GPU_SERIES if (df["name"] == s[0]).any()]
    fig = _subplots(len(present), 1, [s[1] for s in present], shared_xaxes=True)
    for row, (name, axis, how) in enumerate(present, 1):
        sub = df[df["name"] == name].groupby(["t", "minute", "arm"], as_index=False)["value"].agg(how)
        _add_by_arm(ctx, fig, sub, row, row == 1)
        fig.update_yaxes(title_text=axis, row=row, col=1)
    fig.update_xaxes(title_text="minutes since run start", row=len(present), col=1)
    return Chart("gpu", title, read, _layout(fig, 180 * len(present) + 120))
