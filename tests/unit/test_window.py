"""Windowing of a point's requests: warm-up / steady / drain on hand-made closed and open loops, the steadiness
check on a settled and an overloaded Poisson queue, and TTFT by prefix hit/miss."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.bench import window


def closed_loop(latencies_ms: list[float], concurrency: int, delay_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Send times of a closed loop: each slot sends its next request `delay_s` after its previous one completes."""
    free = [0.0] * concurrency
    starts = []
    for i, lat in enumerate(latencies_ms):
        slot = int(np.argmin(free))
        starts.append(free[slot] + (delay_s if i >= concurrency else 0.0))
        free[slot] = starts[-1] + lat / 1000.0
    return np.array(starts), np.array(latencies_ms)


def test_closed_loop_warmup_is_the_first_2c_minus_1_sends_and_drain_the_last_c_in_flight() -> None:
    start, e2e = closed_loop([1000.0] * 20, concurrency=4)  # waves of 4 at t = 0, 1, 2, 3, 4
    w = window.closed_loop_window(start, e2e, np.full(20, 10), concurrency=4)
    assert w.t_start == 1.0 and w.t_end == 4.0  # the 4th completion; the last send
    # the refills sent at t_start by the first three completions are warm-up by send order, the fourth's steady
    assert w.count("warmup") == 2 * 4 - 1
    assert w.phase[:7] == ("warmup",) * 7 and w.phase[-4:] == ("drain",) * 4
    assert w.count("steady") == 9
    # completions in (1, 4]: the waves ending at 2, 3 and 4 s, 4 requests a second as the loop runs (the wave
    # ending at t_start opened the window)
    assert w.completed == 12 and w.request_throughput == pytest.approx(4.0)
    assert w.output_throughput == pytest.approx(12 * 10 / 3.0)


def test_refills_the_client_sends_late_are_still_the_first_wave_s_echo() -> None:
    # c=4: the first wave ends at 1.00-1.03 s and the client sends each refill 25 ms after its completion (busy
    # streaming), so three of the four refills go out after the 4th completion opened the window; by time they would
    # be steady, though the first three completions triggered them: only the 4th's refill is
    start, e2e = closed_loop([1000.0, 1010.0, 1020.0, 1030.0] + [1000.0] * 24, concurrency=4, delay_s=0.025)
    w = window.closed_loop_window(start, e2e, np.full(28, 10), concurrency=4)
    assert w.t_start == pytest.approx(1.03) and int(np.sum(start[4:8] > w.t_start)) == 3
    assert w.phase[:7] == ("warmup",) * 7 and w.phase[7] == "steady"


def test_staggered_closed_loop_counts_exactly_2c_minus_1_warmup_requests() -> None:
    rng = np.random.default_rng(0)
    start, e2e = closed_loop(list(rng.uniform(500, 1500, 200)), concurrency=8)
    w = window.closed_loop_window(start, e2e, np.ones(200), concurrency=8)
    assert w.count("warmup") == 2 * 8 - 1
    ends = start + e2e / 1000
    assert (ends[w.mask("steady")] <= w.t_end).all() and (ends[w.mask("drain")] > w.t_end).all()
    assert w.count("drain") == 8  # what was in flight when sending stopped


def test_a_point_no_larger_than_its_first_wave_has_no_window_and_is_all_warmup() -> None:
    w = window.closed_loop_window(np.zeros(4), np.full(4, 100.0), np.ones(4), concurrency=4)
    assert not w.has_window and w.count("warmup") == 4 and math.isnan(w.output_throughput)


def test_burst_points_are_all_warmup_and_the_dispatcher_follows_the_load_pattern() -> None:
    start, e2e, out = np.zeros(10), np.full(10, 50.0), np.ones(10)
    assert window.point_window("burst", None, None, start, e2e, out).count("warmup") == 10
    assert not window.point_window("cold", 2, None, np.arange(10.0), e2e, out).has_window  # a transient by design
    s, e = closed_loop([100.0] * 30, 3)
    assert window.point_window("concurrency", 3, None, s, e, np.ones(30)).t_start == pytest.approx(0.1)
    poisson = window.point_window("qps", None, 4.0, np.arange(40) / 4.0, np.full(40, 400.0), np.ones(40))
    assert poisson.t_start == pytest.approx(0.4)  # first arrival + p90 latency


def poisson_point(rng: np.random.Generator, rate: float, n: int, service_ms: float,
                  servers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrivals at `rate` into `servers` FIFO servers; TTFT = queueing + a tenth of the service."""
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    free = np.zeros(servers)
    ttft, e2e = np.empty(n), np.empty(n)
    for i, t in enumerate(arrivals):
        k = int(np.argmin(free))
        begin = max(t, free[k])
        service = rng.exponential(service_ms) / 1000.0
        free[k] = begin + service
        ttft[i] = 1000 * (begin - t) + 100 * service
        e2e[i] = 1000 * (free[k] - t)
    return arrivals, ttft, e2e


def test_a_settled_poisson_queue_is_steady() -> None:
    start, ttft, e2e = poisson_point(np.random.default_rng(1), rate=8.0, n=600, service_ms=500, servers=8)
    w = window.open_loop_window(start, e2e, np.ones(600))
    verdict = window.check_steady(w, start, ttft, np.ones(600, bool), concurrency=None)
    assert verdict.is_steady, verdict.reasons
    assert verdict.keep_up > 0.95


def test_an_overloaded_poisson_queue_is_flagged_with_both_reasons() -> None:
    start, ttft, e2e = poisson_point(np.random.default_rng(1), rate=8.0, n=600, service_ms=500, servers=3)
    w = window.open_loop_window(start, e2e, np.ones(600))
    verdict = window.check_steady(w, start, ttft, np.ones(600, bool), concurrency=None)
    assert not verdict.is_steady and verdict.ttft_drift_lo_pct > 20
    assert any("drifted" in r for r in verdict.reasons) and any("kept up" in r for r in verdict.reasons)


def test_a_noisy_but_flat_window_is_not_called_unsteady_on_a_drift_inside_its_ci() -> None:
    rng = np.random.default_rng(2)
    start = np.arange(60, dtype=float)
    ttft = np.where(start < 30, 100.0, 130.0) * rng.lognormal(0, 1.0, 60)  # +30%, but far inside the noise
    w = window.open_loop_window(start, np.full(60, 10.0), np.ones(60))
    verdict = window.check_steady(w, start, ttft, np.ones(60, bool), concurrency=None)
    assert verdict.ttft_drift_lo_pct < 0 < verdict.ttft_drift_hi_pct and verdict.is_steady


def test_a_point_without_a_window_is_not_steady_and_says_why() -> None:
    w = window.burst_window(np.zeros(5), np.full(5, 10.0), np.ones(5))
    verdict = window.check_steady(w, np.zeros(5), np.full(5, 5.0), np.ones(5, bool), concurrency=5)
    assert not verdict.is_steady and "no steady window" in verdict.reasons[0]


def test_prefix_hits_need_most_of_the_prompt_cached_and_unrecorded_counts_are_unknown() -> None:
    split = window.prefix_split(ttft_ms=np.array([20.0, 300.0, 25.0, 310.0, 40.0, 50.0]),
                                ok=np.array([True, True, True, True, True, False]),
                                prompt_tokens=np.array([4224, 4224, 4224, 4224, 4224, 4224]),
                                cached_tokens=np.array([4096, 12, 4200, 0, np.nan, 4096]))
    assert split.hit_ttft_ms.tolist() == [20.0, 25.0]  # 12 cached tokens (the chat template) is a miss
    assert split.miss_ttft_ms.tolist() == [300.0, 310.0]
    assert split.unknown == 1  # the failed request is neither


def test_the_runner_can_window_its_request_records_in_any_order() -> None:
    from llmhost.bench.records import Point, RequestRecord
    start, e2e = closed_loop([1000.0] * 28, concurrency=4)  # waves of 4 at t = 0 .. 6
    rows = [RequestRecord(float(s), True, "", 100, 10, 50.0, (9.0,) * 9, float(e)) for s, e in zip(start, e2e)]
    point = Point("p", "baseline", "chat", "concurrency", 4, None, 28, 0)
    w, verdict = window.measure(point, rows[::-1])
    assert (w.t_start, w.t_end, w.count("steady")) == (1.0, 6.0, 28 - 7 - 4) and verdict.is_steady


def test_a_closed_loop_window_that_sees_fewer_completions_than_slots_is_not_steady() -> None:
    from llmhost.bench.records import Point, RequestRecord
    # 2c requests with staggered latencies: the window runs from the c-th completion to the last send, a sliver
    # holding one completion whose tokens over that sliver would read as a huge throughput
    lat = [1000.0 + 3.0 * i for i in range(8)] + [1000.0] * 8
    start, e2e = closed_loop(lat, concurrency=8, delay_s=0.005)  # the client takes 5 ms to send a refill
    rows = [RequestRecord(float(s), True, "", 100, 256, 50.0, (9.0,) * 255, float(e)) for s, e in zip(start, e2e)]
    w, verdict = window.measure(Point("p", "baseline", "agent", "concurrency", 8, None, 16, 1), rows)
    assert w.has_window and w.completed < 8
    assert not verdict.is_steady and verdict.reasons[0].startswith("window too short: ")
    # four waves of the same loop: the window sees every slot turn over, and the length rule is silent
    start, e2e = closed_loop(lat + [1000.0] * 16, concurrency=8, delay_s=0.005)
    rows = [RequestRecord(float(s), True, "", 100, 256, 50.0, (9.0,) * 255, float(e)) for s, e in zip(start, e2e)]
    w, verdict = window.measure(Point("p", "baseline", "agent", "concurrency", 8, None, 32, 1), rows)
    assert w.completed >= 8 and not any(r.startswith("window too short") for r in verdict.reasons)


def test_an_open_loop_window_needs_enough_completions_to_check() -> None:
    start = np.arange(12) * 0.1  # 12 arrivals, 0.1 s apart, 50 ms each: fewer than MIN_OPEN_COMPLETED complete
    w = window.open_loop_window(start, np.full(12, 50.0), np.ones(12))
    verdict = window.check_steady(w, start, np.full(12, 20.0), np.ones(12, bool), concurrency=None,
                                  min_completed=window.MIN_OPEN_COMPLETED)
    assert not verdict.is_steady and "window too short" in verdict.reasons[0]


def lockstep_point(seed: int, waves: int, c: int, drift: float = 1.0) -> tuple[np.ndarray, ...]:
    """A closed loop that stays in lockstep, as agent c=64 on the H200: every answer the same length, so each
    wave of c is sent at once; a wave's level (TTFT and length) moves ±50% at random from wave to wave, and inside
    a wave TTFT climbs with admission order (200 ms to 1.6 s), which is unrelated to the send order within the
    wave. `drift` multiplies the TTFT of the waves sent in the window's second half (1.0: none)."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.5, 1.5, waves)
    wave = np.arange(waves * c) // c
    start, e2e = closed_loop(list(2500.0 * level[wave] + rng.uniform(0, 3, waves * c)), c)
    admitted = np.concatenate([rng.permutation(c) for _ in range(waves)]) / c
    growth = np.where(wave >= (waves + 2) // 2, drift, 1.0)  # whole turnovers 2 .. waves-1 are the window's
    return start, e2e, level[wave] * growth * (200.0 + 1400.0 * admitted ** 3)


def lockstep_verdict(seed: int, waves: int, drift: float = 1.0, c: int = 64) -> window.Steadiness:
    from llmhost.bench.records import Point
    start, e2e, ttft = lockstep_point(seed, waves, c, drift)
    point = Point("p", "baseline", "agent", "concurrency", c, None, start.size, 1)
    return window.window_and_check(point, start, e2e, np.full(start.size, 256), ttft, np.ones(start.size, bool),
                                   seed)[1]


@pytest.mark.parametrize("waves", [6, 10])  # 2 and 4 whole turnovers per window half
def test_a_lockstep_loop_whose_waves_vary_but_do_not_drift_is_steady_in_nine_seeds_of_ten(waves: int) -> None:
    # The drift CI resamples whole turnovers, so it holds the wave-to-wave noise: 94 (6 waves) and 98 (10 waves)
    # of these 100 seeds pass. The former 8 time blocks per time half cut the waves by position: 27 and 21 seeds
    # called drifted, and 75 at the former default of 4 waves (one per half), as 2 of 3 H200 repeats were
    steady = [lockstep_verdict(seed, waves).is_steady for seed in range(100)]
    assert sum(steady) >= 90


def test_a_lockstep_loop_whose_ttft_doubles_from_one_half_to_the_other_is_flagged() -> None:
    # 8 turnovers per half: the doubling stands out of ±50% wave noise in 40 of these 40 seeds (with 2 per half,
    # the default sizing, in 11 of 40: two waves a half cannot tell a doubling from that noise at 95%)
    verdicts = [lockstep_verdict(seed, 18, drift=2.0) for seed in range(40)]
    assert sum("TTFT p50 drifted +" in " ".join(v.reasons) for v in verdicts) >= 36


def test_a_closed_loop_half_of_one_turnover_is_not_steady_and_says_to_send_more() -> None:
    verdict = lockstep_verdict(0, 4)  # 4c requests: the window's whole turnovers are 2 and 3, one per half
    assert not verdict.is_steady
    assert verdict.reasons == ("too few turnovers to check TTFT drift: 1 whole turnover(s) of the 64 slots in a "
                               "window half, 2 needed (send more requests: --duration-s)",)
