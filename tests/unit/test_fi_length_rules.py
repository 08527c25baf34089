"""The split-KV benchmark's lengths at their edges: leftover tokens go to the largest remainders, a batch of one
request or of exactly one token each is allowed, lognormal is sigma 1, and split-KV's switches are named only where
plan() has them."""
from __future__ import annotations

import math
import random

import pytest

from llmhost.fi import lengths, split_plan


def test_leftover_tokens_go_to_the_largest_remainders_first():
    # 1 token each, then 7 shared 0.55 / 0.30 / 0.15: 3.85, 2.10, 1.05 -> 3, 2, 1 and the one left to the 0.85
    assert lengths._scale([0.55, 0.30, 0.15], 10) == [5, 3, 2]
    # 6 shared 0.48 / 0.32 / 0.20: 2.88, 1.92, 1.2 -> 2, 1, 1 and the two left to 0.92 and 0.88
    assert lengths._scale([0.48, 0.32, 0.20], 9) == [4, 3, 2]


def test_exactly_one_token_per_request_is_enough_and_one_fewer_is_not():
    assert lengths._scale([1.0, 5.0, 9.0], 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="2 tokens cannot give 3 requests at least one token each"):
        lengths._scale([1.0, 5.0, 9.0], 2)


def test_a_batch_of_one_holds_every_token_whatever_the_shape():
    for name in lengths.DISTRIBUTIONS:
        assert lengths.make_lengths(name, 1, 4096) == [4096]


def test_lognormal_weights_are_sigma_one_around_a_median_of_one():
    got = lengths.lognormal(5, random.Random(3))
    rng = random.Random(3)
    assert got == [math.exp(rng.normalvariate(0.0, 1.0)) for _ in range(5)]


def test_bad_shapes_and_batches_are_one_line_errors_naming_the_choices():
    with pytest.raises(ValueError, match="unknown distribution 'pareto' \\(choose from uniform, one-long, tiered, "
                                         "lognormal, zipf\\)"):
        lengths.make_lengths("pareto", 4, 100)
    with pytest.raises(ValueError, match="batch must be >= 1, got 0"):
        lengths.make_lengths("uniform", 0, 100)


def test_split_kv_switches_are_named_only_where_plan_takes_them():
    both = split_plan.split_control({"disable_split_kv", "fixed_split_size", "indptr"})
    assert (both["off"], both["forced"]) == ("disable_split_kv", "fixed_split_size")
    assert "forced = plan(fixed_split_size=N pages)" in both["note"]
    neither = split_plan.split_control({"indptr"})
    assert (neither["off"], neither["forced"]) == (None, None)
