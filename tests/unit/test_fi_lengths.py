"""Length distributions for the split-KV benchmark: equal totals, shapes, seeds (pure, CPU)."""
from __future__ import annotations

import pytest

from llmhost.fi import lengths


@pytest.mark.parametrize("distribution", sorted(lengths.DISTRIBUTIONS))
@pytest.mark.parametrize("batch", [1, 4, 16, 64, 128])
def test_every_distribution_keeps_the_total_and_gives_each_request_a_token(distribution, batch):
    got = lengths.make_lengths(distribution, batch, 65536, seed=7)
    assert len(got) == batch and sum(got) == 65536 and min(got) >= 1


def test_uniform_is_flat_and_one_long_holds_half():
    assert lengths.make_lengths("uniform", 16, 65536) == [4096] * 16
    one_long = lengths.make_lengths("one-long", 16, 65536)
    assert max(one_long) == pytest.approx(65536 / 2, abs=16)
    assert lengths.imbalance(one_long) == pytest.approx(8.0, rel=0.01)


def test_tiered_has_three_levels_at_1_4_16():
    got = sorted(set(lengths.make_lengths("tiered", 30, 210_000)))
    assert len(got) == 3
    assert got[1] / got[0] == pytest.approx(4, rel=0.01) and got[2] / got[0] == pytest.approx(16, rel=0.01)


def test_heavy_tails_are_less_balanced_than_uniform():
    for name in ("lognormal", "zipf", "one-long", "tiered"):
        assert lengths.imbalance(lengths.make_lengths(name, 64, 65536, seed=1)) > 2.0, name
    assert lengths.imbalance(lengths.make_lengths("uniform", 64, 65536)) == 1.0


def test_zipf_lengths_follow_one_over_rank():
    got = sorted(lengths.make_lengths("zipf", 8, 8_000_000), reverse=True)
    assert [round(got[0] / x) for x in got] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_seed_decides_the_draw():
    assert lengths.make_lengths("lognormal", 32, 50_000, 1) == lengths.make_lengths("lognormal", 32, 50_000, 1)
    assert lengths.make_lengths("lognormal", 32, 50_000, 1) != lengths.make_lengths("lognormal", 32, 50_000, 2)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="bimodal"):
        lengths.make_lengths("bimodal", 4, 100)
    with pytest.raises(ValueError, match="at least one token"):
        lengths.make_lengths("uniform", 8, 4)
