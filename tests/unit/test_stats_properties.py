"""Invariants of llmhost.stats over generated inputs (hypothesis): an interval contains its estimate, fewer samples
never narrow it, a percentile lies within the sample and grows with p, goodput is a share of what was sent."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from llmhost import stats

# latencies in ms: finite, positive, wide range; small samples keep the bootstrap fast
values = st.lists(st.floats(min_value=0.1, max_value=1e5, allow_nan=False), min_size=2, max_size=40)
repeats = st.lists(st.floats(min_value=1.0, max_value=1e4, allow_nan=False), min_size=2, max_size=8)
FAST = settings(max_examples=60, deadline=None)


@FAST
@given(values, st.sampled_from([50.0, 90.0, 99.0, "mean"]))
def test_a_bootstrap_ci_contains_its_estimate(xs, stat):
    ci = stats.bootstrap_ci(xs, stat, n_boot=200, seed=1)
    tol = 1e-9 * max(xs)
    assert ci.n == len(xs) and ci.lo - tol <= ci.value <= ci.hi + tol
    assert min(xs) - tol <= ci.lo and ci.hi <= max(xs) + tol


@FAST
@given(repeats)
def test_a_student_t_ci_contains_the_mean_and_is_symmetric(xs):
    ci = stats.mean_ci_over_repeats(xs)
    assert ci.value == np.mean(xs) and ci.lo <= ci.value <= ci.hi
    assert math.isclose(ci.value - ci.lo, ci.hi - ci.value, rel_tol=1e-9, abs_tol=1e-9)


@FAST
@given(repeats, st.integers(min_value=2, max_value=4))
def test_the_same_spread_over_fewer_repeats_gives_a_wider_ci(xs, copies):
    # k copies of a sample have (nearly) the same sd and k times the n: t shrinks and sqrt(n) grows
    few, many = stats.mean_ci_over_repeats(xs), stats.mean_ci_over_repeats(xs * copies)
    assert many.hi - many.lo <= few.hi - few.lo + 1e-9


@FAST
@given(repeats, repeats)
def test_welch_ci_contains_the_difference_and_flips_sign_with_the_arms(a, b):
    d, back = stats.welch_diff(a, b), stats.welch_diff(b, a)
    assert d.lo <= d.delta <= d.hi
    assert math.isclose(d.delta, -back.delta, abs_tol=1e-9)
    assert math.isclose(d.hi - d.lo, back.hi - back.lo, rel_tol=1e-9, abs_tol=1e-9)


@FAST
@given(values, st.floats(min_value=0.0, max_value=99.9), st.floats(min_value=0.0, max_value=99.9))
def test_a_percentile_lies_in_the_sample_and_grows_with_p(xs, p, q):
    lo_p, hi_p = sorted((p, q))
    assert min(xs) <= stats.percentile(xs, lo_p) <= stats.percentile(xs, hi_p) <= max(xs)


@FAST
@given(st.integers(min_value=1, max_value=500), st.data())
def test_wilson_contains_the_share_and_fewer_requests_widen_it(n, data):
    good = data.draw(st.integers(min_value=0, max_value=n))
    ci = stats.wilson_ci(good, n)
    eps = 1e-12  # at good == n the bound is 1 - 1 ulp: centre + half rounds just below 1.0
    assert 0.0 <= ci.lo <= ci.value + eps and ci.value <= ci.hi + eps and ci.hi <= 1.0
    more = stats.wilson_ci(4 * good, 4 * n)  # the same share over 4x the requests
    assert more.hi - more.lo < ci.hi - ci.lo


@FAST
@given(st.lists(st.tuples(st.booleans(), st.floats(0.0, 300.0), st.floats(0.0, 30.0)), min_size=1, max_size=50))
def test_goodput_is_a_share_of_requests_sent_and_never_counts_a_failure(rows):
    ok = np.array([r[0] for r in rows])
    ttft, itl = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    slo = stats.Slo(ttft_ms=100.0, itl_ms=10.0, pct=90.0)
    mask = stats.good_mask(ok, ttft, itl, slo)
    share = stats.goodput_share(ok, ttft, itl, slo)
    assert not (mask & ~ok).any()
    assert share == mask.sum() / len(rows) <= ok.sum() / len(rows)


def test_the_ci_of_a_skewed_median_covers_the_truth_at_the_nominal_rate_by_simulation():
    # lognormal TTFTs (the right tail real latencies have), true median exp(mu) = 100 ms; 800 seeded simulations
    # put the coverage's standard error at sqrt(0.95 * 0.05 / 800) = 0.77 points
    rng = np.random.default_rng(42)
    trials, covered = 800, 0
    for i in range(trials):
        ci = stats.bootstrap_ci(rng.lognormal(math.log(100.0), 0.5, 200), 50.0, n_boot=500, seed=i)
        covered += ci.lo <= 100.0 <= ci.hi
    assert 0.93 <= covered / trials <= 0.97
