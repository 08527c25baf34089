"""Where a closed loop's steady rate goes (llmhost.report.rate_budget): the four shares of a slot's cycle on worked
numbers, the window's requests it reads (llmhost.report.steady), each request's own gaps (load.Requests.gaps), and
the dashboard's table and note (llmhost.report.rate_budget_page)."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench.records import Point, PointRecord, RequestRecord
from llmhost.report import load, rate_budget, rate_budget_page, steady


def test_a_cycle_splits_into_decode_stalls_first_token_and_between():
    # c = 2 slots, 4 requests completed in 1 s: a slot's cycle is 500 ms. Each request: 5 tokens, first after 100 ms,
    # then gaps of 20, 20, 20 and 60 ms (pace 20 ms, mean gap 30 ms), 220 ms in all.
    b = rate_budget.budget(2, 1.0, 4, np.full(4, 5.0), np.full(4, 100.0), np.full(4, 220.0),
                           np.tile([20.0, 20.0, 20.0, 60.0], 4))
    assert b.pace_ms == 20.0 and b.pace_rate == 100.0  # 2 slots x 50 tokens a second at the pace
    assert b.shares == {"decode": pytest.approx(0.16), "stalls": pytest.approx(0.08), "first": pytest.approx(0.2),
                        "between": pytest.approx(0.56)}
    assert list(b.shares) == list(rate_budget.PARTS) and sum(b.shares.values()) == pytest.approx(1.0)
    assert b.rate == pytest.approx(20.0)  # 4 requests x 5 tokens in 1 s: the shares close on the window's rate
    assert (b.stalls_per_request, b.stall_ms) == (1.0, 60.0)  # each request's 60 ms gap: three paces


def test_a_stall_is_a_gap_of_at_least_two_paces():
    # two requests: gaps of 10, 10, 10, 10 ms and of 19.9, 20, 35 ms; pace 10 ms, so 20 and 35 ms are stalls
    gaps = np.array([10.0, 10.0, 10.0, 10.0, 19.9, 20.0, 35.0])
    b = rate_budget.budget(1, 1.0, 2, np.array([5.0, 4.0]), np.array([5.0, 5.0]), np.array([45.0, 79.9]), gaps)
    assert b.pace_ms == 10.0 and b.stalls_per_request == 1.0 and b.stall_ms == 27.5
    calm = rate_budget.budget(1, 1.0, 1, np.array([3.0]), np.array([5.0]), np.array([25.0]), np.array([10.0, 10.0]))
    assert calm.stalls_per_request == 0.0 and math.isnan(calm.stall_ms)


def test_the_pace_is_the_median_gap_and_stalls_the_mean_above_it():
    # one 3-token request: gaps 10 and 30 ms (pace 20, the mean gap 20: no stall), TTFT 50 ms, cycle 1000 ms
    b = rate_budget.budget(1, 1.0, 1, np.array([3.0]), np.array([50.0]), np.array([90.0]), np.array([10.0, 30.0]))
    assert b.pace_ms == 20.0 and b.shares["stalls"] == pytest.approx(0.0)
    assert b.shares["decode"] == pytest.approx(0.04) and b.shares["between"] == pytest.approx(0.91)
    # a one-token request has no gap: it counts in the mean tokens (N = 2), not in the mean gap (still 20 ms); two
    # completions in 1 s make a cycle of 500 ms
    mixed = rate_budget.budget(1, 1.0, 2, np.array([3.0, 1.0]), np.array([50.0, 50.0]), np.array([90.0, 50.0]),
                               np.array([10.0, 30.0]))
    assert mixed.shares == {"decode": pytest.approx(20.0 / 500), "stalls": pytest.approx(0.0),
                            "first": pytest.approx(50.0 / 500), "between": pytest.approx(430.0 / 500)}


@pytest.mark.parametrize("args", [
    (0, 1.0, 4), (2, 0.0, 4), (2, 1.0, 0),  # no slot, no window, nothing completed in it
])
def test_without_a_window_there_is_no_budget(args):
    assert rate_budget.budget(*args, np.full(4, 5.0), np.full(4, 100.0), np.full(4, 220.0), np.full(16, 20.0)) is None


def test_without_a_streamed_answer_or_a_gap_there_is_no_budget():
    one_token = rate_budget.budget(2, 1.0, 4, np.full(4, 1.0), np.full(4, 100.0), np.full(4, 100.0), np.array([]))
    no_gaps = rate_budget.budget(2, 1.0, 4, np.full(4, 5.0), np.full(4, 100.0), np.full(4, 220.0), np.array([]))
    zero_pace = rate_budget.budget(2, 1.0, 4, np.full(4, 5.0), np.full(4, 100.0), np.full(4, 100.0), np.zeros(16))
    assert one_token is None and no_gaps is None and zero_pace is None


def _record(start: float, gaps: tuple[float, ...], ttft: float = 100.0) -> RequestRecord:
    return RequestRecord(start_s=start, ok=True, error="", prompt_tokens=100, output_tokens=len(gaps) + 1,
                         ttft_ms=ttft, itl_ms=gaps, e2e_ms=ttft + sum(gaps))


def test_each_requests_gaps_are_picked_in_any_order():
    rows = [_record(0.0, (1.0, 2.0)), _record(1.0, ()), _record(2.0, (3.0,)), _record(3.0, (4.0, 5.0, 6.0))]
    cols = load.requests_from_records(rows)
    assert cols.itl_count.tolist() == [2, 0, 1, 3]
    assert cols.gaps(np.array([3, 0])).tolist() == [4.0, 5.0, 6.0, 1.0, 2.0]
    assert cols.gaps(np.array([1])).tolist() == [] and cols.gaps(np.array([], int)).tolist() == []
    both = load.Requests.concat([cols, load.requests_from_records(rows[:1])])
    assert both.gaps(np.array([4, 2])).tolist() == [1.0, 2.0, 3.0]  # the second part's request after the first's


GAPS = (80.0,) * 8 + (260.0,)  # pace 80 ms, mean gap 100 ms


def _point(rate: float | None = None) -> PointRecord:
    point = Point("p", "baseline", "agent", "concurrency" if rate is None else "qps", None if rate else 2, rate, 12, 1)
    return PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                          cache_flushed=False, summary=None, requests_file="requests/p.jsonl")


def test_a_steady_closed_loop_window_gets_its_budget_from_the_requests_completed_in_it():
    # c = 2 in lockstep: two requests sent at 0, 1, ..., 5 s, each 1 s long (first token after 100 ms, 9 gaps). The
    # window is (1, 5] s: 8 completions in 4 s, a cycle of 1 s per slot.
    r = load.requests_from_records([_record(float(t), GAPS) for t in range(6) for _ in range(2)])
    b = steady.window_repeat(_point(), r).rate_budget
    assert b.pace_ms == 80.0 and b.pace_rate == 25.0
    assert b.shares == {"decode": pytest.approx(0.72), "stalls": pytest.approx(0.18), "first": pytest.approx(0.1),
                        "between": pytest.approx(0.0, abs=1e-9)}
    assert b.rate == pytest.approx(20.0)  # the window's 8 x 10 tokens in 4 s
    assert (b.stalls_per_request, b.stall_ms) == (1.0, 260.0)
    assert steady.window_repeat(_point(rate=2.0), r).rate_budget is None  # Poisson arrivals: no slots to split


def test_only_the_windows_own_completions_count():
    # the request that completes after the window (sent at 5 s) stalled badly: it must not move the budget
    rows = [_record(float(t), GAPS) for t in range(6) for _ in range(2)]
    rows[-1] = _record(5.0, (80.0,) * 8 + (5000.0,))
    b = steady.window_repeat(_point(), load.requests_from_records(rows)).rate_budget
    assert b.shares["stalls"] == pytest.approx(0.18)


ROW = {"arm": "baseline", "workload": "agent", "load": "c=64", "steady_output_throughput": 6346.0,
       "budget_pace_ms": 8.42, "budget_pace_rate": 7599.0, "budget_decode_pct": 83.2, "budget_stalls_pct": 7.3,
       "budget_first_pct": 7.9, "budget_between_pct": 1.5, "budget_stalls_per_request": 8.7, "budget_stall_ms": 32.4}


def test_the_page_tables_the_budget_and_names_the_point_that_decoded_least():
    article = {k: v for k, v in ROW.items() if k not in ("budget_stalls_per_request", "budget_stall_ms")}
    article.update(arm="article", budget_decode_pct=65.1, budget_stalls_pct=23.0, budget_first_pct=10.0,
                   budget_between_pct=1.9)
    html = rate_budget_page.section([ROW, article, {**ROW, "load": "rate 2", "budget_decode_pct": math.nan}])
    assert "Where a closed loop's steady rate goes" in html and "8.42 → 7,599" in html
    assert "<td>8.7, 32</td>" in html and "<td>—, —</td>" in html  # the article's: a summary from before the count
    assert html.count("<tr") == 3  # the header and the two rows with a budget
    assert "Least time decoding at the pace: article · agent · c=64, 65.1%; its largest loss was gaps above the " \
        "pace, 23.0%." in html
    waiting = rate_budget_page.section([{**ROW, "budget_first_pct": 9.0}])
    assert "its largest loss was waiting for first tokens, 9.0%." in waiting
    assert rate_budget_page.section([{k: v for k, v in ROW.items() if not k.startswith("budget_")}]) == ""


def test_only_requests_with_a_gap_set_the_mean_gap():
    # a 2-token request (one 40 ms gap) counts; a 1-token one whose stream closed 30 ms after its token does not
    b = rate_budget.budget(1, 1.0, 2, np.array([2.0, 1.0]), np.array([10.0, 10.0]), np.array([50.0, 40.0]),
                           np.array([40.0]))
    assert b.pace_ms == 40.0 and b.shares["stalls"] == pytest.approx(0.0)  # mean gap 40 ms, not (40 + 30) / 1
    assert b.shares["decode"] == pytest.approx(0.5 * 40.0 / 500.0)  # N = 1.5: half a gap a request at the pace


def test_a_pace_under_a_millisecond_is_still_a_pace():
    b = rate_budget.budget(1, 1.0, 1, np.array([3.0]), np.array([5.0]), np.array([6.0]), np.array([0.5, 0.5]))
    assert b is not None and b.pace_ms == 0.5 and b.pace_rate == 2000.0


def test_the_window_counts_completions_after_its_start_and_up_to_its_end():
    # the first wave (ending at 1 s, the c-th completion: the window's start) stalled 1.3 s and is not counted; the
    # requests sent at 4 s end exactly at the window's end (5 s) and are: their 200 ms first token moves the split
    rows = [_record(float(t), GAPS) for t in range(1, 6) for _ in range(2)]
    rows[6:8] = [_record(4.0, (80.0,) * 7 + (100.0, 140.0), ttft=200.0)] * 2
    rows += [_record(-0.3, (80.0,) * 8 + (560.0,), ttft=100.0)] * 2  # sent at -0.3 s, ending at 1 s
    b = steady.window_repeat(_point(), load.requests_from_records(rows)).rate_budget
    assert b.shares["first"] == pytest.approx((6 * 100.0 + 2 * 200.0) / 8 / 1000.0)
    assert b.stalls_per_request == pytest.approx(6 / 8)  # the six others' 260 ms gaps; 140 ms is under two paces


def test_open_and_transient_loads_have_no_slots_to_split():
    r = load.requests_from_records([_record(float(t), GAPS) for t in range(6) for _ in range(2)])
    capped = Point("p", "baseline", "agent", "qps", 2, 2.0, 12, 1)  # Poisson arrivals under a concurrency cap
    burst = Point("p", "baseline", "agent", "burst", 2, None, 12, 1)
    for point in (capped, burst):
        record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                                cache_flushed=False, summary=None, requests_file="requests/p.jsonl")
        assert steady.window_repeat(record, r).rate_budget is None


def test_a_points_row_carries_the_budget_in_percent_over_its_steady_repeats():
    def rep(decode: float, stalls: float, per_request: float, stall_ms: float,
            prefills: tuple[float, float]) -> types.SimpleNamespace:
        shares = {"decode": decode, "stalls": stalls, "first": 0.1, "between": 0.9 - decode - stalls + 0.0}
        return types.SimpleNamespace(rate_budget=rate_budget.Budget(8.0, 8000.0, shares, 6000.0, per_request,
                                                                    stall_ms), prefills=prefills)
    fields = steady._budget_fields([rep(0.8, 0.05, 8.0, 30.0, (4.0, 3.0)), rep(0.7, 0.15, 10.0, math.nan, (6.0, 2.0)),
                                    rep(0.7, 0.15, 10.0, math.nan, (math.nan, math.nan)),
                                    types.SimpleNamespace(rate_budget=None, prefills=(100.0, 100.0))])
    assert fields["budget_decode_pct"] == pytest.approx(220 / 3) and fields["budget_pace_rate"] == 8000.0
    assert fields["budget_stalls_pct"] == pytest.approx(35 / 3)
    assert fields["budget_first_pct"] == pytest.approx(10.0) and fields["budget_stall_ms"] == 30.0
    assert fields["budget_stalls_per_request"] == pytest.approx(28 / 3)
    # prefill batching over the repeats that have a budget and a reading (a Poisson point's is not shown)
    assert fields["prefill_requests_each"] == 5.0 and fields["prefills_per_s"] == 2.5
    assert all(math.isnan(v) for v in steady._budget_fields([]).values())


def _repeat(repeat: int, pace: float) -> steady.RepeatWindow:
    """A lockstep c = 2 repeat, a request sent every second per slot: 9 gaps of 900 ms in all, 8 of them at `pace`."""
    gaps = (pace,) * 8 + (900.0 - 8 * pace,)
    point = Point(f"p{repeat}", "baseline", "agent", "concurrency", 2, None, 12, repeat)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                            cache_flushed=False, summary=None, requests_file="requests/p.jsonl")
    rows = [RequestRecord(start_s=float(t), ok=True, error="", prompt_tokens=100, output_tokens=10, ttft_ms=100.0,
                          itl_ms=gaps, e2e_ms=100.0 + sum(gaps)) for t in range(6) for _ in range(2)]
    return steady.window_repeat(record, load.requests_from_records(rows))


def test_arms_are_paired_on_their_decoding_share_too():
    base = [_repeat(k, pace) for k, pace in ((1, 80.0), (2, 81.0), (3, 79.0))]
    stalled = [_repeat(k, pace) for k, pace in ((1, 60.0), (2, 62.0), (3, 59.0))]  # same rate, more of it stalls
    assert steady.decode_share_pct(base[0], None) == pytest.approx(72.0)
    row = steady.paired_row(base, stalled, stats.Slo(500.0, 50.0, 99.0))
    assert row["decode_share_delta_pct"] == pytest.approx(100 * (181 / 240 - 1), abs=0.5)  # 54.3% against 72%
    assert row["decode_share_verdict"] == "worse" and row["decode_share_pairs"] == 3
    assert row["output_throughput_delta_pct"] == pytest.approx(0.0)  # what the throughput alone does not show
    assert math.isnan(steady.decode_share_pct(types.SimpleNamespace(rate_budget=None), None))
