"""A sweep point's prompt count and the seconds it is estimated to take, worked by hand from the documented rules."""
from __future__ import annotations

import pytest

from llmhost.bench import points
from llmhost.bench.records import Point

# chat: 1,024 tokens in, 256 out. One decode step of b sequences at 1,024 + 256 / 2 = 1,152 tokens of context:
#   3.63 ms + b x (0.0622 ms + 1,152 x 0.00918e-3 ms) = 3.63 ms + b x 0.07277536 ms
# One request among b in flight: prefill 1,024 / 60,000 s + (b - 1) x 7 ms admission, then 255 steps (the first
# token comes with the prefill):
#   b=1:  0.01706667 + 0     + 255 x 3.70277536e-3 = 0.96127438 s
#   b=8:  0.01706667 + 0.049 + 255 x 4.21220288e-3 = 1.14017840 s
#   b=16: 0.01706667 + 0.105 + 255 x 4.79440576e-3 = 1.34464014 s
#   b=64: 0.01706667 + 0.441 + 255 x 8.28762304e-3 = 2.57141054 s  (the docstring's chat c=64 wave of 2.57 s)


def chat_point(concurrency: int, num_prompts: int) -> Point:
    return Point(f"baseline.chat.concurrency.c{concurrency}.r1", "baseline", "chat", "concurrency", concurrency, None,
                 num_prompts, 1)


@pytest.mark.parametrize("in_flight, seconds", [(1, 0.96127438), (8, 1.14017840), (16, 1.34464014),
                                                (64, 2.57141054)])
def test_one_chat_request_is_its_prefill_its_admission_wait_and_all_but_one_token_decoded(in_flight, seconds):
    assert points.request_s(points.WORKLOADS["chat"], in_flight) == pytest.approx(seconds, abs=1e-6)


def test_a_closed_loop_estimate_counts_a_partial_last_wave_as_a_whole_wave():
    # 20 prompts at c=8: waves of 8, 8 and 4 = 3 waves of 1.14017840 s, plus the 4.5 s per-point overhead
    assert points.estimate_s(chat_point(8, 20), primed=False) == pytest.approx(4.5 + 3 * 1.14017840, abs=1e-6)
    assert points.estimate_s(chat_point(8, 16), primed=False) == pytest.approx(4.5 + 2 * 1.14017840, abs=1e-6)


def test_a_closed_loop_with_fewer_prompts_than_slots_has_only_its_prompts_in_flight():
    # 16 prompts at c=64: one wave of 16 requests in flight, not 64
    assert points.estimate_s(chat_point(64, 16), primed=False) == pytest.approx(4.5 + 1.34464014, abs=1e-6)


@pytest.mark.parametrize("workload, concurrency, prompts", [
    ("chat", 1, 32), ("chat", 4, 32), ("chat", 16, 96), ("long", 1, 16), ("long", 2, 16), ("long", 8, 48),
    ("agent", 64, 384)])
def test_a_sweep_closed_loop_sends_six_waves_with_a_floor_of_32_or_16_for_8k_prompts(workload, concurrency,
                                                                                      prompts):
    assert points.default_prompts(workload, "concurrency", concurrency) == prompts


def test_a_poisson_estimate_is_the_arrival_span_plus_one_requests_latency():
    # 64 arrivals at 4 req/s span 16 s; the last one then takes one lone request's 0.96127438 s
    p = Point("baseline.chat.qps.r4.r1", "baseline", "chat", "qps", None, 4.0, 64, 1)
    assert points.estimate_s(p, primed=False) == pytest.approx(4.5 + 16 + 0.96127438, abs=1e-6)


BURST = Point("baseline.chat.burst.inf.r1", "baseline", "chat", "burst", None, None, 2000, 1)
# 2,000 x 1,024 prompt tokens at 60,000 tok/s = 34.13333333 s, then 4 admission waves of 256 steps at batch 64:
# 4 x 256 x 8.28762304 ms = 8.48652599 s; with the 4.5 s overhead 47.11985932 s
BURST_S = 4.5 + 34.13333333 + 8.48652599


def test_a_burst_estimate_prefills_everything_then_decodes_in_four_waves_at_batch_64():
    assert points.estimate_s(BURST) == pytest.approx(BURST_S, abs=1e-6)


def test_a_points_time_limit_is_five_times_its_estimate_plus_two_minutes():
    assert points.timeout_s(BURST) == pytest.approx(5 * BURST_S + 120, abs=1e-5)
