"""Which trials of a tune stage fit its time budget, priced by the benchmark's cost model (llmhost.bench.costs).

    fit(trials, rows, repeats, model, budget_s)  -> StagePlan: .trials, .cut, .points, .estimate_s

Every trial costs one server boot plus its points (each load row x repeats). Trials are taken in the order given
(the defaults first, then lever priority) while the total still fits; a trial that does not fit is cut and named,
never shortened, so every trial that runs has the same repeats as the defaults it is compared with.
COARSE_SHARE of a run's budget is for the coarse stage; the refine stage gets what the coarse one left.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmhost.bench import points
from llmhost.bench.costs import CostModel
from llmhost.bench.records import Point
from llmhost.tune.space import Trial

DEFAULT_REPEATS = 3  # paired repeats per trial point: t(0.975, 2) = 4.3 makes 3 the fewest worth quoting
# A trial's points are the sweep's (two warm-up and four steady waves: 384 agent requests at c=64) unless
# --duration-s lengthens them. A longer window buys little: on the H200 the spread of agent c=64's throughput came
# from each seed's prompts (half-window sd 3.2-4.6%, whole windows 3.8%), so paired repeats narrow a CI, not length.
DEFAULT_DURATION_S: float | None = None
DEFAULT_CONCURRENCY = 64  # the article's headline load when the user gives no --concurrency/--rates
COARSE_SHARE = 0.7  # of the budget for the coarse stage; the rest (and whatever coarse left) refines


@dataclasses.dataclass(frozen=True, slots=True)
class StagePlan:
    trials: list[Trial]
    cut: list[Trial]  # did not fit the budget
    points: list[Point]
    estimate_s: float
    budget_s: float


def trial_points(trial: Trial, rows: Sequence[points.Row], repeats: int) -> list[Point]:
    """Repeat by repeat, every load row (repeat k has the same seed on every trial: paired)."""
    return [points.make_point(trial.name, *row, rep) for rep in range(1, repeats + 1) for row in rows]


def trial_s(trial: Trial, rows: Sequence[points.Row], repeats: int, model: CostModel) -> float:
    priced = model.with_arms([trial.arm(0)])  # by the trial's flags: the defaults' are the baseline's
    return priced.boot_s(False) + sum(map(priced.point_s, trial_points(trial, rows, repeats)))


def fit(trials: Sequence[Trial], rows: Sequence[points.Row], repeats: int, model: CostModel,
        budget_s: float) -> StagePlan:
    """The trials that fit budget_s, in order; the rest cut (a coarse stage whose defaults do not fit is refused
    by the caller: without them nothing can be compared)."""
    taken: list[Trial] = []
    cut: list[Trial] = []
    spent_s = 0.0
    for trial in trials:
        cost_s = trial_s(trial, rows, repeats, model)
        if spent_s + cost_s <= budget_s:
            taken.append(trial)
            spent_s += cost_s
        else:
            cut.append(trial)
    pts = [p for t in taken for p in trial_points(t, rows, repeats)]
    return StagePlan(taken, cut, pts, spent_s, budget_s)
