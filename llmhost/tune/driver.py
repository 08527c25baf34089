"""A tune run on top of the benchmark runner: the coarse stage, the refinement around its best, the ranking,
the winner's lines (written to config.local.env only on --apply).

    tune = new_tune(space, rows, repeats, model, budget_s)     # the coarse stage's trials fitted to the budget
    arms, plan = tune.arms(), tune.points()                    # what run_bench.py records in the manifest
    arms, plan, closing = run_stages(b, tune, model, ...)      # runs both stages; closing: the last JSON's "tune"

Each trial is a benchmark arm (a server restart with its flags); the defaults are the baseline arm, so every
trial's repeat k pairs with the defaults' repeat k (same seed). The tune's state travels in the manifest's `tune`
(stage, trials, what was cut), rewritten when the refine stage is planned, so --resume finishes the stage it was
in and still refines. Writes tune.json (ranking, winner, the lines for config.local.env) into the run directory.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llmhost import files, stats
from llmhost.bench import points, runner, sittings
from llmhost.bench.arms import Arm
from llmhost.bench.costs import CostModel
from llmhost.bench.eta import fmt_s
from llmhost.bench.records import Point
from llmhost.tune import apply as apply_mod, plan as plan_mod, rank, space as space_mod
from llmhost.tune.space import Lever, Trial


@dataclasses.dataclass(frozen=True, slots=True)
class TuneRun:
    rows: tuple[points.Row, ...]  # the load points every trial runs (workload, pattern, conc, rate, prompts)
    repeats: int
    budget_s: float
    space: tuple[Lever, ...]
    trials: tuple[Trial, ...]  # planned so far, coarse then refine
    cut: tuple[str, ...]  # trials the budget left out, by name
    stage: str  # "coarse" until the refine stage is planned
    coarse_estimate_s: float

    def arms(self) -> list[Arm]:
        return [t.arm(i) for i, t in enumerate(self.trials)]

    def points(self) -> list[Point]:
        return [p for t in self.trials for p in plan_mod.trial_points(t, self.rows, self.repeats)]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self),
                "space": [{"flag": lv.flag, "key": lv.key, "values": list(lv.values), "why": lv.why,
                           "also": list(lv.also)} for lv in self.space]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TuneRun":
        """The manifest's `tune` as written by to_dict; BenchError (one line) when it is damaged."""
        try:
            return cls(tuple(tuple(r) for r in d["rows"]), int(d["repeats"]), float(d["budget_s"]),
                       tuple(Lever(lv["flag"], lv["key"], tuple(lv["values"]), lv["why"], tuple(lv.get("also", ())))
                             for lv in d["space"]),
                       tuple(Trial(t["name"], tuple(map(tuple, t["settings"])), t["stage"], tuple(t.get("also", ())))
                             for t in d["trials"]),
                       tuple(d["cut"]), d["stage"], float(d["coarse_estimate_s"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise runner.BenchError(f"the manifest's tune record is damaged ({type(exc).__name__}: {exc}) — "
                                    "start a new ./run_bench.py --tune") from None


def new_tune(space: Sequence[Lever], rows: Sequence[points.Row], repeats: int, model: CostModel,
             budget_s: float) -> tuple[TuneRun, plan_mod.StagePlan]:
    """The coarse stage fitted to COARSE_SHARE of the budget (the defaults always, if they fit at all)."""
    stage = plan_mod.fit(space_mod.coarse_trials(space), rows, repeats, model, budget_s * plan_mod.COARSE_SHARE)
    tune = TuneRun(tuple(rows), repeats, budget_s, tuple(space), tuple(stage.trials),
                   tuple(t.name for t in stage.cut), "coarse", stage.estimate_s)
    return tune, stage


def ranking_of(root: Path, latest: dict, slo: stats.Slo, gpu_hourly_usd: float | None) -> rank.Ranking:
    return rank.rank(rank.goodput_by_repeat(root, latest, slo), gpu_hourly_usd)


def plan_refine(tune: TuneRun, ranking: rank.Ranking, model: CostModel, left_s: float) -> TuneRun:
    """The refine trials around the coarse stage's best, then the coarse trials the budget cut before, as many as
    fit left_s; the tune with them added (what still does not fit stays cut)."""
    scores = {r.trial: r.goodput.value for r in ranking.rows}
    cut_before = [t for t in space_mod.coarse_trials(tune.space) if t.name in tune.cut]
    candidates = space_mod.refine_trials(tune.space, scores, tune.trials) + cut_before
    stage = plan_mod.fit(candidates, tune.rows, tune.repeats, model, left_s)
    return dataclasses.replace(tune, trials=(*tune.trials, *stage.trials), cut=tuple(t.name for t in stage.cut),
                               stage="refine")


def run_stages(b: runner.Bench, tune: TuneRun, model: CostModel, slo: stats.Slo, left_s: Callable[[], float],
               on_tune: Callable[[TuneRun], None],
               finish: Callable[[TuneRun, rank.Ranking, float], dict[str, Any]]) -> tuple[list[Arm], list[Point], dict]:
    """Coarse (or what is left of it), then refine within left_s(); on_tune(tune) records a re-planned tune (the
    manifest), finish(tune, ranking, seconds the run took) reports and applies. Returns the final arms, plan and
    the closing JSON's part."""
    b.check_tool_calls = False  # 40 prompts per boot, unpriced by the budget: the levers do not change answers
    runner.run_arms(b, tune.arms(), tune.points(), False)
    price = b.cfg.gpu_hourly_usd
    if tune.stage == "coarse":
        before = len(tune.trials)
        tune = plan_refine(tune, ranking_of(b.store.root, b.store.latest_attempts(), slo, price), model, left_s())
        on_tune(tune)
        added = [p for t in tune.trials[before:] for p in plan_mod.trial_points(t, tune.rows, tune.repeats)]
        b.total += len(added)
        if b.clock is not None:  # each refine trial is an arm: its boot joins the ETA with its points
            b.clock.add(added, boots=len(tune.trials) - before)
        b.progress(f"tune: refine stage, {len(tune.trials) - before} trials "
                   f"({', '.join(t.name for t in tune.trials[before:]) or 'none fit or none to try'})")
        runner.run_arms(b, tune.arms(), tune.points(), False)
    ranking = ranking_of(b.store.root, b.store.latest_attempts(), slo, price)
    # the run's own time over its sittings (a resume included), not the budget's reckoning of an earlier stage
    return tune.arms(), tune.points(), finish(tune, ranking, sittings.read(b.store.root).active_s)


def finish(root: Path, run_id: str, tune: TuneRun, ranking: rank.Ranking, server_extra_args: str,
           apply_to: Path | None, spent_s: float) -> dict[str, Any]:
    """Print the ranking and what the budget paid for, write tune.json, write the winner's lines to apply_to (None:
    print them only). `spent_s`: how long the tune has run, every sitting's span (llmhost.bench.sittings)."""
    for line in ranking_lines(ranking, tune.cut):
        print(f"[tune] {line}", flush=True)
    print(f"[tune] {budget_line(spent_s, tune.budget_s)}", flush=True)
    won = {a.name: a for a in tune.arms()}.get(ranking.winner or "")
    lines = apply_mod.winner_lines(won, server_extra_args) if won is not None and not won.is_baseline else []
    applied = None
    if lines and apply_to is not None:
        apply_mod.apply(apply_to, lines, f"run_bench.py --tune, run {run_id}: {ranking.reason}")
        applied = str(apply_to)
        print(f"[tune] wrote {', '.join(ln.split('=', 1)[0] for ln in lines)} to {apply_to}", flush=True)
    elif lines:
        print("[tune] to use the winner, add to config.local.env (or run again with --apply):", flush=True)
        for line in lines:
            print(f"    {line}", flush=True)
    closing = {"winner": ranking.winner, "reason": ranking.reason, "lines": lines, "applied": applied,
               "trials": len(tune.trials), "cut": list(tune.cut), "spent_s": round(spent_s, 1),
               "budget_s": tune.budget_s}
    files.write_json_atomic(root / "tune.json", {**closing, "ranking": rank.to_json(ranking)})
    return closing


def ranking_lines(ranking: rank.Ranking, cut: Sequence[str]) -> list[str]:
    """The ranking as a table: trial, load, goodput with CI, SLO share, paired difference, $/M tokens."""
    out = [f"{'trial':<28} {'load':>5} {'goodput req/s [95% CI]':>24} {'in SLO':>7} {'vs defaults [95% CI]':>28} "
           f"{'verdict':<13} {'$/M tok':>8}"]
    for r in ranking.rows:
        g = r.goodput
        ci = f"{g.value:.2f} [{g.lo:.2f}, {g.hi:.2f}]" if g.has_ci else f"{g.value:.2f}"
        usd = f"{r.usd_per_m.value:.3f}" if r.usd_per_m is not None else "-"
        out.append(f"{r.trial:<28} {r.load:>5} {ci:>24} {100 * r.share.value:>6.1f}% "
                   f"{rank.diff_text(r.vs_defaults):>28} {r.verdict:<13} {usd:>8}")
    out.append(f"winner: {ranking.winner or '-'} — {ranking.reason}")
    if cut:
        out.append(f"cut by the budget: {', '.join(cut)}")
    return out


def budget_line(spent_s: float, budget_s: float) -> str:
    """'took 12m54s of its 15m00s budget (86%)', or '… over its … budget by 1m10s'."""
    share = f"{100 * spent_s / budget_s:.0f}%" if budget_s > 0 else "-"
    if spent_s <= budget_s:
        return f"took {fmt_s(spent_s)} of its {fmt_s(budget_s)} budget ({share})"
    return f"took {fmt_s(spent_s)}, over its {fmt_s(budget_s)} budget by {fmt_s(spent_s - budget_s)} ({share})"


def time_left(budget_s: float, started: float, spent_before_s: float) -> Callable[[], float]:
    """Seconds of the budget left now: a fresh run counts its wall clock; a resumed one also what the model says
    its earlier stage took (spent_before_s)."""
    return lambda: budget_s - spent_before_s - (time.monotonic() - started)
