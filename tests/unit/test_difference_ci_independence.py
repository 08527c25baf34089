"""The bootstrap CI of a difference resamples the two arms independently, so it cannot depend on how each arm's
values happen to be ordered: two sorted samples pair their i-th values by rank, and resampling both with the same
indices would cancel nearly all of their spread."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost import stats


def test_the_ci_of_a_difference_of_means_has_the_width_of_two_independent_samples_even_when_both_are_sorted() -> None:
    """Width +-1.96 sqrt(var_a / n_a + var_b / n_b) (= +-1.39 here), whatever the order of the values."""
    rng = np.random.default_rng(3)
    a, b = np.sort(rng.normal(100, 10, 400)), np.sort(rng.normal(100, 10, 400))
    half = 1.959964 * math.sqrt(a.var() / a.size + b.var() / b.size)
    d = stats.bootstrap_diff(a, b, "mean", seed=0)
    assert (d.hi - d.lo) / 2 == pytest.approx(half, rel=0.1)
    shuffled = stats.bootstrap_diff(rng.permutation(a), rng.permutation(b), "mean", seed=0)
    assert (shuffled.hi - shuffled.lo) == pytest.approx(d.hi - d.lo, rel=0.1)


def test_two_sorted_samples_of_one_distribution_are_within_noise_at_the_median() -> None:
    rng = np.random.default_rng(3)
    a, b = np.sort(rng.normal(100, 10, 400)), np.sort(rng.normal(100, 10, 400))
    d = stats.bootstrap_diff(a, b, 50.0, seed=0)
    assert d.is_within_noise and d.hi - d.lo > 2.0  # the median's SE is ~0.63 a side: +-1.74 together
