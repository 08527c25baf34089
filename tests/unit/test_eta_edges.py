"""The ETA at its edges (llmhost.bench.eta), with the stand-in clock and cost model of test_eta_rules: an ETA that
ran out while work is left re-fits instead of staying at zero, a point of under a second or priced under a second
still teaches its ratio (and one priced at zero none), added work joins with its own kind's ratio and its boots on
top of those planned, and a countdown read at a given time."""
from __future__ import annotations

import pytest

from llmhost.bench.eta import Eta
from tests.unit.test_eta_rules import Clock, StandInModel, pt


def test_an_eta_that_ran_out_with_work_left_re_fits_instead_of_holding_zero():
    clock = Clock()
    plan = [pt(repeat=r) for r in (1, 2, 3)]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=clock)
    clock.now = 100.0
    e.point_done(plan[0], 100.0)  # free: 200 s left
    clock.now = 400.0  # the second point took 300 s: the countdown said 0 for the last 100 s
    assert e.seconds_left() == 0.0
    e.point_done(plan[1], 300.0)
    assert e.seconds_left() == pytest.approx(100.0 * (1 + 1 + 3) / 3)  # the damped ratio, not held at 0


def test_a_countdown_with_less_than_a_second_left_is_still_held():
    clock = Clock()
    plan = [pt(repeat=r) for r in (1, 2, 3)]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=clock)
    clock.now = 100.0
    e.point_done(plan[0], 100.0)
    clock.now = 299.5  # 0.5 s left on the countdown
    e.point_done(plan[1], 199.5)
    assert e.seconds_left() == pytest.approx(0.5 * 1.25)


@pytest.mark.parametrize(("priced_s", "wall_s", "ratio"), [(100.0, 0.5, (1 + 0.005) / 2), (0.5, 1.0, (1 + 2) / 2)])
def test_a_point_of_under_a_second_teaches_its_ratio(priced_s, wall_s, ratio):
    e = Eta(StandInModel(priced_s), [pt(), pt(repeat=2)], boots=0, quick=False, clock=Clock())
    e.point_done(pt(), wall_s)
    assert e.ratio(("chat", "concurrency")) == pytest.approx(ratio)


def test_a_point_the_model_prices_at_zero_teaches_nothing_and_does_not_divide_by_zero():
    e = Eta(StandInModel(0.0), [pt(), pt(repeat=2)], boots=0, quick=False, clock=Clock())
    e.point_done(pt(), 30.0)
    assert e.ratios == {}


def test_added_work_is_priced_by_its_own_kinds_ratio_and_its_boots_join_those_planned():
    clock = Clock()
    plan = [pt(), pt(workload="agent"), pt(workload="agent", repeat=2)]
    e = Eta(StandInModel(), plan, boots=2, quick=False, clock=clock)
    e.point_done(plan[0], 300.0)  # chat at 3x: (1 + 3) / 2 = 2
    e.point_done(plan[1], 100.0)  # agent at 1x: 1; every point's mean (1 + 3 + 1) / 3
    before = e.seconds_left()
    e.add([pt(repeat=2)], boots=1)  # one chat point and one boot
    assert e.boots_left == 3
    boot = 80.0 * (1 + 3 + 1) / 3  # no boot seen yet: the model's boot times every point's correction
    assert e.added_s == pytest.approx(2.0 * 100.0 + boot)
    assert e.seconds_left() == pytest.approx(before + 2.0 * 100.0 + boot)


def test_the_countdown_is_read_at_the_time_given():
    clock = Clock()
    e = Eta(StandInModel(), [pt(), pt(repeat=2)], boots=0, quick=False, clock=clock)
    clock.now = 50.0
    assert e.seconds_left(now=10.0) == pytest.approx(190.0) and e.seconds_left() == pytest.approx(150.0)
