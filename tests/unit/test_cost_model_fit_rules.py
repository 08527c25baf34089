"""The cost model's fit on worked examples: a kind's seconds per request and the host's bias are medians (one odd
point does not set the price), the bias is clamped to what a host can be, and an old run's boot is its servers'
median ready time."""
from __future__ import annotations

import json

import pytest

from llmhost.bench import arms as arms_mod, costs, points, store
from llmhost.bench.records import Manifest, PointRecord, PointSummary, ServerRecord, append_records
from llmhost.provenance import Gpu, Provenance

PROVENANCE = Provenance(created_at="2026-01-01T12:00:00Z", command=("run_bench.py",), git_commit=None, versions={},
                        gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)
SUMMARY = PointSummary(duration_s=10.0, completed=64, failed=0, request_throughput=6.4, input_throughput=1.0,
                       output_throughput=1000.0, total_throughput=1000.0, offered_rate=None, achieved_rate=6.4,
                       client_bound=False)


def done(point: points.Point, wall_s: float) -> PointRecord:
    return PointRecord.of(point, attempt=1, status="ok", error=None, started_at=1000.0, ended_at=1000.0 + wall_s,
                          cache_flushed=True, summary=SUMMARY, requests_file="requests/x.jsonl")


def write_run(bench_dir, run_id: str, rows: list[PointRecord], ready_s: dict[str, float] | None = None):
    run = bench_dir / run_id
    (run / "servers").mkdir(parents=True)
    append_records(run / "points.jsonl", rows)
    for name, seconds in (ready_s or {}).items():
        rec = ServerRecord(arm=name, launch_command=None, server_info={}, ready_s=seconds, started_at=f"t-{name}")
        (run / "servers" / f"{name}.json").write_text(json.dumps(rec.to_dict()))
    return run


def chat_c16(repeat: int, arm: str = "baseline") -> points.Point:
    return points.make_point(arm, "chat", "concurrency", 16, None, 64, repeat)  # chat is not primed


def test_a_kinds_seconds_per_request_is_the_median_of_its_attempts_on_its_flags(tmp_path):
    # three repeats at 0.1, 0.2 and 0.9 s per request: the median 0.2 s prices it, not the mean 0.4 s
    rows = [done(chat_c16(r), points.LOADGEN_OVERHEAD_S + 64 * per) for r, per in ((1, 0.1), (2, 0.2), (3, 0.9))]
    run = write_run(tmp_path / "bench", "20260101-120000", rows)
    base = arms_mod.REGISTRY["baseline"]
    store.RunStore(run).write_manifest(Manifest("r", PROVENANCE, {}, 1, None, (base,), (), ()))
    model = costs.fit(tmp_path / "bench").with_arms([base])
    assert model.point_s(chat_c16(1)) == pytest.approx(4.5 + 64 * 0.2)
    assert model.point_s(points.make_point("baseline", "chat", "concurrency", 16, None, 100, 1)) == \
        pytest.approx(4.5 + 100 * 0.2)


def test_a_kind_no_arm_flags_priced_is_the_median_over_every_arms_attempts(tmp_path):
    # no manifest: no arm's flags are known, so the kind is priced from every arm's attempts, median 0.2 s
    rows = [done(chat_c16(1, "a"), 4.5 + 64 * 0.1), done(chat_c16(1, "b"), 4.5 + 64 * 0.2),
            done(chat_c16(1, "c"), 4.5 + 64 * 0.9)]
    write_run(tmp_path / "bench", "20260101-120000", rows)
    model = costs.fit(tmp_path / "bench")
    assert model.point_s(chat_c16(2)) == pytest.approx(4.5 + 64 * 0.2)


def test_the_hosts_bias_is_the_median_observed_over_estimated_ratio(tmp_path):
    seen = [chat_c16(1), points.make_point("baseline", "chat", "concurrency", 1, None, 32, 1),
            points.make_point("baseline", "long", "concurrency", 1, None, 16, 1)]
    # the three kinds ran 1x, 2x and 6x their estimate: the bias is 2 (the mean, 3, is one odd point's)
    rows = [done(p, k * points.estimate_s(p, primed=False)) for p, k in zip(seen, (1.0, 2.0, 6.0))]
    write_run(tmp_path / "bench", "20260101-120000", rows)
    model = costs.fit(tmp_path / "bench")
    assert model.ratio == pytest.approx(2.0)
    unseen = points.make_point("baseline", "chat", "qps", None, 4.0, 64, 1)
    assert model.point_s(unseen) == pytest.approx(2.0 * points.estimate_s(unseen))


@pytest.mark.parametrize(("times", "bias"), [(50.0, 10.0), (0.05, 0.2)])
def test_a_bias_outside_what_a_host_can_be_is_held_at_its_limit(tmp_path, times, bias):
    """A point recorded at 50x (or 1/20 of) its estimate is a broken record: the bias stops at 10 (or 0.2)."""
    p = chat_c16(1)
    write_run(tmp_path / "bench", "20260101-120000", [done(p, times * points.estimate_s(p, primed=False))])
    assert costs.fit(tmp_path / "bench").ratio == pytest.approx(bias)


def test_a_run_without_sittings_boots_at_its_servers_median_ready_time(tmp_path):
    # three boots ready after 100, 110 and 300 s: a boot is 110 s (not the mean 170) + the warm pass of a full run
    write_run(tmp_path / "bench", "20260101-120000", [done(chat_c16(1), 30.0)],
              {"baseline": 100.0, "fp8-kv": 110.0, "page-16": 300.0})
    model = costs.fit(tmp_path / "bench")
    assert model.ready_s == pytest.approx(110.0) and model.boots_seen == 3
    assert model.boot_s(quick=False) == pytest.approx(110.0 + 7.0)
    assert model.boot_s(quick=True) == pytest.approx(110.0)
