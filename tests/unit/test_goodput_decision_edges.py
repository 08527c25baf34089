"""When a goodput interval decides a load's SLO: a bound exactly on slo.pct is on the meeting side (a share equal to
slo.pct meets it), so a lower bound there decides 'met' and an upper bound there leaves it open."""
from __future__ import annotations

from llmhost import stats

SLO = stats.Slo(ttft_ms=100.0, itl_ms=10.0, pct=75.0)


def test_a_lower_bound_exactly_on_the_target_decides_the_load_meets_it() -> None:
    ci = stats.Interval(0.9, 0.75, 1.0, 40)
    assert stats.slo_decided(ci, SLO) and stats.meets_slo(ci.lo, SLO)


def test_an_upper_bound_exactly_on_the_target_leaves_it_undecided() -> None:
    """The share could be 75%, which meets a 75% target: not decided either way."""
    ci = stats.Interval(0.6, 0.5, 0.75, 40)
    assert not stats.slo_decided(ci, SLO) and stats.meets_slo(ci.hi, SLO)


def test_an_upper_bound_just_below_the_target_decides_the_load_misses_it() -> None:
    assert stats.slo_decided(stats.Interval(0.6, 0.5, 0.7499, 40), SLO)
    assert not stats.slo_decided(stats.Interval(0.7, 0.7499, 0.8, 40), SLO)  # straddles: lo below, hi above
