"""The tuner's search space at its edges (llmhost.tune.space): a trial's arm whole (the defaults' blue, each trial
coloured by its place, its description naming its stage and flags), coarse trials staged as such, a two-value
numeric lever probed in order, numeric values compared as numbers, a midpoint only for a numeric lever's coarse
value, and a tie between two values of one lever kept at the first."""
from __future__ import annotations

import math

from llmhost.bench.arms import Arm
from llmhost.tune import space
from llmhost.tune.space import Lever, Trial

MRR = Lever("--max-running-requests", "mrr", ("64", "128"), "decode batch cap")
CPS = Lever("--chunked-prefill-size", "cps", ("2048", "4096", "16384"), "chunk")
MIX = Lever("--enable-mixed-chunk", "mix", (space.SWITCH,), "mixed chunks")


def test_a_trials_arm_is_whole_and_the_defaults_arm_is_the_baseline():
    trial = space.trial_of([(CPS.flag, "4096"), (MIX.flag, space.SWITCH)], [CPS, MIX], "refine")
    assert trial.arm(10) == Arm("cps4096-mix", "cps4096-mix", space._COLORS[10 % len(space._COLORS)],
                                ("--chunked-prefill-size", "4096", "--enable-mixed-chunk"),
                                "Tuner trial (refine): defaults + --chunked-prefill-size 4096 --enable-mixed-chunk")
    assert Trial(space.DEFAULTS_NAME, (), "coarse").arm(3) == Arm(
        "baseline", "Defaults", "#1f77b4", (), "The current defaults (config.env + config.local.env).", True)


def test_coarse_trials_are_staged_coarse_and_a_two_value_lever_is_probed_in_order():
    trials = space.coarse_trials([MRR, MIX])
    assert [(t.name, t.stage) for t in trials] == [("baseline", "coarse"), ("mrr64", "coarse"), ("mix", "coarse"),
                                                   ("mrr128", "coarse")]
    assert space.probe_order(MRR) == ("64", "128") and space.coarse_trials([]) == [Trial("baseline", (), "coarse")]


def test_numeric_values_are_compared_as_numbers_and_other_values_as_text():
    assert space._same_value("0064", "64") and not space._same_value("64", "sixty-four")
    assert not space._same_value("64", "") and space._same_value("lpm", "lpm")
    kept, dropped = space.settled([MRR], {MRR.flag: "064"}, {})
    assert kept[0].values == ("128",) and dropped == ["--max-running-requests 64 (the defaults already launch with it)"]


def test_a_midpoint_only_for_a_numeric_levers_coarse_value():
    assert space.midpoints(MIX, space.SWITCH) == [] and space.midpoints(CPS, "8192") == []
    assert space.midpoints(CPS, "4096") == ["2896", "8192"]
    assert space.midpoints(Lever("--x", "x", ("1", "4"), ""), "1") == ["2"]  # small values: no rounding to 8


def test_a_tie_between_two_values_of_one_lever_keeps_the_first_tried():
    tried = space.coarse_trials([CPS])  # probed 2048, 16384, then 4096
    scores = {"baseline": 10.0, "cps2048": 12.0, "cps16384": 12.0, "cps4096": math.nan}
    assert [(t.name, t.stage) for t in space.refine_trials([CPS], scores, tried)] == [("cps2896", "refine")]


def test_nothing_is_refined_without_a_score_for_the_defaults():
    tried = space.coarse_trials([CPS])
    assert space.refine_trials([CPS], {"cps2048": 12.0}, tried) == []
