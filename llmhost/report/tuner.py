"""The dashboard's Tuner section for a `run_bench.py --tune` run: every trial's goodput with its CI, the paired
difference to the defaults, the winner, and dollars per million SLO-meeting output tokens when a GPU price is set.

    html, ranking = section(run, slo, price)      # (None, None) for a run that is not a tune run

The ranking is recomputed from the stored requests under the page's SLO (llmhost.tune.rank, the tuner's own
function), so a dashboard built with other --slo-* values ranks by those; what the run itself chose and wrote
(tune.json) is shown beside it.
"""
from __future__ import annotations

import json
import math
from typing import Any

from llmhost import cost, stats
from llmhost.report import page
from llmhost.report.load import Run
from llmhost.report.page import esc, num, with_ci
from llmhost.tune import rank


def _cells(r: rank.TrialRow, flags: dict[str, str], stage: dict[str, str]) -> dict[str, Any]:
    g, s, d, usd = r.goodput, r.share, r.vs_defaults, r.usd_per_m
    return {"trial": esc(r.trial), "stage": esc(stage.get(r.trial, "")), "flags": esc(flags.get(r.trial, "")),
            "load": esc(r.load), "goodput": with_ci(g.value, g.lo, g.hi, 2),
            "share": with_ci(100 * s.value, 100 * s.lo, 100 * s.hi, 1), "diff": esc(rank.diff_text(d)),
            "verdict": (f"class={r.verdict}|" if r.verdict in ("better", "worse") else "") + esc(r.verdict),
            "usd": "—" if usd is None else "∞" if not math.isfinite(usd.value) else with_ci(usd.value, usd.lo,
                                                                                             usd.hi, 3),
            "not_steady": num(r.not_steady, 0)}


COLUMNS = (("trial", "trial"), ("stage", "stage"), ("flags (beyond the defaults)", "flags"), ("best load", "load"),
           ("goodput, req/s meeting the SLO [95% CI]", "goodput"), ("% of requests in SLO", "share"),
           ("vs defaults, paired [95% CI]", "diff"), ("verdict", "verdict"), ("$ per M good output tokens", "usd"),
           ("repeats not steady", "not_steady"))


def section(run: Run, slo: stats.Slo, price: cost.GpuPrice | None) -> tuple[str | None, dict | None]:
    """The section's HTML and the ranking as JSON (for summary.json); (None, None) without a tune."""
    tune = run.manifest.tune
    if not tune:
        return None, None
    latest = {p.point_id: p for p in run.points}
    ranking = rank.rank(rank.goodput_by_repeat(run.path, latest, slo), price.usd_per_hour if price else None)
    flags = {a.name: " ".join(a.flags) or "(the defaults)" for a in run.arms}
    stage = {t["name"]: t["stage"] for t in tune.get("trials", [])}
    columns = [(head, (lambda key: lambda row: row[key])(key)) for head, key in COLUMNS
               if key != "usd" or price is not None]
    table = page.table(columns, [_cells(r, flags, stage) for r in ranking.rows], left=3)
    space = "; ".join(f"{lv['flag']} {', '.join(lv['values'])} — {lv['why']}" for lv in tune.get("space", []))
    chosen = _chosen(run)
    body = (f"<p class=read>Goodput = requests per second within the SLO (TTFT ≤ {slo.ttft_ms:g} ms, mean ITL ≤ "
            f"{slo.itl_ms:g} ms) in the steady window: its steady requests' share within it × its completions per "
            f"second; mean of {tune.get('repeats')} paired "
            "repeats with a Student-t 95% CI. A trial wins only when its paired difference to the defaults is "
            "above 0 by its CI.</p>"
            f"<p><b>Winner under this page's SLO:</b> {esc(ranking.winner or '—')} — {esc(ranking.reason)}</p>"
            + (f"<p><b>The run chose:</b> {esc(chosen)}</p>" if chosen else "") + table
            + f"<p class=read>Search space: {esc(space)}.</p>"
            + (f"<p class=read>Cut by the budget: {esc(', '.join(tune.get('cut', [])))}.</p>" if tune.get("cut")
               else "")
            + (f"<p class=read>Dollars at {price.usd_per_hour:g} $/h ({esc(price.source)}).</p>" if price else ""))
    return body, rank.to_json(ranking)


def _chosen(run: Run) -> str:
    """What tune.json says the run chose and wrote ('' when the run did not finish its ranking)."""
    try:
        saved = json.loads((run.path / "tune.json").read_text())
    except (OSError, ValueError):
        return ""
    lines = "; ".join(saved.get("lines") or []) or "nothing to write"
    applied = f" — written to {saved['applied']}" if saved.get("applied") else " — not applied (no --apply)"
    return f"{saved.get('winner')}: {lines}{applied if saved.get('lines') else ''}"
