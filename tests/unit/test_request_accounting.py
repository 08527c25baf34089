"""How many requests a point sends and in which order a boot runs its points, by the rules points.py documents:
a Poisson point sends 15 s of arrivals (at least 64), and a --resume runs the points left in their original order."""
from __future__ import annotations

import pytest

from llmhost.bench import arms, points
from llmhost.bench.workloads import REGISTRY as WORKLOADS


@pytest.mark.parametrize("rate", [4.5, 7.5, 10.5, 12.25])
def test_a_fractional_rate_sends_fifteen_seconds_of_arrivals(rate):
    sent = points.default_prompts("chat", "qps", rate)
    assert sent / rate >= 15 and (sent - 1) / rate < 15


def test_whole_rates_keep_their_sizes():
    assert [points.default_prompts("chat", "qps", r) for r in (2.0, 4.0, 8.0, 16.0, 32.0)] == [64, 64, 120, 240, 480]


def test_a_rate_given_by_the_user_is_sized_for_fifteen_seconds():
    (row,) = points.with_loads((("chat", "qps", None, 4.0, 64),), points.Loads(rates=(7.5,)))
    assert row[3] == 7.5 and row[4] == 113


def _boot() -> list[points.Point]:
    return points.build_plan(list(arms.REGISTRY.values())[:1], list(WORKLOADS), False, 2)


@pytest.mark.parametrize("finished", [1, 3, 10])
def test_a_resume_runs_the_points_left_in_the_order_the_boot_had(finished):
    full = points.boot_order(_boot(), 7)
    done = {p.point_id for p in full[:finished]}
    left = points.boot_order([p for p in _boot() if p.point_id not in done], 7)
    assert left == full[finished:]


def test_a_resume_after_scattered_failures_keeps_the_boot_order_of_those_it_retries():
    full = points.boot_order(_boot(), 3)
    retried = [p for i, p in enumerate(_boot()) if i % 3 == 0]
    assert points.boot_order(retried, 3) == [p for p in full if p in retried]


def test_the_boot_order_is_still_a_shuffle_that_the_seed_decides():
    plan = _boot()
    once = points.boot_order(plan, 1)
    assert once == points.boot_order(list(reversed(plan)), 1) and sorted(once, key=plan.index) == plan
    assert once != plan and points.boot_order(plan, 2) != once
