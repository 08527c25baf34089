"""The --budget-min plan and its adaptive repeats on worked examples priced by a stand-in cost model (round
seconds): shared boots, the baseline's sweep first, an arm whose headline does not fit is dropped whole, the reserve
is the larger of its two parts and counts headline points only, and a repeat costing exactly the spare time fits."""
from __future__ import annotations

import pytest

from llmhost.bench import arms as arms_mod, budget, points
from llmhost.bench.records import PointRecord, PointSummary

BASELINE = arms_mod.REGISTRY["baseline"]
PAGE16 = arms_mod.Arm("p16a", "p16a", "#000000", ("--page-size", "16"), "user arm")
PAGE16_TOO = arms_mod.Arm("p16b", "p16b", "#000000", ("--page-size", "16"), "user arm")  # the same launch flags
OTHER = arms_mod.Arm("u1", "u1", "#000000", ("--schedule-policy", "lpm"), "user arm")
CHAT_16_64 = points.Loads(concurrency=(16, 64), patterns=("concurrency",))  # per arm: chat c=64 (headline), c=16


class StandInModel:
    """A headline point (c=64) costs `head_s`, any other point `point_s`, a boot `boot_s`; every point's spread is
    `spread_pct` (None: never repeated)."""

    def __init__(self, head_s: float = 100.0, point_s: float = 10.0, boot_s: float = 50.0,
                 spread_pct: float | None = None):
        self.head_s, self.other_s, self.boot, self.spread_pct = head_s, point_s, boot_s, spread_pct

    def point_s(self, p: points.Point) -> float:
        return self.head_s if p.concurrency == 64 else self.other_s

    def boot_s(self, quick: bool) -> float:
        return self.boot

    def spread(self, p: points.Point) -> float | None:
        return self.spread_pct


def ids(pts: list[points.Point]) -> list[str]:
    return [p.point_id for p in pts]


def test_arms_sharing_launch_flags_pay_one_boot_in_the_plans_estimate():
    model = StandInModel(head_s=10.0, point_s=10.0, boot_s=100.0)
    planned = budget.plan([BASELINE, PAGE16, PAGE16_TOO], ["chat"], CHAT_16_64, model, 10_000.0)
    # 3 arms x (3 headline repeats + 1 sweep point) = 12 points of 10 s; 2 boots (baseline, the page-16 pair);
    # the run's fixed 30 s
    assert len(planned.points) == 12 and not planned.left_out
    assert planned.estimate_s == pytest.approx(30.0 + 12 * 10.0 + 2 * 100.0)


def test_the_baselines_sweep_comes_before_another_arms_whatever_the_arm_order():
    model = StandInModel(head_s=10.0, point_s=10.0, boot_s=100.0)
    # headlines: 2 x (3 x 10 s + a 100 s boot) + 30 s fixed = 290 s; 15% of 360 s is kept: 306 s for the sweep,
    # room for one 10 s point (300 s), not two (310 s)
    planned = budget.plan([PAGE16, BASELINE], ["chat"], CHAT_16_64, model, 360.0)
    assert ids(planned.points)[6:] == ["baseline.chat.concurrency.c16.r1"]
    assert ids(planned.left_out) == ["p16a.chat.concurrency.c16.r1"]
    assert planned.estimate_s == pytest.approx(300.0)


def test_an_arm_whose_headline_points_do_not_fit_is_dropped_with_its_sweep():
    """The baseline's headline costs 3 x 100 s + a 50 s boot (+ 30 s fixed: 380 s of 700 s); the other arm's would
    take 350 s more and does not fit. Its c=16 point alone (10 s + its own 50 s boot) would fit under the 105 s
    reserve, but an arm without its headline CI is not planned at all."""
    planned = budget.plan([BASELINE, OTHER], ["chat"], CHAT_16_64, StandInModel(), 700.0)
    assert ids(planned.points) == [f"baseline.chat.concurrency.c64.r{r}" for r in (1, 2, 3)] + \
        ["baseline.chat.concurrency.c16.r1"]
    assert ids(planned.left_out) == [f"u1.chat.concurrency.c64.r{r}" for r in (1, 2, 3)] + \
        ["u1.chat.concurrency.c16.r1"]
    assert planned.estimate_s == pytest.approx(390.0) and planned.reserve_s == pytest.approx(310.0)


def test_a_plan_that_fills_the_budget_exactly_fits():
    # the baseline's headline: 3 x 100 s + a 50 s boot + the run's fixed 30 s = 380 s, its c=16 point 10 s more
    planned = budget.plan([BASELINE], ["chat"], CHAT_16_64, StandInModel(), 380.0)
    assert ids(planned.points) == [f"baseline.chat.concurrency.c64.r{r}" for r in (1, 2, 3)]
    assert planned.estimate_s == pytest.approx(380.0) and planned.reserve_s == 0.0


def test_a_budget_below_the_runs_fixed_part_plans_nothing_and_keeps_no_negative_reserve():
    planned = budget.plan([BASELINE], ["chat"], CHAT_16_64, StandInModel(), 20.0)
    assert planned.points == [] and len(planned.left_out) == 4
    assert planned.estimate_s == pytest.approx(30.0) and planned.reserve_s == 0.0


def heads(arm: str = "x") -> list[points.Point]:
    return [points.make_point(arm, "agent", "concurrency", 64, None, 384, r) for r in (1, 2, 3)]


SWEEP = points.make_point("x", "chat", "concurrency", 16, None, 96, 1)


def test_the_reserve_is_the_larger_of_its_share_of_the_budget_and_what_the_spread_calls_for():
    # a spread of 2.2% needs 5 repeats (t(0.975, 4) x 2.2 / sqrt(5) = 2.73% <= 3%; with 4, 3.5%): 2 more of 50 s
    model = StandInModel(head_s=50.0, spread_pct=2.2)
    assert budget.expected_extra_s(heads(), model) == pytest.approx(100.0)
    assert budget.kept_s(SWEEP, heads(), model, 1000.0) == pytest.approx(150.0)  # 15% of 1,000 s > 100 s
    assert budget.kept_s(SWEEP, heads(), model, 400.0) == pytest.approx(100.0)  # 100 s > 15% of 400 s


def test_only_headline_points_call_for_reserved_repeats():
    model = StandInModel(head_s=50.0, point_s=50.0, spread_pct=2.2)  # every point would call for 2 more repeats
    assert budget.kept_s(SWEEP, [SWEEP], model, 400.0) == pytest.approx(60.0)  # only the 15% share
    later = [points.make_point("y", "chat", "concurrency", 16, None, 96, r) for r in (1, 2, 3)]
    assert budget.boot_share_s(300.0, later, 1, model) == pytest.approx(300.0)  # the later boot needs none


def summary(throughput: float) -> PointSummary:
    return PointSummary(duration_s=10.0, completed=64, failed=0, request_throughput=6.4, input_throughput=1.0,
                        output_throughput=throughput, total_throughput=throughput, offered_rate=None,
                        achieved_rate=6.4, client_bound=False)


def chat_head(repeat: int, throughput: float, status: str = "ok") -> PointRecord:
    p = points.make_point("baseline", "chat", "concurrency", 64, None, 256, repeat)
    return PointRecord.of(p, attempt=1, status=status, error=None, started_at=0.0, ended_at=40.0,
                          cache_flushed=True, summary=summary(throughput), requests_file="requests/x.jsonl")


WIDE = [chat_head(1, 900.0), chat_head(2, 1100.0), chat_head(3, 1000.0)]  # CI half-width ~25%


def test_an_adaptive_repeat_costing_exactly_the_spare_time_is_taken():
    model = StandInModel(head_s=40.0)
    assert ids(budget.extra_repeats(WIDE, {"baseline"}, model, 40.0)) == ["baseline.chat.concurrency.c64.r4"]
    assert budget.extra_repeats(WIDE, {"baseline"}, model, 39.9) == []
    todo = [points.make_point("baseline", "chat", "concurrency", 64, None, 256, r) for r in (1, 2, 3)]
    assert ids(budget.likely_extra(todo, model, 40.0)) == ["baseline.chat.concurrency.c64.r4"]
    assert budget.likely_extra(todo, model, 39.9) == []


def test_an_adaptive_repeat_is_numbered_after_every_recorded_repeat_even_a_failed_one():
    # repeats 1, 3 and 4 ok (3 ok repeats, a wide CI), repeat 2 failed: the next one is repeat 5, not a second 4
    done = [chat_head(1, 900.0), chat_head(2, 0.0, status="failed"), chat_head(3, 1100.0), chat_head(4, 1000.0)]
    assert ids(budget.extra_repeats(done, {"baseline"}, StandInModel(head_s=40.0), 1000.0)) == \
        ["baseline.chat.concurrency.c64.r5"]
