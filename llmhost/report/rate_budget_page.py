"""The steady section's table of where each closed-loop point's rate went (rows from llmhost.report.steady, the
arithmetic in llmhost.report.rate_budget) and its note on the point that decoded least."""
from __future__ import annotations

import math
from typing import Any

from llmhost.report import page, rate_budget
from llmhost.report.page import esc, num


def section(rows: list[dict[str, Any]]) -> str:
    """The table of where each steady closed-loop point's rate went (llmhost.report.rate_budget), and a note on the
    point whose slots spent the least time decoding at their pace; '' when no row has a budget."""
    shown = [r for r in rows if math.isfinite(r.get("budget_decode_pct", math.nan))]
    if not shown:
        return ""
    cols: list[tuple[str, page.Cell]] = [
        ("Arm", lambda r: esc(r["arm"])), ("Workload", lambda r: esc(r["workload"])),
        ("Load", lambda r: esc(r["load"])), ("Window out tok/s", lambda r: num(r["steady_output_throughput"], 0)),
        ("Pace: median gap ms → tok/s at that pace", lambda r: f"{num(r['budget_pace_ms'], 2)} → "
                                                            f"{num(r['budget_pace_rate'], 0)}"),
        *((f"{head}, % of a slot's time", (lambda key: lambda r: num(r[key]))(f"budget_{name}_pct"))
          for name, head in (("decode", "Decoding at the pace"), ("stalls", "Gaps above the pace"),
                             ("first", "Waiting for the first token"), ("between", "Between requests"))),
        (f"Stalls (gaps ≥ {rate_budget.STALL_X:g}× the pace): a request, mean ms", _stalls_cell),
        ("Prefill batches: requests each, a second", _prefills_cell)]
    worst = min(shown, key=lambda r: r["budget_decode_pct"])
    losses = {"stalls": "gaps above the pace", "first": "waiting for first tokens", "between": "between requests"}
    largest = max(losses, key=lambda name: worst[f"budget_{name}_pct"])
    return ("<h3>Where a closed loop's steady rate goes</h3><p class=read>Each slot of a closed loop takes one "
            "request after another. Over the steady window its time splits into decoding at the streams' pace (every "
            "token after the first at the median gap between two chunks), gaps above that pace (steps that ran "
            "longer: mostly the prefills of later arrivals, which every running stream waits for), waiting for the "
            "first token, and time between requests (the load generator's refill). The window's rate is the pace's "
            "rate times the decoding share (times N / (N − 1) for the first token of N), so each other share is "
            "output it did not make (llmhost/report/rate_budget.py; means over the steady repeats). The last "
            "column says how SGLang batched the arrivals' prefills (its queue-time count over the prefill batches "
            "its forward-pass counter saw in the window): arrivals taken up a few at a time make many prefills, "
            "each a gap every running stream waits through.</p>"
            + page.table(cols, shown, left=3)
            + f"<p class=read>Least time decoding at the pace: {esc(worst['arm'])} · {esc(worst['workload'])} · "
            f"{esc(worst['load'])}, {num(worst['budget_decode_pct'])}%; its largest loss was "
            f"{losses[largest]}, {num(worst[f'budget_{largest}_pct'])}%.</p>")


def _stalls_cell(r: dict[str, Any]) -> str:
    """'8.7, 32': stalls a request met and their mean ms (absent from summaries written before they were counted)."""
    return f"{num(r.get('budget_stalls_per_request', math.nan))}, {num(r.get('budget_stall_ms', math.nan), 0)}"


def _prefills_cell(r: dict[str, Any]) -> str:
    """'9.4, 2.6': requests a prefill batch took and prefill batches a second ('–' for runs recorded before)."""
    each, rate = r.get("prefill_requests_each", math.nan), r.get("prefills_per_s", math.nan)
    return f"{num(each)}, {num(rate)}" if math.isfinite(each) else "–"
