"""How far throughput moves from repeat to repeat, and the repeats a CI within ±3% needs for it."""
import math

import pytest

from llmhost import repeats, stats
from llmhost.bench import points, spread
from tests.unit.test_budget import done

# b20v2 on the H200 (SGLang 0.5.17): steady-window output tok/s of seeds 1-6
AGENT_C64 = [5765.0, 5572.0, 5706.0, 5206.0, 5465.0, 5380.0]
CHAT_C64 = [6207.0, 6222.0, 6200.0]


def test_the_h200_spreads_call_for_9_repeats_of_agent_c64_and_3_of_chat_c64():
    agent = spread.spread_pct(dict(enumerate(AGENT_C64, 1)))
    chat = spread.spread_pct(dict(enumerate(CHAT_C64, 1)))
    assert agent == pytest.approx(3.79, abs=0.01) and chat == pytest.approx(0.18, abs=0.01)
    assert spread.repeats_needed(agent, 3.0, 3, 10) == 9
    assert spread.repeats_needed(chat, 3.0, 3, 10) == 3
    # what 6 of them gave, and what 8 would: above the target, like the run's ±4.0%
    assert repeats.half_width_pct(repeats.across_repeats(AGENT_C64)) == pytest.approx(3.97, abs=0.01)


@pytest.mark.parametrize("pct, expected", [(None, 3), (math.nan, 3), (0.0, 3), (2.2, 5), (3.79, 9), (50.0, 10),
                                          (4.3, 10)])  # 11 would do at 4.3%: never more than `most`
def test_the_repeats_needed_are_the_fewest_whose_t_interval_is_within_the_target(pct, expected):
    n = spread.repeats_needed(pct, 3.0, 3, 10)
    assert n == expected
    if pct and not math.isnan(pct) and n < 10:  # the fewest: one less would be too wide
        half = lambda k: stats.t975(k - 1) * pct / math.sqrt(k)  # noqa: E731
        assert half(n) <= 3.0 and (n == 3 or half(n - 1) > 3.0)


def test_a_spread_needs_three_repeats_and_a_mean():
    assert math.isnan(spread.spread_pct({1: 5000.0, 2: 5100.0}))
    assert math.isnan(spread.spread_pct({1: 0.0, 2: 0.0, 3: 0.0}))
    assert spread.spread_pct({1: 90.0, 2: 100.0, 3: 110.0}) == pytest.approx(10.0)


def test_throughput_by_repeat_keeps_what_it_is_asked_to_and_the_latest_attempt_of_a_repeat():
    head = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    other = points.make_point("baseline", "agent", "concurrency", 8, None, 48, 1)
    rows = [done(head, 30.0, 900.0), done(head, 30.0, 1000.0), done(other, 10.0, 300.0),
            done(points.make_point("baseline", "agent", "concurrency", 64, None, 384, 2), 30.0, 1100.0, "failed")]
    got = spread.throughput_by_repeat(rows)
    assert got[("baseline", "agent", "concurrency", 64, None, 384)] == ({1: 1000.0}, 1)
    assert set(spread.throughput_by_repeat(rows, lambda r: r.concurrency == 8)) == {
        ("baseline", "agent", "concurrency", 8, None, 48)}


def test_a_half_width_exactly_on_the_target_meets_it():
    on_target = stats.t975(4) * 2.0 / math.sqrt(5)  # 5 repeats at a 2% spread: exactly this half-width
    assert spread.repeats_needed(2.0, on_target, 3, 10) == 5

