"""The tuner's ranking rules, each on a small worked example: the paired verdict's boundary, which trial wins when
several beat the defaults, where unmeasured trials and loads go, the repeat counts a row carries, and what one
repeat's goodput counts (mean ITL over the tokens after the first, failed requests, the good requests' tokens)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from llmhost import stats
from llmhost.bench.records import PointRecord, RequestRecord
from llmhost.tune import rank
from llmhost.tune.rank import RepeatGoodput

NAN = math.nan


def _reps(*values: float) -> dict[int, RepeatGoodput]:
    return {i + 1: RepeatGoodput(v, 100 * v, 10, 10, True) for i, v in enumerate(values)}


def _closed_loop(n: int, c: int, e2e_ms: float, ttft_ms: float, out_tokens: int) -> list[RequestRecord]:
    """n requests, c at a time, each sent when the one before in its slot completed (1 s each here)."""
    return [RequestRecord(start_s=1000.0 + (i // c) * e2e_ms / 1000, ok=True, error="", prompt_tokens=10,
                          output_tokens=out_tokens, ttft_ms=ttft_ms, itl_ms=(), e2e_ms=e2e_ms) for i in range(n)]


def _point(arm: str = "baseline", repeat: int = 1, pattern: str = "concurrency", c: int | None = 2) -> PointRecord:
    return PointRecord(f"{arm}.agent.{pattern}.c{c}.r{repeat}", arm, "agent", pattern, c, None, 12, repeat,
                       attempt=1, status="ok", error=None, started_at=0.0, ended_at=1.0, cache_flushed=True,
                       summary=None, requests_file=f"requests/{arm}.{pattern}.r{repeat}.jsonl")


# 12 requests at c=2, 1 s each, 11 output tokens after a 100 ms first token: mean ITL (1000 - 100) / 10 = 90 ms.
# The steady window holds the 7 requests sent at 1..4 s after the first 2c - 1 and runs at 2 requests per second
# (test_tuner.py).
ROWS = _closed_loop(12, 2, 1000.0, 100.0, 11)


@pytest.mark.parametrize("delta,lo,hi,verdict", [
    (0.5, 0.0, 1.0, "within noise"),  # a CI that reaches 0 does not exclude it
    (-0.5, -1.0, 0.0, "within noise"),
    (0.5, 0.01, 1.0, "better"),
    (-0.5, -1.0, -0.01, "worse"),
    (0.5, NAN, NAN, "no CI"),  # one paired repeat
    (NAN, NAN, NAN, "no data"),
])
def test_a_trial_is_better_or_worse_only_when_its_paired_ci_excludes_zero(delta, lo, hi, verdict):
    assert rank.paired_verdict(stats.Difference(delta, lo, hi, NAN, NAN, NAN)) == verdict


def test_of_two_trials_that_beat_the_defaults_the_higher_mean_goodput_wins():
    # paired differences: a 0.5, 0.5, 0.5 (CI [0.5, 0.5]); b 1.0, 1.2, 0.9 (mean 1.033, half-width 4.303 x 0.153 /
    # sqrt(3) = 0.38): both better, b ranked first, so b wins
    measured = {("baseline", "c64"): _reps(1.0, 1.1, 0.9), ("a", "c64"): _reps(1.5, 1.6, 1.4),
                ("b", "c64"): _reps(2.0, 2.3, 1.8)}
    ranking = rank.rank(measured)
    assert [r.trial for r in ranking.rows] == ["b", "a", "baseline"]
    assert {r.trial: r.verdict for r in ranking.rows} == {"b": "better", "a": "better", "baseline": "reference"}
    assert ranking.winner == "b" and ranking.reason.startswith("b: goodput +103.3%")


def test_a_trial_without_a_measured_goodput_ranks_below_every_measured_one():
    measured = {("baseline", "c64"): _reps(1.0, 1.1), ("gone", "c64"): _reps(NAN, NAN),
                ("slow", "c64"): _reps(0.2, 0.3)}
    ranking = rank.rank(measured)
    assert [r.trial for r in ranking.rows] == ["baseline", "slow", "gone"]
    assert ranking.winner == "baseline"


def test_a_load_measured_at_zero_goodput_is_preferred_to_a_load_without_a_measurement():
    # c16 had no steady window; c64 was measured and no request met the SLO: 0 req/s is a measurement
    measured = {("baseline", "c16"): _reps(NAN, NAN), ("baseline", "c64"): _reps(0.0, 0.0)}
    ranking = rank.rank(measured)
    assert ranking.rows[0].load == "c64" and ranking.rows[0].goodput.value == 0.0
    assert ranking.winner == "baseline"  # the defaults were measured, so they stay
    assert rank.rank(dict(reversed(list(measured.items())))).rows[0].load == "c64"


def test_a_row_counts_its_repeats_whose_window_was_not_steady():
    reps = {1: RepeatGoodput(1.0, 100.0, 10, 10, True), 2: RepeatGoodput(1.1, 110.0, 11, 11, False),
            3: RepeatGoodput(0.9, 90.0, 9, 9, True)}
    row = rank.rank({("baseline", "c64"): reps}).rows[0]
    assert row.not_steady == 1


def test_a_rows_share_is_the_mean_over_repeats_of_good_over_steady_requests():
    # 8 of 10, 9 of 10, 10 of 10 steady requests met the SLO: mean share (0.8 + 0.9 + 1.0) / 3 = 0.9
    reps = {1: RepeatGoodput(1.6, 160.0, 8, 10, True), 2: RepeatGoodput(1.8, 180.0, 9, 10, True),
            3: RepeatGoodput(2.0, 200.0, 10, 10, True)}
    row = rank.rank({("baseline", "c64"): reps}).rows[0]
    assert row.share.value == pytest.approx(0.9) and row.share.n == 3
    assert row.goodput.value == pytest.approx(1.8)


def test_a_requests_mean_itl_is_its_decode_time_over_the_tokens_after_the_first():
    # (1000 - 100) / (11 - 1) = 90 ms: over an 85 ms limit every request misses, a 90 ms limit is met
    assert rank.repeat_goodput(_point(), ROWS, stats.Slo(ttft_ms=500, itl_ms=85, pct=99)).goodput_rps == 0.0
    assert rank.repeat_goodput(_point(), ROWS, stats.Slo(ttft_ms=500, itl_ms=90, pct=99)).goodput_rps == \
        pytest.approx(2.0)


def test_a_failed_request_is_not_good_even_with_a_fast_first_token():
    # one of the 7 steady requests failed after its 100 ms first token: 6 of 7 good, 2 x 6 / 7 req/s
    rows = [dataclasses.replace(r, ok=False, error="reset") if i == 4 else r for i, r in enumerate(ROWS)]
    met = rank.repeat_goodput(_point(), rows, stats.Slo(500, 100, 99))
    assert (met.good, met.steady) == (6, 7) and met.goodput_rps == pytest.approx(2.0 * 6 / 7)


def test_good_tokens_per_second_count_only_the_output_of_requests_that_met_the_slo():
    # two steady requests answer 21 tokens but miss the TTFT limit: 5 of 7 good, 2 x 5 / 7 req/s, each good request
    # 11 tokens: 2 x 5 / 7 x 11 tok/s (the 21-token answers do not raise it)
    rows = [dataclasses.replace(r, ttft_ms=900.0, output_tokens=21) if i in (4, 5) else r for i, r in enumerate(ROWS)]
    met = rank.repeat_goodput(_point(), rows, stats.Slo(500, 100, 99))
    assert met.goodput_rps == pytest.approx(2.0 * 5 / 7) and met.good_tok_s == pytest.approx(2.0 * 5 / 7 * 11)


def test_only_closed_loop_and_poisson_points_are_ranked(tmp_path):
    (tmp_path / "requests").mkdir()
    points = [_point(), _point(pattern="burst", c=None), _point(pattern="warm", c=4)]
    for p in points:
        (tmp_path / p.requests_file).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in ROWS))
    measured = rank.goodput_by_repeat(tmp_path, {p.point_id: p for p in points}, stats.Slo(500, 100, 99))
    assert list(measured) == [("baseline", "c2")] and measured["baseline", "c2"][1].goodput_rps == pytest.approx(2.0)
