"""The ETA on worked examples, with a stand-in clock and a stand-in cost model (a point 100 s, a boot 80 s, 60 s
quick): the per-kind correction, the ±25% hold both ways, free re-fits only at a boot before any point and at an
arm's first point, boots and points counted once, never below zero, and the clock format."""
from __future__ import annotations

import pytest

from llmhost.bench import points
from llmhost.bench.eta import Eta, fmt_s


class Clock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class StandInModel:
    def __init__(self, point_s: float = 100.0):
        self.each_s = point_s

    def point_s(self, p: points.Point) -> float:
        return self.each_s

    def boot_s(self, quick: bool) -> float:
        return 60.0 if quick else 80.0


def pt(arm: str = "baseline", workload: str = "chat", repeat: int = 1) -> points.Point:
    return points.make_point(arm, workload, "concurrency", 16, None, 64, repeat)


def test_each_kind_is_corrected_by_its_own_damped_ratio_and_an_unseen_kind_by_all_points():
    left = [pt(repeat=2), pt(workload="agent", repeat=2), pt(workload="long")]
    done = [pt(), pt(workload="agent")]
    e = Eta(StandInModel(), done + left, boots=0, quick=False, clock=Clock())
    e.point_done(done[0], 300.0)  # chat at 3x: (1 + 3) / 2 = 2
    e.point_done(done[1], 50.0)  # agent at 0.5x: (1 + 0.5) / 2 = 0.75
    assert e.ratio(("chat", "concurrency")) == pytest.approx(2.0)
    assert e.ratio(("agent", "concurrency")) == pytest.approx(0.75)
    assert e.ratio(("long", "concurrency")) == pytest.approx((1 + 3 + 0.5) / 3)  # never seen: every point's
    assert e.refit() == pytest.approx(2.0 * 100 + 0.75 * 100 + 1.5 * 100)


def held_after_second_point(second_wall_s: float) -> float:
    """Three 100 s points of one arm: the first takes 100 s (a free re-fit: 200 s left at t=100); the second
    finishes second_wall_s later."""
    clock = Clock()
    plan = [pt(repeat=r) for r in (1, 2, 3)]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=clock)
    clock.now = 100.0
    e.point_done(plan[0], 100.0)
    assert e.seconds_left() == pytest.approx(200.0)
    clock.now += second_wall_s
    e.point_done(plan[1], second_wall_s)
    return e.seconds_left()


def test_a_fast_point_lowers_the_eta_by_at_most_a_quarter():
    # ratio (1 + 1 + 0.01) / 3 = 0.67: 67 s re-fitted, but 199 s were left counted down: held at 0.75 x 199
    assert held_after_second_point(1.0) == pytest.approx(0.75 * 199.0)


def test_a_slow_point_raises_the_eta_by_at_most_a_quarter():
    # ratio (1 + 1 + 1.5) / 3 = 1.17: 117 s re-fitted, but 50 s were left counted down: held at 1.25 x 50
    assert held_after_second_point(150.0) == pytest.approx(1.25 * 50.0)


def test_a_boot_before_any_point_re_fits_the_eta_freely():
    clock = Clock()
    e = Eta(StandInModel(point_s=1000.0), [pt(), pt(repeat=2)], boots=2, quick=False, clock=clock)
    assert e.seconds_left() == pytest.approx(2000.0 + 2 * 80.0)
    clock.now = 400.0
    e.boot_done(400.0)
    # a boot left is (80 + 400) / 2 = 240 s: 2,240 s, though the counted-down 1,760 s x 1.25 is 2,200 s
    assert e.seconds_left() == pytest.approx(2000.0 + 240.0)


def test_a_boot_after_an_arms_first_point_is_held_within_a_quarter():
    clock = Clock()
    plan = [pt("a"), pt("b")]
    e = Eta(StandInModel(point_s=1000.0), plan, boots=2, quick=False, clock=clock)
    clock.now = 80.0
    e.boot_done(80.0)  # (80 + 80) / 2 = 80 s a boot: 2,080 s left
    clock.now = 1080.0
    e.point_done(plan[0], 1000.0)  # a's first point: free, 1,000 + 80 = 1,080 s left
    assert e.seconds_left() == pytest.approx(1080.0)
    clock.now = 1880.0
    e.boot_done(800.0)  # b's boot took 800 s: 1,000 s of work re-fitted, 280 s counted down, held at 1.25 x 280
    assert e.seconds_left() == pytest.approx(350.0)


def test_a_point_reported_again_or_never_planned_changes_nothing():
    clock = Clock()
    plan = [pt(), pt(repeat=2)]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=clock)
    clock.now = 100.0
    e.point_done(plan[0], 100.0)
    e.point_done(plan[0], 500.0)  # the same point again
    e.point_done(pt("other"), 500.0)  # not in the plan
    assert e.ratio(None) == pytest.approx(1.0) and e.anchor == "baseline" and e.seconds_left() == pytest.approx(100.0)


def test_a_point_without_a_wall_time_teaches_no_ratio():
    clock = Clock()
    plan = [pt(), pt(repeat=2)]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=clock)
    e.point_done(plan[0], 0.0)  # failed at once
    assert e.ratio(None) == pytest.approx(1.0) and e.seconds_left() == pytest.approx(100.0)


def test_the_anchor_stays_with_the_arm_whose_first_point_came_last():
    """Arms sharing a boot run their points shuffled together: a's second point is not a's first."""
    plan = [pt("a"), pt("b"), pt("a", repeat=2), pt("c")]
    e = Eta(StandInModel(), plan, boots=0, quick=False, clock=Clock())
    e.point_done(plan[0], 100.0)
    e.point_done(plan[1], 100.0)
    e.point_done(plan[2], 100.0)
    assert e.anchor == "b"


def test_work_added_is_each_new_point_once():
    e = Eta(StandInModel(), [pt(), pt(repeat=2)], boots=0, quick=False, clock=Clock())
    e.add([pt(repeat=2), pt(repeat=3)])  # repeat 2 is already planned
    assert e.added_s == pytest.approx(100.0) and e.seconds_left() == pytest.approx(300.0)


def test_quick_boots_are_priced_as_quick():
    assert Eta(StandInModel(), [], boots=2, quick=True, clock=Clock()).seconds_left() == pytest.approx(120.0)
    assert Eta(StandInModel(), [], boots=2, quick=False, clock=Clock()).seconds_left() == pytest.approx(160.0)


def test_a_boot_beyond_the_plan_leaves_no_negative_boots():
    clock = Clock()
    e = Eta(StandInModel(), [pt()], boots=1, quick=False, clock=clock)
    e.boot_done(80.0)
    e.boot_done(80.0)  # a restart the plan did not count
    assert e.boots_left == 0 and e.refit() == pytest.approx(100.0)


def test_an_overrun_eta_says_zero_not_a_negative_time():
    clock = Clock()
    e = Eta(StandInModel(), [pt()], boots=0, quick=False, clock=clock)
    clock.now = 250.0
    assert e.seconds_left() == 0.0


@pytest.mark.parametrize(("seconds", "shown"), [(0.0, "0m00s"), (-3.0, "0m00s"), (59.9, "0m59s"),
                                                (3599.0, "59m59s"), (3600.0, "1h00m"), (5430.0, "1h30m")])
def test_the_clock_format_turns_to_hours_at_one_hour(seconds, shown):
    assert fmt_s(seconds) == shown
