"""Headline KPI cards: each card answers one question and lists every arm's answer (manifest order).

Built from summary rows (tables.summary_rows) seen through steady_view: a point with a steady window (llmhost.report.
steady) gives the cards its steady-state throughput, TTFT and goodput (its steady repeats, CIs across them), so the
start-up wave and the drain do not set the headline; a point without one (cold, burst, every repeat not steady)
keeps its numbers over all requests. Each entry says which (`basis`); the transients are in the steady section.
ITL has no steady-window statistic: its card stays over all requests and says so.
Where the tail percentiles come from: the arm's `long` point (it exists to collect enough samples for p99.9); without
one, the reference point (first workload, highest concurrency every arm ran), so arms compare like with like;
without that, the arm's lowest concurrency point.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from llmhost import cost, stats
from llmhost.report.load import Run


FULL_RUN = "./run_bench.py's default plan (no --quick, --tune or load options) measures it"
STEADY, POOLED = "steady window", "all requests"
# summary-row field <- the steady row's field that replaces it where the point has steady repeats
STEADY_FIELDS = {
    "output_throughput": "steady_output_throughput", "output_throughput_lo": "steady_output_throughput_lo",
    "output_throughput_hi": "steady_output_throughput_hi", "ttft_n": "steady_ttft_n",
    "ttft_p50_ms": "steady_ttft_p50_ms", "ttft_p99_ms": "steady_ttft_p99_ms", "ttft_p999_ms": "steady_ttft_p999_ms",
    "ttft_p99_sufficient": "steady_ttft_p99_sufficient", "ttft_p999_sufficient": "steady_ttft_p999_sufficient",
    "goodput_pct": "steady_goodput_pct", "goodput_lo_pct": "steady_goodput_pct_lo",
    "goodput_hi_pct": "steady_goodput_pct_hi",
}


def steady_view(rows: list[dict], steady_rows: list[dict], slo_pct: float) -> list[dict]:
    """The summary rows, each with `basis`; a row whose point has steady repeats takes its steady-window numbers
    (STEADY_FIELDS) and SLO verdict (goodput in the window >= slo_pct; decided when its CI is clear of it)."""
    key = ("arm", "workload", "pattern", "concurrency", "request_rate", "num_prompts")
    steady = {tuple(r[k] for k in key): r for r in steady_rows if r["repeats_steady"]}
    out = []
    for row in rows:
        s = steady.get(tuple(row[k] for k in key))
        if s is None:
            out.append({**row, "basis": POOLED})
            continue
        out.append({**row, **{mine: s[theirs] for mine, theirs in STEADY_FIELDS.items()}, "basis": STEADY,
                    "meets_slo": s["steady_goodput_pct"] >= slo_pct - 1e-9,
                    "slo_decided": s["steady_slo"] in ("met", "missed")})
    return out
_LOAD_KEY = {"concurrency": "concurrency", "qps": "request_rate"}
_UNIT = {"concurrency": "", "qps": " req/s"}


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    arm: str
    value: str
    detail: str
    is_flagged: bool  # shown with a warning mark: too few samples, failures, SLO never met


@dataclasses.dataclass(frozen=True, slots=True)
class Card:
    title: str
    question: str
    entries: tuple[Entry, ...]


def fmt(value: Any, digits: int = 0, unit: str = "") -> str:
    """Compact number: '1,234 tok/s', '—' for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)
    return f"{text} {unit}".strip()


def _sweeps(rows: list[dict], arm: str, pattern: str) -> dict[str, list[dict]]:
    """workload -> the arm's rows of `pattern` that have a load, in run order."""
    mine = [r for r in rows if r["arm"] == arm and r["pattern"] == pattern]
    return {wl: [r for r in mine if r["workload"] == wl and r[_LOAD_KEY[pattern]] is not None]
            for wl in dict.fromkeys(r["workload"] for r in mine)}


def _verdicts(mine: list[dict], pattern: str) -> tuple[dict[float, bool], list[str]]:
    """load -> met the SLO, for one workload's sweep, and notes on the loads that are no verdict or a failure to
    serve (any repeat failed outright: missed; no request data: no verdict)."""
    key, unit = _LOAD_KEY[pattern], _UNIT[pattern]
    met: dict[float, bool] = {}
    notes: list[str] = []
    for r in mine:
        load = float(r[key])
        if r["points_failed"]:
            met[load] = False
            notes.append(f"{r['points_failed']} of {r['repeats']} runs at {load:g}{unit} failed: "
                         f"{r['point_errors'] or 'no error text'}")
        elif not r["requests"]:
            notes.append(f"no request data at {load:g}{unit}")
        else:
            met[load] = bool(r["meets_slo"])
    return met, notes


def at_capacity(rows: list[dict], arm: str, pattern: str) -> dict[str, tuple[stats.Capacity, dict | None]]:
    """workload -> (capacity, the arm's row at that highest load within the SLO; None: even the lowest misses it)."""
    out: dict[str, tuple[stats.Capacity, dict | None]] = {}
    for wl, mine in _sweeps(rows, arm, pattern).items():
        cap = stats.max_load_within_slo(_verdicts(mine, pattern)[0])
        out[wl] = cap, next((r for r in mine if float(r[_LOAD_KEY[pattern]]) == cap.load), None)
    return out


def _capacity(rows: list[dict], arm: str, pattern: str, slo_pct: float = 99.0) -> tuple[str, str, bool]:
    """Highest load within the SLO per workload. A load counts as missed when any repeat failed outright (the
    server did not serve it) and as unmeasured when its points left no request data; both are flagged and named,
    as is an edge verdict within 1 point of the SLO whose goodput CI straddles it (a coin flip: more requests
    would decide it). 256 of 256 good cannot *prove* 99% either, but 100% is no coin flip: not flagged)."""
    parts, details, flagged = [], [], False
    key, unit = _LOAD_KEY[pattern], _UNIT[pattern]
    for wl, mine in _sweeps(rows, arm, pattern).items():
        met, notes = _verdicts(mine, pattern)
        cap = stats.max_load_within_slo(met)
        if cap.load is None:
            parts.append(f"{wl}: none")
            details.append(f"{wl}: even {min(met):g}{unit} misses the SLO" if met else f"{wl}: no data")
            flagged = True
        else:
            parts.append(f"{wl}: {cap.load:g}{unit}" + ("" if cap.is_bracketed else "+"))
            at_cap = next(r for r in mine if float(r[key]) == cap.load)
            details.append((f"{wl}: fails at {cap.first_failing:g}{unit}" if cap.is_bracketed
                            else f"{wl}: no measured load failed")
                           + f"; {fmt(at_cap['output_throughput'], 0, 'tok/s')} at {cap.load:g}{unit}"
                           + f" ({at_cap.get('basis', POOLED)})")
            if at_cap["client_bound"]:
                details[-1] += f" (the load generator could not offer {cap.load:g}{unit}: client-bound)"
                flagged = True
            if not cap.is_monotonic:
                details[-1] += " (a higher load passed again: noisy)"
        edges = {x for x in (cap.load, cap.first_failing) if x is not None}
        undecided = [r for r in mine if float(r[key]) in edges and r["requests"] and not r["points_failed"]
                     and not r.get("slo_decided", True) and abs(r["goodput_pct"] - slo_pct) < 1.0
                     and r["goodput_pct"] < 100.0]  # every request good: no coin flip, whatever the SLO
        for r in undecided:
            notes.append(f"at {float(r[key]):g}{unit} goodput {fmt(r['goodput_pct'], 1)}% "
                         f"[{fmt(r['goodput_lo_pct'], 1)}, {fmt(r['goodput_hi_pct'], 1)}] straddles the SLO: "
                         f"{r['requests']} requests cannot decide it")
        if notes:
            details[-1] += " (" + "; ".join(notes) + ")"
            flagged = True
    if not parts:
        return "—", f"no {pattern} points in this run — {FULL_RUN}", False
    return " · ".join(parts), "; ".join(details), flagged


def cost_rows(rows: list[dict], arms: list[str], gpu_hourly_usd: float | None) -> list[dict]:
    """Per arm and workload: output tok/s at the highest concurrency within the SLO (Student-t CI over repeats) and
    what a million output tokens cost there (llmhost.cost); none without a price. The cost card and summary.json
    read these."""
    out = []
    for arm in arms:
        for wl, (cap, row) in at_capacity(rows, arm, "concurrency").items():
            tok_s = stats.Interval(row["output_throughput"], row["output_throughput_lo"], row["output_throughput_hi"],
                                   row["points_ok"]) if row else stats.Interval(math.nan, math.nan, math.nan, 0)
            usd = cost.usd_per_million_tokens(gpu_hourly_usd, tok_s)
            if usd is None:
                return []
            out.append({"arm": arm, "workload": wl, "concurrency": row["concurrency"] if row else None,
                        "basis": row.get("basis", POOLED) if row else POOLED,
                        "is_bracketed": cap.is_bracketed,
                        "client_bound": bool(row and row["client_bound"]), "output_throughput": tok_s.value,
                        "output_throughput_lo": tok_s.lo, "output_throughput_hi": tok_s.hi,
                        "usd_per_m_output_tokens": usd.value, "usd_per_m_output_tokens_lo": usd.lo,
                        "usd_per_m_output_tokens_hi": usd.hi})
    return out


def usd(value: float, digits: int = 2) -> str:
    """'$0.20'; an unbounded CI end '∞', missing '—'."""
    return "—" if math.isnan(value) else "∞" if math.isinf(value) else f"${value:,.{digits}f}"


def _cost(costs: list[dict], arm: str) -> Entry:
    mine = [c for c in costs if c["arm"] == arm]
    if not mine:
        return Entry(arm, "—", f"no concurrency points in this run — {FULL_RUN}", False)
    parts, details = [], []
    for c in mine:
        wl, value = c["workload"], c["usd_per_m_output_tokens"]
        if c["concurrency"] is None:
            parts.append(f"{wl}: —")
            details.append(f"{wl}: no concurrency within the SLO, so no cost at it")
            continue
        digits = max(2, 1 - math.floor(math.log10(value))) if 0 < value < math.inf else 2  # 2 significant digits
        parts.append(f"{wl}: {usd(value, digits)}")
        lo, hi = c["usd_per_m_output_tokens_lo"], c["usd_per_m_output_tokens_hi"]
        ci = f" [{usd(lo, digits)}, {usd(hi, digits)}]" if not math.isnan(lo) else " (no CI: one repeat; --repeat 3)"
        tok_ci = (f" [{fmt(c['output_throughput_lo'])}, {fmt(c['output_throughput_hi'])}]"
                  if not math.isnan(c["output_throughput_lo"]) else "")
        details.append(f"{wl}: {usd(value, digits)}{ci} at c={c['concurrency']:g}, "
                       f"{fmt(c['output_throughput'], 0, 'tok/s')}{tok_ci} ({c['basis']})"
                       + ("" if c["is_bracketed"] else " (no measured load failed: a higher one may cost less)")
                       + (" (client-bound: the server could do more)" if c["client_bound"] else ""))
    flagged = any(c["concurrency"] is None or c["client_bound"] for c in mine)
    return Entry(arm, " · ".join(parts) + " per M output tokens", "; ".join(details), flagged)


def reference_point(rows: list[dict]) -> tuple[str, int] | None:
    """(workload, concurrency) every arm with data ran successfully: the first workload in run order, highest
    common concurrency — so the arms' tail cards compare like with like."""
    sweep = [r for r in rows if r["pattern"] == "concurrency" and r["points_ok"] and r["concurrency"] is not None]
    arms = {r["arm"] for r in sweep}
    for wl in dict.fromkeys(r["workload"] for r in sweep):
        by_arm: dict[str, set[int]] = {a: set() for a in arms}  # an arm without the workload leaves none common
        for r in sweep:
            if r["workload"] == wl:
                by_arm[r["arm"]].add(r["concurrency"])
        common = set.intersection(*by_arm.values())
        if common:
            return wl, max(common)
    return None


def tail_row(rows: list[dict], arm: str) -> dict | None:
    """The row the tail-latency cards use for an arm (see the module docstring)."""
    mine = [r for r in rows if r["arm"] == arm and r["points_ok"] > 0 and r["requests"] > 0]
    longs = [r for r in mine if r["pattern"] == "long"]
    if longs:
        return max(longs, key=lambda r: r["ttft_n"])
    ref = reference_point(rows)
    at_ref = [r for r in mine if r["pattern"] == "concurrency" and (r["workload"], r["concurrency"]) == ref]
    if at_ref:
        return at_ref[0]
    sweep = [r for r in mine if r["pattern"] == "concurrency" and r["concurrency"] is not None]
    return min(sweep, key=lambda r: r["concurrency"]) if sweep else None


def _tail(rows: list[dict], arm: str, metric: str) -> Entry:
    row = tail_row(rows, arm)
    if row is None:
        return Entry(arm, "—", "no successful point", True)
    n_key = "ttft_n" if metric == "ttft" else "itl_n"
    n = row[n_key]
    value = " / ".join(fmt(row[f"{metric}_{p}_ms"], 1) for p in ("p50", "p99", "p999")) + " ms"
    sufficient = bool(row[f"{metric}_p999_sufficient"])
    note = "" if sufficient else f" — p99.9 needs ≥{stats.needed_samples(99.9):,}"
    if metric == "ttft" and not row["ttft_p99_sufficient"]:
        note = f" — p99 needs ≥{stats.needed_samples(99.0):,}, p99.9 ≥{stats.needed_samples(99.9):,}"
    basis = row.get("basis", POOLED) if metric == "ttft" else f"{POOLED}, start-up and drain included"
    return Entry(arm, value, f"{row['workload']} {row['pattern']} {row['load']}, {basis}, n={n:,}{note}",
                 not sufficient)


def _peak(rows: list[dict], arm: str) -> Entry:
    mine = [r for r in rows if r["arm"] == arm and r["pattern"] in ("concurrency", "qps")
            and not math.isnan(r["output_throughput"])]
    if not mine:
        return Entry(arm, "—", "no successful sweep point", True)
    best = max(mine, key=lambda r: r["output_throughput"])
    missed = not best["meets_slo"]
    return Entry(arm, fmt(best["output_throughput"], 0, "tok/s"),
                 f"{best['workload']} {best['load']} ({best.get('basis', POOLED)})"
                 + (" — misses the SLO there (the capacity card gives throughput within it)" if missed else ""),
                 missed)


def _cold(rows: list[dict], arm: str) -> Entry:
    """TTFT of the first wave after a flush (the requests that find the prefix cache empty) vs the warm point's.
    The p50 of the whole cold point would mostly be requests that hit what the first wave cached."""
    planned = [r for r in rows if r["arm"] == arm and r["pattern"] == "cold"]
    cold = [r for r in planned if r["requests"]]
    warm = [r for r in rows if r["arm"] == arm and r["pattern"] == "warm" and r["requests"]]
    if not cold:
        if planned:
            return Entry(arm, "—", f"the cold point failed: {planned[0]['point_errors'] or 'no request data'}", True)
        return Entry(arm, "—", f"not measured in this run — {FULL_RUN}", False)
    text = fmt(cold[0]["ttft_first_wave_p50_ms"], 0, "ms")
    where = f"{cold[0]['workload']} {cold[0]['load']}"
    detail = (f"p50 of the first wave after a flush; warm: {fmt(warm[0]['ttft_p50_ms'], 0, 'ms')} (p50, {where})"
              if warm else f"p50 of the first wave after a flush ({where}); no warm point to compare")
    return Entry(arm, text, detail, False)


def _burst(rows: list[dict], arm: str) -> Entry:
    burst = [r for r in rows if r["arm"] == arm and r["pattern"] == "burst"]
    if not burst:
        return Entry(arm, "—", f"not measured in this run — {FULL_RUN}", False)
    sent = sum(r["requests"] for r in burst)
    failed = sum(r["failed_requests"] for r in burst)
    lost = sum(r["points_failed"] for r in burst)
    detail = f"of {sent:,} requests" + (f"; {lost} burst point(s) failed outright" if lost else "")
    return Entry(arm, f"{failed:,} failed", detail, failed > 0 or lost > 0)


def _errors(rows: list[dict], arm: str) -> Entry:
    mine = [r for r in rows if r["arm"] == arm]
    failed = sum(r["failed_requests"] for r in mine)
    sent = sum(r["requests"] for r in mine)
    points = sum(r["points_failed"] for r in mine)
    return Entry(arm, f"{failed:,} requests", f"of {sent:,}; {points} failed point(s)", failed > 0 or points > 0)


def _cost_card(rows: list[dict], arms: list[str], price: cost.GpuPrice) -> Card:
    costs = cost_rows(rows, arms, price.usd_per_hour)
    return Card("Cost per million output tokens",
                f"What do a million output tokens cost at the highest concurrency within the SLO, at "
                f"${price.usd_per_hour:,.2f} per GPU-hour ({price.source}, read when this page was built)? "
                "Set against a provider's price per million output tokens.",
                tuple(_cost(costs, a) for a in arms))


def build_cards(run: Run, rows: list[dict], slo: stats.Slo, price: cost.GpuPrice | None = None) -> list[Card]:
    """The KPI cards, in reading order; the cost card only when a GPU price is set."""
    arms = [a.name for a in run.arms]
    slo_text = f"TTFT ≤ {slo.ttft_ms:g} ms and TPOT ≤ {slo.itl_ms:g} ms for ≥ {slo.pct:g}% of requests"

    def cap(pattern: str) -> tuple[Entry, ...]:
        return tuple(Entry(a, *_capacity(rows, a, pattern, slo.pct)) for a in arms)

    steady = " In the steady window (warm-up and drain left out) where the point has one."
    return [
        Card("Max concurrency within SLO", f"How many concurrent users before the SLO ({slo_text}) breaks?"
             + steady, cap("concurrency")),
        *([_cost_card(rows, arms, price)] if price else []),
        Card("Max QPS within SLO", "What Poisson arrival rate can it take within the same SLO?" + steady,
             cap("qps")),
        Card("Peak output throughput", "What is the most tokens/s it produced in any sweep point?" + steady,
             tuple(_peak(rows, a) for a in arms)),
        Card("TTFT p50 / p99 / p99.9", "How long until the first token, typically and in the tail?" + steady
             + " The start-up wave and the drain are in 'Steady state and repeats'.",
             tuple(_tail(rows, a, "ttft") for a in arms)),
        Card("ITL p50 / p99 / p99.9", "How smooth is streaming once it starts (all token gaps of all requests "
             "pooled)?",
             tuple(_tail(rows, a, "itl") for a in arms)),
        Card("Cold-start TTFT", "What does a flushed prefix cache cost the first requests (p50)?",
             tuple(_cold(rows, a) for a in arms)),
        Card("Burst failures", "Did a burst of simultaneous requests lose any?", tuple(_burst(rows, a) for a in arms)),
        Card("Errors", "Did anything fail across the whole run?", tuple(_errors(rows, a) for a in arms)),
    ]
