"""The dashboard's steady-state section: steady-window TTFT beside the warm-up and drain, one marker per repeat,
paired arm differences with CIs, and the list of repeats that were not steady (rows from report.steady)."""
from __future__ import annotations

import math
from typing import Any

from llmhost import stats
from llmhost.bench import window
from llmhost.report import client_overhead, page, rate_budget_page, waves
from llmhost.report.figures import Chart, _go, _layout, _log_x, _subplots, legend_at_right
from llmhost.report.load import Run
from llmhost.report.page import esc, num, with_ci
from llmhost.report.steady import PAIRED

# The response headers' p99 must be at least this share of the steady TTFT p99 before the page says the tail was
# mostly the way in (way_in_note).
WAY_IN_SHARE = 0.5


def steady_vs_transient(run: Run, rows: list[dict[str, Any]]) -> Chart:
    title = "Is the TTFT under steady load different from the start-up burst?"
    read = ("Per concurrency: filled markers = steady-window TTFT p50 of each repeat, the line = their pooled p50 "
            "with its 95% CI (repeats and time blocks resampled); open diamonds = the warm-up's TTFT p50 (the "
            "start-up burst), kept out of the steady numbers; log x.")
    sweep = [r for r in rows if r["pattern"] == "concurrency"]
    wls = list(dict.fromkeys(r["workload"] for r in sweep))
    if not wls:
        return Chart("steady", title, read, None, "no concurrency point recorded — run ./run_bench.py")
    go, fig = _go(), _subplots(1, len(wls), wls)
    for col, wl in enumerate(wls, 1):
        for arm in run.arms:
            mine = [r for r in sweep if r["arm"] == arm.name and r["workload"] == wl]
            if not mine:
                continue
            each = [(r["concurrency"], p) for r in mine for p in r["per_repeat"] if p["is_steady"]]
            fig.add_trace(go.Scatter(x=[c for c, _ in each], y=[p["steady_ttft_p50_ms"] for _, p in each],
                                     mode="markers", marker={"color": arm.color, "size": 6, "opacity": 0.6},
                                     name=f"{arm.label}: repeats", legendgroup=arm.name, showlegend=col == 1),
                          row=1, col=col)
            fig.add_trace(go.Scatter(
                x=[r["concurrency"] for r in mine], y=[r["steady_ttft_p50_ms"] for r in mine], mode="lines",
                line={"color": arm.color}, name=f"{arm.label}: steady p50", legendgroup=arm.name, showlegend=False,
                error_y=_bars(*([r[f"steady_ttft_p50_ms{s}"] for r in mine] for s in ("", "_lo", "_hi")))),
                row=1, col=col)
            fig.add_trace(go.Scatter(x=[r["concurrency"] for r in mine], y=[r["warmup_ttft_p50_ms"] for r in mine],
                                     mode="markers", marker={"color": arm.color, "symbol": "diamond-open", "size": 9},
                                     name=f"{arm.label}: warm-up p50", legendgroup=arm.name, showlegend=col == 1),
                          row=1, col=col)
        _log_x(fig, [r["concurrency"] for r in sweep if r["workload"] == wl], "concurrency", row=1, col=col)
    fig.update_yaxes(type="log", title_text="TTFT ms", row=1, col=1)
    return Chart("steady", title, read, _layout(fig, 420))


def _bars(values: list[float], los: list[float], his: list[float]) -> dict[str, Any]:
    """Asymmetric error bars from CI bounds (no bar where a bound is missing)."""
    def gaps(bounds: list[float]) -> list[float]:
        return [0.0 if math.isnan(b) or math.isnan(v) else abs(b - v) for v, b in zip(values, bounds)]
    return {"type": "data", "symmetric": False, "array": gaps(his), "arrayminus": gaps(los), "visible": True}


def paired_forest(run: Run, rows: list[dict[str, Any]]) -> Chart:
    title = "Which settings change throughput and TTFT, beyond the noise between repeats?"
    read = ("Change vs the baseline in % at each shared point, paired by repeat (same seed on both arms), bars = "
            "95% paired-t CI; a bar crossing 0 is within noise. Points without two steady pairs have no bar.")
    shown = [r for r in rows if not math.isnan(r["output_throughput_delta_pct"])]
    if not shown:
        return Chart("paired", title, read, None, "no arm shares a steady point with the baseline — run "
                     "./run_bench.py with --repeat 3 and at least two arms")
    metrics = ("output_throughput", "ttft_p50")
    go, fig = _go(), _subplots(1, 2, [PAIRED[m][0] for m in metrics], shared_yaxes=True)
    labels = {a.name: (a.label, a.color) for a in run.arms}
    for col, m in enumerate(metrics, 1):
        for arm in dict.fromkeys(r["arm"] for r in shown):
            mine = [r for r in shown if r["arm"] == arm]
            label, color = labels.get(arm, (arm, "#7f7f7f"))
            fig.add_trace(go.Scatter(
                x=[r[f"{m}_delta_pct"] for r in mine], y=[f"{r['workload']} · {r['pattern']} · {r['load']}"
                                                          for r in mine],
                mode="markers", marker={"color": color, "size": 8}, name=label, legendgroup=arm,
                showlegend=col == 1,
                error_x=_bars(*([r[f"{m}_{s}_pct"] for r in mine] for s in ("delta", "lo", "hi")))),
                row=1, col=col)
        fig.add_vline(x=0, line={"color": "#888", "dash": "dot"}, row=1, col=col)
        fig.update_xaxes(title_text="change vs baseline, %", row=1, col=col)
    rows_shown, arms_shown = len({r["load"] + r["workload"] for r in shown}), len({r["arm"] for r in shown})
    height = max(160 + 28 * rows_shown, 130 + 30 * arms_shown)  # the legend's lines fit beside the plot, unscrolled
    return Chart("paired", title, read, legend_at_right(_layout(fig, height)))


def _verdict_cell(metric: str) -> page.Cell:
    def cell(r: dict[str, Any]) -> str:
        v = r[f"{metric}_verdict"]
        d, lo, hi = r[f"{metric}_delta_pct"], r[f"{metric}_lo_pct"], r[f"{metric}_hi_pct"]
        cls = {"better": "better", "worse": "worse"}.get(v, "noise")
        ci = f" [{lo:+.1f}, {hi:+.1f}]" if not math.isnan(lo) else ""
        shown = "—" if math.isnan(d) else f"<b>{d:+.1f}%</b><span class=noise>{ci}</span>"
        return f"class={cls}|{shown}<br><small>{esc(v)} ({r[f'{metric}_pairs']} pairs)</small>"
    return cell


def section_html(run: Run, rows: list[dict[str, Any]], paired: list[dict[str, Any]],
                 unsteady: list[dict[str, Any]], slo: stats.Slo) -> str:
    intro = (
        "<p class=read>Every repeat is split into a warm-up (closed loop: until the c-th completion, i.e. the first "
        "2c − 1 requests sent; Poisson: one p90 latency after the first arrival), a steady window, and the drain "
        "(requests still running when sending stopped). Steady numbers use the window only; the transients are "
        "shown beside them. A repeat is <b>not steady</b> when its window is too short to say (closed loop: fewer "
        f"completions than its c slots; Poisson: fewer than {window.MIN_OPEN_COMPLETED}), when its TTFT p50 drifted "
        f"between the window's halves by more than {100 * window.TTFT_DRIFT_TOL:.0f}% and beyond its CI, or (Poisson) "
        f"when completions fell behind arrivals (< {100 * window.KEEP_UP:.0f}%): it is listed below and left out of "
        "the means and CIs. "
        f"{' and '.join(window.TRANSIENT_PATTERNS).capitalize()} points measure a transient by design: all their "
        "requests count as warm-up. "
        "CIs are across repeats (Student t; percentiles: repeats and time blocks resampled), arm differences are "
        "paired by repeat; a verdict only when the CI excludes 0; the TTFT p99 SLO is met only when the CI's upper "
        f"bound is ≤ {slo.ttft_ms:g} ms, and the SLO ({slo.pct:g}% of requests good) only when the goodput CI's "
        "lower bound is ≥ it (undecided while the CI straddles it).</p>")
    listing = (page.table(_unsteady_columns(), unsteady, left=7) if unsteady
               else "<p class=read>Every repeat with a window passed the steadiness check.</p>")
    body = (intro + page.chart(steady_vs_transient(run, rows))
            + f"<h3>Repeats that were not steady ({len(unsteady)})</h3>" + listing
            + page.chart(paired_forest(run, paired)))
    if paired:
        cols: list[tuple[str, page.Cell]] = [("Arm", lambda r: esc(run.arm(r["arm"]).label)), ("Point", lambda r: esc(
            f"{r['workload']} · {r['pattern']} · {r['load']}"))]
        cols += [(f"{label} (Δ% [95% paired CI])", _verdict_cell(m)) for m, (label, _, _) in PAIRED.items()]
        body += (f"<details><summary>All {len(paired)} paired comparisons</summary>"
                 f"{page.table(cols, paired, 2)}</details>")
    return body + "<h3>Steady window vs transients, per point</h3>" + (
        page.table(_steady_columns(), rows, left=4) + tail_trade_note(rows, paired, slo) + waves_note(rows)
        + measuring_side_note(rows) + ttft_parts_note(rows) + way_in_note(rows) + rate_budget_page.section(rows)
        if rows else page.missing("No point has request data yet."))


def _unsteady_columns() -> list[tuple[str, page.Cell]]:
    return [("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])),
            ("Pattern", lambda r: esc(r["pattern"])), ("Load", lambda r: esc(r["load"])),
            ("Repeat", lambda r: num(r["repeat"], 0)),
            ("Requests (warm-up / drain)", lambda r: f"{r['requests']} ({r['warmup_n']} / {r['drain_n']})"),
            ("Why", lambda r: esc(r["reasons"]))]


def _steady_columns() -> list[tuple[str, page.Cell]]:
    def ci(key: str, digits: int = 1) -> page.Cell:
        return lambda r: with_ci(r[key], r[f"{key}_lo"], r[f"{key}_hi"], digits)
    return [("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])),
            ("Pattern", lambda r: esc(r["pattern"])), ("Load", lambda r: esc(r["load"])),
            ("Steady repeats", lambda r: f"{r['repeats_steady']}/{r['repeats']}"),
            ("Window s", lambda r: num(r["window_s"])),
            ("Window out tok/s [CI]", ci("steady_output_throughput", 0)),
            ("Steady TTFT p50 ms [CI]", ci("steady_ttft_p50_ms")),
            ("Steady TTFT p99 ms [CI]", lambda r: with_ci(r["steady_ttft_p99_ms"], r["steady_ttft_p99_ms_lo"],
                                                          r["steady_ttft_p99_ms_hi"])
             + ("" if r["steady_ttft_p99_sufficient"] else " <span class=flag title='too few samples'>⚠</span>")),
            ("p99 ≤ SLO TTFT", lambda r: esc(r["steady_ttft_p99_slo"])),
            ("Goodput % [CI]", ci("steady_goodput_pct")), ("SLO", lambda r: esc(r["steady_slo"])),
            ("Goodput req/s [CI]", ci("steady_goodput_rps")),
            ("Warm-up TTFT p50 ms (n)", lambda r: f"{num(r['warmup_ttft_p50_ms'])} ({r['warmup_n']})"),
            ("Drain TTFT p50 ms (n)", lambda r: f"{num(r['drain_ttft_p50_ms'])} ({r['drain_n']})"),
            ("Prefix hit / miss TTFT p50 ms (n)", lambda r: f"{num(r['hit_ttft_p50_ms'])} ({r['hit_n']}) / "
                                                            f"{num(r['miss_ttft_p50_ms'])} ({r['miss_n']})"),
            ("Sent in waves of (every s)", lambda r: f"{num(r['wave_size'], 0)} ({num(r['wave_period_s'])})"
                                                      + (" <span class=flag title='lockstep waves: see the note under "
                                                         "the table'>≋</span>" if r["in_waves"] else "")),
            ("TTFT mean ms: client / SGLang (n); client to response headers, mean (p99)", _server_ttft_cell),
            ("Inside SGLang's TTFT, mean ms: intake / queued / prefill / rest", _ttft_parts_cell),
            ("Time per token after the first, ms: client / SGLang",
             lambda r: f"{num(r['client_itl_mean_ms'], 2)} / {num(r['server_itl_mean_ms'], 2)}"),
            ("Load generator CPU % of a core", lambda r: num(r["client_cpu_pct"], 0) + (
                " <span class=flag title='client-bound: the load generator, not the server, set the pace'>⚠</span>"
                if r["client_cpu_pct"] >= client_overhead.BUSY_CLIENT_PCT else ""))]


def _server_ttft_cell(r: dict[str, Any]) -> str:
    if not r["server_ttft_n"]:
        return "–"
    client, server = r["client_ttft_mean_ms"], r["server_ttft_mean_ms"]
    flag = (" <span class=flag title='the HTTP path and the load generator add this much: see the note under the "
            "table'>⚠</span>") if client_overhead.gap_is_notable(client, server) else ""
    headers = r.get("client_headers_mean_ms", math.nan)  # absent from runs before it was recorded
    tail = r.get("client_headers_p99_ms", math.nan)  # absent from runs before it was summarised
    return f"{num(client)} / {num(server)} ({r['server_ttft_n']}){flag}" + (
        f"; headers {num(headers)}" if math.isfinite(headers) else "") + (
        f" (p99 {num(tail)})" if math.isfinite(headers) and math.isfinite(tail) else "")


def ttft_split(r: dict[str, Any]) -> dict[str, float] | None:
    """The row's split of SGLang's mean TTFT (client_overhead.TTFT_PARTS, then "rest": tokenization and the trips
    between SGLang's processes), or None when a part or SGLang's mean is missing (runs recorded before the split)."""
    parts = {name: r.get(f"server_{name}_ms", math.nan) for name, _, _ in client_overhead.TTFT_PARTS}
    total = r.get("server_ttft_mean_ms", math.nan)
    if not all(math.isfinite(v) for v in (*parts.values(), total)):
        return None
    return {**parts, "rest": total - sum(parts.values())}


def _ttft_parts_cell(r: dict[str, Any]) -> str:
    parts = ttft_split(r)
    return "–" if parts is None else " / ".join(num(v) for v in parts.values())


# What each part of SGLang's TTFT is, for the note that names the largest
TTFT_PART_MEANING = {
    "intake": "its scheduler taking the request in (receipt to its waiting queue)",
    "queued": "the request waiting in the scheduler's queue while the steps ahead of it ran (decode steps and "
              "earlier arrivals' prefills)",
    "prefill": "the prefill itself (every prompt token not found in the prefix cache, all its chunks; with the "
               "overlap scheduler its result is read during the next step)",
    "rest": "tokenization and the trips between SGLang's processes (tokenizer manager, scheduler, detokenizer)"}


def ttft_parts_note(rows: list[dict[str, Any]]) -> str:
    """A paragraph splitting SGLang's own mean TTFT at the point where it was longest, or '' without the split."""
    split = [(r, parts) for r in rows if (parts := ttft_split(r)) is not None]
    if not split:
        return ""
    r, parts = max(split, key=lambda item: item[0]["server_ttft_mean_ms"])
    largest = max(parts, key=lambda name: parts[name])
    return (f"<p class=read>Where SGLang's own TTFT goes (its per-stage histograms over the same steady windows, "
            f"means; each stage is counted as it ends, so the parts of one window need not add up exactly). Longest "
            f"at {esc(r['arm'])} · {esc(r['workload'])} · {esc(r['load'])}: {num(r['server_ttft_mean_ms'])} ms = "
            f"intake {num(parts['intake'])} + queued {num(parts['queued'])} + prefill {num(parts['prefill'])} + rest "
            f"{num(parts['rest'])} ms. The largest part, {largest}, is {TTFT_PART_MEANING[largest]}.</p>")


def tail_trade_note(rows: list[dict[str, Any]], paired: list[dict[str, Any]], slo: stats.Slo) -> str:
    """Per load that several arms ran: which arms' steady TTFT p99 met the SLO, and what the arm with the lowest p99
    traded for it against the baseline (paired output throughput and TTFT p50, goodput); '' when no load has two
    arms."""
    loads: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        loads.setdefault((r["workload"], r["pattern"], r["load"]), []).append(r)
    trades = {(p["arm"], p["workload"], p["pattern"], p["load"]): p for p in paired}
    items = []
    for key, arms in loads.items():
        measured = [r for r in arms if math.isfinite(r["steady_ttft_p99_ms"])]
        if len(arms) < 2 or not measured:
            continue
        met = [esc(r["arm"]) for r in arms if r["steady_ttft_p99_slo"] == "met"]
        best = min(measured, key=lambda r: r["steady_ttft_p99_ms"])
        trade = trades.get((best["arm"], *key))
        changes = [] if trade is None else [c for c in (_paired_change(trade, "output_throughput", "output throughput"),
                                                        _paired_change(trade, "ttft_p50", "TTFT p50")) if c]
        cost = f", {', '.join(changes)} against {esc(trade['baseline'])}" if changes else ""
        p99 = with_ci(best["steady_ttft_p99_ms"], best["steady_ttft_p99_ms_lo"], best["steady_ttft_p99_ms_hi"], 0)
        items.append(f"<li>{esc(key[0])} · {esc(key[2])}: {'met by ' + ', '.join(met) if met else 'no arm met it'}; "
                     f"lowest p99 {esc(best['arm'])}, {p99} ms, goodput {num(best['steady_goodput_pct'])}%{cost}</li>")
    if not items:
        return ""
    return (f"<p class=read>Steady TTFT p99 against the SLO's {slo.ttft_ms:g} ms, per load (met: the CI's upper "
            "bound is within it), and what the arm with the lowest p99 gave for it:</p><ul>" + "".join(items)
            + "</ul>")


def _paired_change(trade: dict[str, Any], metric: str, label: str) -> str:
    """'LABEL +4.0% [+1.0, +7.0] (verdict)' from a paired comparison's record (no CI from a single pair, as in the
    paired table's cells), or '' when it lacks the metric."""
    delta = trade.get(f"{metric}_delta_pct", math.nan)
    if not math.isfinite(delta):
        return ""
    lo, hi = trade[f"{metric}_lo_pct"], trade[f"{metric}_hi_pct"]
    ci = f" [{lo:+.1f}, {hi:+.1f}]" if not math.isnan(lo) else ""
    return f"{label} {delta:+.1f}%{ci} ({esc(trade[f'{metric}_verdict'])})"


def waves_note(rows: list[dict[str, Any]]) -> str:
    """A paragraph on the points whose steady windows ran in lockstep waves, or '' when none did."""
    lockstep = [r for r in rows if r["in_waves"]]
    if not lockstep:
        return ""
    names = ", ".join(f"{esc(r['arm'])} · {esc(r['workload'])} · {esc(r['load'])}: {num(r['wave_seen_size'], 0)}"
                      for r in lockstep[:6])
    more = ", …" if len(lockstep) > 6 else ""
    return (f"<p class=read>≋ {len(lockstep)} point(s) ran in lockstep waves (the wave a request was sent in held, "
            f"on average: {names}{more}): "
            "every answer has the same length, so the requests that started together finish together and the "
            "closed loop replaces them together. Each wave's TTFT includes prefilling the whole wave at once, so "
            "these TTFT percentiles describe a burst of that size every period, not requests arriving one by one; "
            f"traffic whose answers vary in length spreads out (llmhost/report/waves.py).{_late_in_waves(lockstep)}"
            f"{_wave_work(lockstep)}</p>")


def _late_in_waves(lockstep: list[dict[str, Any]]) -> str:
    """Where the lockstep points' first tokens over the TTFT SLO were sent: in the waves, or between them."""
    late = [r for r in lockstep if r.get("slow_ttft_n") and r.get("slow_ttft_in_waves_n") is not None]
    if not late:
        return ""
    parts = "; ".join(f"{esc(r['arm'])} · {esc(r['workload'])} · {esc(r['load'])}: {r['slow_ttft_in_waves_n']} of "
                      f"{r['slow_ttft_n']}" for r in late[:6])
    return (f" Of the steady first tokens over the TTFT SLO, those sent in a wave of at least "
            f"{100 * waves.WAVE_SHARE:.0f}% of the concurrency: {parts}{'; …' if len(late) > 6 else ''}.")


def _wave_work(lockstep: list[dict[str, Any]]) -> str:
    """What one such wave hands the server: every prompt tokenized whole, and the tokens the prefix cache missed to
    prefill. Both bound the wave's last first token whatever the flags."""
    known = [r for r in lockstep if all(math.isfinite(r.get(k, math.nan))
                                        for k in ("wave_seen_size", "prompt_tokens_mean", "cached_tokens_mean"))]
    if not known:
        return ""
    parts = "; ".join(
        f"{esc(r['arm'])} · {esc(r['workload'])} · {esc(r['load'])}: "
        f"{_tokens(r['wave_seen_size'] * r['prompt_tokens_mean'])} to tokenize, "
        f"{_tokens(r['wave_seen_size'] * max(r['prompt_tokens_mean'] - r['cached_tokens_mean'], 0.0))} to prefill"
        for r in known[:6])
    return (" Such a wave is, in prompt tokens, all of them to tokenize (each request sends its whole prompt) and those "
            f"the prefix cache did not hold to prefill: {parts}{'; …' if len(known) > 6 else ''}.")


def _tokens(n: float) -> str:
    """A token count for prose: 445k, 13.5k, 850."""
    if n >= 100_000:
        return f"{n / 1000:,.0f}k"
    return f"{n / 1000:.1f}k" if n >= 1000 else f"{n:.0f}"


def measuring_side_note(rows: list[dict[str, Any]]) -> str:
    """Paragraphs on the points whose client TTFT is well above SGLang's own and whose load generator was near a
    full core, or '' when none is."""
    busy = [r for r in rows if r["client_cpu_pct"] >= client_overhead.BUSY_CLIENT_PCT]
    note = (f"<p class=read>At {len(busy)} point(s) the load generator used ≥ {client_overhead.BUSY_CLIENT_PCT:.0f}% "
            "of its one core over the steady window (⚠ in the table): it, not the server, set the pace there, so "
            "their throughput is a lower bound and their latencies an upper bound of the server's.</p>") if busy else ""
    far = [r for r in rows if r["server_ttft_n"]
           and client_overhead.gap_is_notable(r["client_ttft_mean_ms"], r["server_ttft_mean_ms"])]
    if not far:
        return note
    worst = max(far, key=lambda r: r["client_ttft_mean_ms"] - r["server_ttft_mean_ms"])
    return (f"<p class=read>At {len(far)} point(s) the load generator's TTFT is well above SGLang's own (its "
            "tokenizer manager's histogram, read over the same steady window: arrival, tokenization, prefill, first "
            f"token back). Largest: {esc(worst['arm'])} · {esc(worst['workload'])} · {esc(worst['load'])}, client "
            f"{num(worst['client_ttft_mean_ms'])} ms vs SGLang {num(worst['server_ttft_mean_ms'])} ms. The "
            "difference is spent outside the server's scheduler: HTTP in and out, and the load generator's own "
            f"event loop streaming every request of the point.{_headers_split(worst)}</p>") + note


def _headers_split(r: dict[str, Any]) -> str:
    """Where the client-vs-SGLang gap went (with how to read those TTFTs), split by each request's time to its
    response headers when the run recorded it."""
    headers = r.get("client_headers_mean_ms", math.nan)
    if not math.isfinite(headers):
        return " Read those TTFTs as an upper bound of what the server gives."
    after = r["client_ttft_mean_ms"] - headers - r["server_ttft_mean_ms"]
    reading = (" Most of the gap came before the headers: the requests waited to be taken up, not for their first "
               "token's way back, and SGLang's histogram does not see that wait." if headers >= after else
               " Most of the gap is on the way out: read those TTFTs as an upper bound of what the server gives.")
    return (f" Of the client's mean, {num(headers)} ms passed before its response headers came back: the load "
            "generator sending the request, SGLang's HTTP process accepting and parsing it, and whatever held either "
            "event loop meanwhile; SGLang's clock had not started. That leaves "
            f"{num(after)} ms for the first chunk's way out and the client's event loop." + reading)


def way_in_note(rows: list[dict[str, Any]]) -> str:
    """A paragraph on the points whose steady TTFT p99 was mostly spent before the response headers, or ''."""
    tail = [r for r in rows if math.isfinite(r.get("client_headers_p99_ms", math.nan))
            and r["client_headers_p99_ms"] >= WAY_IN_SHARE * r["steady_ttft_p99_ms"]]
    if not tail:
        return ""
    worst = max(tail, key=lambda r: r["client_headers_p99_ms"])
    return (f"<p class=read>At {len(tail)} point(s) the steady TTFT tail was mostly spent before the response "
            f"headers came back. Largest: {esc(worst['arm'])} · {esc(worst['workload'])} · {esc(worst['load'])}, "
            f"headers p99 {num(worst['client_headers_p99_ms'])} ms of a TTFT p99 of "
            f"{num(worst['steady_ttft_p99_ms'])} ms.{_pace(worst)} That time passes before SGLang's tokenizer manager "
            "sees the request: the load generator sending it, SGLang's HTTP process accepting and parsing it, while "
            "either event loop does other work (SGLang 0.5.17 encodes prompts on its loop). One tokenizer process "
            "that encodes them in batches on a thread (<code>--enable-dynamic-batch-tokenizer</code>, what "
            "TOKENIZER_WORKER_NUM=auto launches) shortens this part: README, \"Where the tail comes from\".</p>")


def _pace(r: dict[str, Any]) -> str:
    """How a wave's headers came back, and how much of their spacing the load generator's own work explains ('' for
    a point not in waves or without header times)."""
    pace, size = r.get("headers_pace_ms", math.nan), r.get("wave_size", math.nan)
    if not (r.get("in_waves") and math.isfinite(pace) and math.isfinite(size) and size > 0):
        return ""
    # taken up one at a time, a wave's mean wait for its headers is half its spread; far less: it waited as a whole
    if pace * (size - 1) / 2 < WAY_IN_SHARE * r.get("client_headers_mean_ms", math.nan):
        return (f" Within a wave the headers came back {num(pace, 1)} ms apart (the wave's p10–p90 spread over its "
                "requests): close together, so the wave waited as a whole.")
    text = (f" Within a wave the headers came back {num(pace, 1)} ms apart (the wave's p10–p90 spread over its "
            "requests): the wave was taken up one request after another, not at once.")
    at, between = r.get("client_cpu_wave_pct", math.nan), r.get("client_cpu_between_pct", math.nan)
    extra = r.get("client_wave_extra_ms", math.nan)
    if not all(math.isfinite(x) for x in (at, between, extra)):
        return text
    own = max(0.0, extra) / size
    return text + (f" The load generator's CPU was {num(at, 0)}% of a core in the seconds a wave was sent and "
                   f"{num(between, 0)}% between them: its own work was about {num(own, 1)} ms a request of that "
                   "spacing" + (", so the rest was the server's side." if own < pace / 2 else "."))
