"""The percentile CI across repeats, checked against exact distributions: on a few 0/1 values (blocks of one value
each) the within-run resample is a binomial draw, and on repeats that are constant inside the whole-repeat resample
can be enumerated; a latency's CI stops at 0, one value has none, and one repeat's goodput keeps Wilson's doubt."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from llmhost import repeats, stats

Z = 1.959964


def binary_percentile_sd(n: int, ones: int, pct: float) -> float:
    """SD of the pct-th percentile of n values drawn with replacement from `ones` ones and n - ones zeros: with j
    ones drawn (binomial), the sample is n - j zeros then j ones."""
    p = ones / n
    probs = [math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)]
    vals = [float(np.percentile([0.0] * (n - j) + [1.0] * j, pct)) for j in range(n + 1)]
    mean = sum(q * v for q, v in zip(probs, vals))
    return math.sqrt(sum(q * (v - mean) ** 2 for q, v in zip(probs, vals)))


ALTERNATING = np.array([0.0, 1.0] * 4)  # 8 values = BLOCKS blocks of one value: each drawn independently


@pytest.mark.parametrize("pct, rel", [(50.0, 0.05), (90.0, 0.12)])
def test_one_repeat_gets_the_within_run_interval_with_z(pct: float, rel: float) -> None:
    """One repeat: value +- 1.96 x the standard error of the block resample (p50 of 8 draws: sd 0.4262)."""
    ci = repeats.percentile_ci([ALTERNATING], pct, n_boot=4000, seed=0)
    assert ci.n == 1 and ci.value == pytest.approx(np.percentile(ALTERNATING, pct))
    assert ci.hi - ci.value == pytest.approx(Z * binary_percentile_sd(8, 4, pct), rel=rel)


def test_a_repeat_shorter_than_the_block_count_is_resampled_value_by_value() -> None:
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.0])  # p50 = 0; 5 draws with 2/5 ones
    ci = repeats.percentile_ci([x], 50.0, n_boot=4000, seed=0)
    assert ci.value == 0.0 and ci.lo == 0.0
    assert ci.hi == pytest.approx(Z * binary_percentile_sd(5, 2, 50.0), rel=0.05)


def test_a_latency_ci_stops_at_zero_but_a_sample_with_negative_values_does_not() -> None:
    """p50 0.5 with half-width 1.96 x 0.4262 = 0.835: the lower bound would be -0.335, a latency cannot be."""
    latency = repeats.percentile_ci([ALTERNATING], 50.0, n_boot=4000, seed=0)
    assert latency.lo == 0.0 and latency.hi > 1.0
    shifted = repeats.percentile_ci([ALTERNATING - 10.0], 50.0, n_boot=4000, seed=0)
    assert shifted.value == -9.5
    assert shifted.value - shifted.lo == pytest.approx(Z * binary_percentile_sd(8, 4, 50.0), rel=0.05)


def test_repeats_that_agree_by_chance_keep_the_within_run_floor() -> None:
    """Three identical repeats: every whole-repeat resample pools the same values (no between-repeat spread), so the
    half-width is 1.96 x the within-run error: the p50 of 24 independent 0/1 draws."""
    ci = repeats.percentile_ci([ALTERNATING] * 3, 50.0, n_boot=4000, seed=0)
    assert ci.n == 3 and ci.value == 0.5
    assert ci.hi - ci.value == pytest.approx(Z * binary_percentile_sd(24, 12, 50.0), rel=0.05)


@pytest.mark.parametrize("pct", [50.0, 90.0])
def test_the_between_repeat_error_is_the_bootstrap_sd_scaled_to_the_unbiased_one(pct: float) -> None:
    """Repeats constant inside (no within-run noise) at 90, 100, 110: the 27 equally likely resamples of 3 repeats
    give the bootstrap SD exactly; half-width = t(0.975, 2) x SD x sqrt(3 / 2)."""
    reps = [np.full(10, 90.0), np.full(10, 100.0), np.full(10, 110.0)]
    pooled = [np.percentile(np.concatenate([reps[i] for i in pick]), pct)
              for pick in itertools.product(range(3), repeat=3)]
    half = 4.303 * float(np.std(pooled)) * math.sqrt(3 / 2)
    ci = repeats.percentile_ci(reps, pct, n_boot=4000, seed=0)
    assert ci.value == np.percentile(np.concatenate(reps), pct) and ci.n == 3
    assert ci.hi - ci.value == pytest.approx(half, rel=0.05)
    assert ci.value - ci.lo == pytest.approx(half, rel=0.05)


def test_a_single_value_has_no_ci_but_two_repeats_of_one_value_do() -> None:
    one = repeats.percentile_ci([np.array([5.0])], 50.0)
    assert (one.value, one.n) == (5.0, 1) and not one.has_ci
    two = repeats.percentile_ci([np.array([4.0]), np.array([6.0])], 50.0)
    assert two.value == 5.0 and two.n == 2 and two.has_ci and two.lo < 5.0 < two.hi


def test_one_repeat_of_goodput_gets_the_wilson_interval_of_its_counts() -> None:
    """16 of 16 good in one repeat: no spread to measure, Wilson still says only >= 80.6% is shown."""
    ci = repeats.goodput_ci({0: (16, 16)})
    assert ci.value == 1.0 and ci.n == 1 and ci.hi == 1.0
    assert ci.lo == pytest.approx(0.8064, abs=1e-4)
    assert repeats.goodput_ci({0: (16, 16), 1: (0, 0)}).lo == pytest.approx(0.8064, abs=1e-4)  # nothing sent: skipped


def test_every_block_of_a_repeat_can_be_drawn_including_the_last() -> None:
    """40 values in 4 blocks of 10: resamples start their blocks at 0, 10, 20 and 30, and use all four."""
    out = repeats.resample_blocks(np.arange(40.0), 4, 200, np.random.default_rng(0))
    starts = out.reshape(200, 4, 10)[:, :, 0]
    assert set(starts.ravel()) == {0.0, 10.0, 20.0, 30.0}
    assert abs(float((starts == 30.0).mean()) - 0.25) < 0.05  # each block equally likely
