"""The tuner's ranking and search space at their edges: a load without a measured goodput, and a search space
given out of order."""
from __future__ import annotations

import math

import pytest

from llmhost.tune import rank, space
from llmhost.tune.rank import RepeatGoodput


def _reps(*values: float) -> dict[int, RepeatGoodput]:
    return {i + 1: RepeatGoodput(v, 100 * v, 10, 10, True) for i, v in enumerate(values)}


def test_a_load_without_a_measured_goodput_is_never_a_trials_best_load():
    # c16 had no steady window in any repeat (goodput nan); c64 was measured on both trials
    measured = {("baseline", "c16"): _reps(math.nan, math.nan), ("baseline", "c64"): _reps(2.0, 2.2),
                ("x", "c16"): _reps(math.nan, math.nan), ("x", "c64"): _reps(3.0, 3.1)}
    ranking = rank.rank(measured)
    rows = {r.trial: r for r in ranking.rows}
    assert rows["x"].load == "c64" and rows["baseline"].load == "c64"
    assert rows["x"].goodput.value == pytest.approx(3.05)
    # paired differences 1.0 and 0.9: mean 0.95, half-width t(1) 12.706 x 0.0707 / sqrt(2) = 0.635
    assert rows["x"].vs_defaults.delta == pytest.approx(0.95)
    assert rows["x"].vs_defaults.lo == pytest.approx(0.95 - 12.7062 * math.sqrt(0.005) / math.sqrt(2), rel=1e-4)
    assert rows["x"].verdict == "better" and ranking.winner == "x"
    # the same whichever load comes first
    assert rank.rank(dict(reversed(list(measured.items())))).winner == "x"


def test_a_numeric_lever_from_the_environment_is_probed_extremes_first_whatever_order_it_is_written_in():
    levers = space.space_from_env({space.SPACE_ENV: "--max-running-requests=64,8,16"})
    assert levers[0].values == ("8", "16", "64")
    assert [t.name for t in space.coarse_trials(levers)] == ["baseline", "maxrun8", "maxrun64", "maxrun16"]
    # the midpoints lie between the best value and its neighbours by size: sqrt(16 x 64) = 32, sqrt(8 x 16) -> 8
    assert space.midpoints(levers[0], "16") == ["32"]
    assert space.midpoints(levers[0], "8") == []


def test_defaults_without_a_measured_goodput_name_no_winner():
    # every repeat of the defaults lacked a steady window: nothing was compared, so nothing "beat" them or not
    ranking = rank.rank({("baseline", "c64"): _reps(math.nan, math.nan), ("x", "c64"): _reps(3.0, 3.1)})
    assert ranking.winner is None and ranking.reason == "the defaults have no measured goodput: nothing to compare with"
