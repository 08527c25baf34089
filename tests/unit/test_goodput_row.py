"""The dashboard's goodput row counts every request sent: failed ones are in the denominator, never good."""
from __future__ import annotations

import pytest

from llmhost import stats
from llmhost.bench import points
from llmhost.bench.records import PointRecord, RequestRecord
from llmhost.report import load, tables

SLO = stats.Slo(ttft_ms=100.0, itl_ms=10.0, pct=50.0)


def _group(n_good: int, n_failed: int) -> tables.Group:
    good = RequestRecord(start_s=1.0, ok=True, error="", prompt_tokens=10, output_tokens=3, ttft_ms=50.0,
                         itl_ms=(5.0, 5.0), e2e_ms=60.0)
    failed = RequestRecord(start_s=1.0, ok=False, error="reset", prompt_tokens=10, output_tokens=0, ttft_ms=None,
                           itl_ms=(), e2e_ms=5.0)
    point = points.make_point("baseline", "chat", "concurrency", 4, None, n_good + n_failed, 1)
    record = PointRecord.of(point, attempt=1, status="ok", error=None, started_at=1.0, ended_at=2.0,
                            cache_flushed=True, summary=None, requests_file="requests/x.jsonl")
    return tables.Group("baseline", "chat", "concurrency", 4, None, n_good + n_failed, (record,),
                        load.requests_from_records([good] * n_good + [failed] * n_failed))


def test_goodput_is_good_over_sent_with_wilson_bounds_on_the_sent_count():
    row = tables.summary_row(_group(n_good=6, n_failed=10), SLO)
    wilson = stats.wilson_ci(6, 16)
    assert row["requests"] == 16 and row["failed_requests"] == 10
    assert row["goodput_pct"] == pytest.approx(100 * 6 / 16)
    assert (row["goodput_lo_pct"], row["goodput_hi_pct"]) == pytest.approx((100 * wilson.lo, 100 * wilson.hi))
    assert row["meets_slo"] is False  # 37.5% < 50%, though every completed request was good
    assert row["slo_decided"] is False  # [18.5, 61.4] straddles 50


def test_a_group_whose_completed_requests_all_pass_meets_the_slo_only_with_few_failures():
    row = tables.summary_row(_group(n_good=15, n_failed=1), SLO)
    assert row["goodput_pct"] == pytest.approx(93.75) and row["meets_slo"] is True and row["slo_decided"] is True
