"""Coverage of the repeat-based CIs, simulated with the correlation a real run has: requests of one run share server
state and arrive in lockstep waves (one shock per wave of c requests, one per run), and repeat r of every arm uses
the same seed (one workload effect per repeat index, shared by the arms). Fixed seeds; the whole file runs in a few
seconds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost import repeats, stats

WAVES, C = 8, 8  # requests per run: 8 waves of 8
SD_WORKLOAD, SD_RUN, SD_WAVE, SD_REQUEST = 0.08, 0.03, 0.15, 0.30  # log-latency components


def latencies(rng: np.random.Generator, trials: int, runs: int, shift: float) -> np.ndarray:
    """Latencies (s) of two arms, (trials, runs, arm, waves, c); arm 1's log latency is `shift` lower (faster).
    The workload effect is drawn per (trial, repeat index) and shared by both arms: same seed, same prompts."""
    shape = (trials, runs, 2, WAVES, C)
    workload = rng.normal(0, SD_WORKLOAD, (trials, runs, 1, 1, 1))
    run = rng.normal(0, SD_RUN, (trials, runs, 2, 1, 1))
    wave = rng.normal(0, SD_WAVE, (trials, runs, 2, WAVES, 1))
    arm = np.array([0.0, -shift]).reshape(1, 1, 2, 1, 1)
    return np.exp(arm + workload + run + wave + rng.normal(0, SD_REQUEST, shape))


def per_run(lat: np.ndarray, metric: str) -> np.ndarray:
    """(trials, runs, arm): closed-loop throughput (c / mean latency) or the run's TTFT p50."""
    flat = lat.reshape(*lat.shape[:3], -1)
    return C / flat.mean(axis=-1) if metric == "throughput" else np.median(flat, axis=-1)


def true_difference(metric: str, shift: float) -> float:
    if shift == 0.0:
        return 0.0
    m = per_run(latencies(np.random.default_rng(99), 40_000, 1, shift), metric)
    return float((m[..., 1] - m[..., 0]).mean())


def coverage(metric: str, shift: float, runs: int, seed: int, trials: int = 2000) -> tuple[float, float]:
    """Share of paired-t CIs that hold the true difference, and share of verdicts better/worse."""
    m = per_run(latencies(np.random.default_rng(seed), trials, runs, shift), metric)
    truth = true_difference(metric, shift)
    higher_better = metric == "throughput"
    held = called = 0
    for t in range(trials):
        d = repeats.paired_diff(dict(enumerate(m[t, :, 0])), dict(enumerate(m[t, :, 1])))
        held += d.lo <= truth <= d.hi
        called += repeats.verdict(d, higher_better) in ("better", "worse")
    return held / trials, called / trials


@pytest.mark.parametrize("metric", ["throughput", "ttft_p50"])
@pytest.mark.parametrize("runs", [3, 5])
def test_paired_ci_of_equal_arms_covers_zero_95_percent_of_the_time(metric: str, runs: int) -> None:
    held, called = coverage(metric, 0.0, runs, seed=runs)
    assert 0.93 <= held <= 0.97
    assert called == pytest.approx(1 - held)  # a verdict is exactly a CI that excludes 0


@pytest.mark.parametrize("metric", ["throughput", "ttft_p50"])
@pytest.mark.parametrize("runs", [3, 5])
def test_paired_ci_of_unequal_arms_covers_the_true_difference(metric: str, runs: int) -> None:
    held, called = coverage(metric, 0.25, runs, seed=10 + runs)
    assert 0.93 <= held <= 0.97
    assert called > 0.5  # a 22% faster arm is usually found


def test_pairing_by_seed_gives_narrower_cis_than_welch_when_the_workload_varies_by_seed() -> None:
    m = per_run(latencies(np.random.default_rng(5), 500, 3, 0.0), "throughput")
    paired = [repeats.paired_diff(dict(enumerate(x[:, 0])), dict(enumerate(x[:, 1]))) for x in m]
    welch = [stats.welch_diff(x[:, 0], x[:, 1]) for x in m]
    width = lambda ds: np.median([d.hi - d.lo for d in ds])  # noqa: E731
    assert width(paired) < 0.8 * width(welch)


def run_samples(rng: np.random.Generator, runs: int) -> list[np.ndarray]:
    """One point's TTFT samples per repeat, in send order, with a run effect and lockstep waves."""
    return [np.exp(rng.normal(0, 0.10) + np.repeat(rng.normal(0, SD_WAVE, WAVES * 3), C)
                   + rng.normal(0, SD_REQUEST, WAVES * 3 * C)) for _ in range(runs)]


@pytest.mark.parametrize("pct", [50.0, 90.0])
def test_percentile_ci_from_repeats_and_time_blocks_covers_the_true_percentile(pct: float) -> None:
    from statistics import NormalDist
    sd = math.sqrt(0.10 ** 2 + SD_WAVE ** 2 + SD_REQUEST ** 2)
    truth = math.exp(sd * NormalDist().inv_cdf(pct / 100))
    rng = np.random.default_rng(int(pct))
    trials = 200
    cis = [repeats.percentile_ci(run_samples(rng, 3), pct, n_boot=200, seed=t) for t in range(trials)]
    held = sum(ci.lo <= truth <= ci.hi for ci in cis)
    assert 0.93 <= held / trials <= 0.97


def test_pooling_requests_as_independent_calls_equal_arms_different_several_times_more_often_than_5_percent() -> None:
    """What the paired repeat CI replaces: a bootstrap over every request of every repeat, as if independent."""
    lat = latencies(np.random.default_rng(8), 150, 3, 0.0)
    called = 0
    for t in range(lat.shape[0]):
        d = stats.bootstrap_diff(lat[t, :, 0].ravel(), lat[t, :, 1].ravel(), 50.0, n_boot=300, seed=t)
        called += not d.is_within_noise
    assert called / lat.shape[0] > 0.12  # 17% here; the issue measured 11-69% on its own simulation
