"""The tuner's search and budget rules on worked examples: midpoints rounded to the nearest multiple of 8, the
refine stage built on each lever's best-scoring value, a trial priced as one boot plus every point of every repeat,
and the budget fit (an exact fit runs; a trial over the budget is cut while a later one that fits still runs)."""
from __future__ import annotations

import pytest

from llmhost.bench.costs import CostModel
from llmhost.tune import plan, space

MRR = ("--max-running-requests", "64")
C8 = ("chat", "concurrency", 8, None, 40)  # chat is not primed: a point costs the load generator's 4.5 s + requests
C16 = ("chat", "concurrency", 16, None, 40)
# 0.5 s a request on the defaults' flags at both loads, 5 s with --max-running-requests 64 at c=8; a boot 60 s
MODEL = CostModel(per_request_s={((), ("chat", "concurrency", 8, None)): 0.5,
                                 ((), ("chat", "concurrency", 16, None)): 0.5,
                                 (MRR, ("chat", "concurrency", 8, None)): 5.0}, boot_paid_s=60.0)


def _trial(name: str) -> space.Trial:
    return next(t for t in space.coarse_trials(space.SPACE) if t.name == name)


def test_midpoints_are_rounded_to_the_nearest_multiple_of_eight():
    lever = space.SPACE[0]  # --max-running-requests 64, 128, 256
    # sqrt(64 x 128) = 90.5 -> 11.3 eights -> 88; sqrt(128 x 256) = 181.0 -> 22.6 eights -> 23 x 8 = 184
    assert space.midpoints(lever, "128") == ["88", "184"]
    assert space.midpoints(lever, "256") == ["184"]


def test_refine_builds_on_each_levers_best_scoring_value_not_the_last_one_tried():
    tried = space.coarse_trials(space.SPACE)  # mrr64 is tried before mrr256
    scores = {"baseline": 1.0, "mrr64": 1.5, "mrr256": 1.2, "cps2048": 1.1}
    names = [t.name for t in space.refine_trials(space.SPACE, scores, tried)]
    # both mrr values beat the defaults; 64 scored higher: combined with cps2048, then sqrt(64 x 128) -> 88,
    # sqrt(2048 x 4096) = 2896
    assert names == ["mrr64-cps2048", "mrr88", "cps2896"]


def test_a_trial_costs_one_boot_plus_every_load_of_every_repeat():
    # 60 s boot + 3 repeats x (4.5 + 40 x 0.5 s) = 133.5 s; with a second load row 60 + 3 x 2 x 24.5 = 207 s
    assert plan.trial_s(_trial("baseline"), [C8], 3, MODEL) == pytest.approx(133.5)
    assert plan.trial_s(_trial("baseline"), [C8, C16], 3, MODEL) == pytest.approx(207.0)
    # the trial's own flags price its points: 60 + 3 x (4.5 + 40 x 5) = 673.5 s
    assert plan.trial_s(_trial("mrr64"), [C8], 3, MODEL) == pytest.approx(673.5)


def test_a_trials_points_run_repeat_by_repeat_over_every_load_row():
    pts = plan.trial_points(_trial("cps2048"), [C8, C16], 2)
    assert [p.point_id for p in pts] == ["cps2048.chat.concurrency.c8.r1", "cps2048.chat.concurrency.c16.r1",
                                         "cps2048.chat.concurrency.c8.r2", "cps2048.chat.concurrency.c16.r2"]


def test_a_trial_that_uses_up_the_budget_exactly_still_runs():
    stage = plan.fit([_trial("baseline"), _trial("cps2048")], [C8], 3, MODEL, 267.0)  # 2 x 133.5 s
    assert [t.name for t in stage.trials] == ["baseline", "cps2048"] and stage.cut == []
    assert stage.estimate_s == pytest.approx(267.0) and len(stage.points) == 6


def test_a_trial_over_the_budget_is_cut_and_a_later_one_that_fits_still_runs():
    trials = [_trial("baseline"), _trial("mrr64"), _trial("cps2048")]  # 133.5 s, 673.5 s, 133.5 s
    stage = plan.fit(trials, [C8], 3, MODEL, 300.0)
    assert [t.name for t in stage.trials] == ["baseline", "cps2048"] and [t.name for t in stage.cut] == ["mrr64"]
    assert stage.estimate_s == pytest.approx(267.0) and stage.budget_s == 300.0
