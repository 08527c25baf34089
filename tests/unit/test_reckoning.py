"""A run against its own estimate: sittings recorded as they happen (a kill loses nothing earlier), the time between
sittings not counted, boots paid only for resuming, the closing line and JSON, and how far the ETA swung."""
from __future__ import annotations

import dataclasses

import pytest

from llmhost.bench import points, reckoning, sittings, store
from llmhost.bench.costs import CostModel
from llmhost.bench.eta import Eta
from llmhost.bench.records import Estimate, Manifest, PointRecord
from llmhost.bench.sittings import BootPaid, EtaShown, SittingBegan, SittingEnded
from llmhost.provenance import Gpu, Provenance

PROVENANCE = Provenance(created_at="2026-12-01T10:00:00Z", command=("run_bench.py",), git_commit=None,
                        versions={}, gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)
POINT = points.make_point("baseline", "chat", "concurrency", 64, None, 256, 1)


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def manifest(estimate_s: float | None) -> Manifest:
    est = Estimate(estimate_s, True, "calibrated on ...", 2, 1200.0) if estimate_s is not None else None
    return Manifest("r", PROVENANCE, {}, 1, None, (), (), (POINT,), estimate=est)


def attempt(arm: str, ended_at: float) -> PointRecord:
    return PointRecord.of(dataclasses.replace(POINT, arm=arm), attempt=1, status="ok", error=None,
                          started_at=ended_at - 10, ended_at=ended_at, cache_flushed=True, summary=None,
                          requests_file="requests/x.jsonl")


def eta(anchor: str | None, elapsed_s: float, eta_s: float, added_s: float = 0.0, sitting: int = 1) -> EtaShown:
    return EtaShown(sitting, 0.0, 0, elapsed_s, eta_s, anchor, added_s)


def test_a_killed_sitting_ends_at_its_last_record_and_the_time_between_sittings_is_not_counted():
    rows = [SittingBegan(1, 1000.0, 900.0), EtaShown(1, 1100.0, 1, 100.0, 800.0, "baseline", 0.0),
            SittingBegan(2, 5000.0, 700.0), BootPaid(2, "baseline", 5010.0, 150.0, "resume"),
            SittingEnded(2, 5600.0)]
    points_done = [attempt("baseline", 1300.0), attempt("baseline", 5400.0)]  # the kill came after 1300
    spans = sittings.spans(rows, points_done)
    assert [(s.began_at, s.ended_at, s.is_closed) for s in spans] == [(1000.0, 1300.0, False),
                                                                      (5000.0, 5600.0, True)]
    assert sum(s.duration_s for s in spans) == 300.0 + 600.0  # not the 3,700 s nothing ran


def test_a_resume_numbers_its_sitting_and_pays_a_resume_boot_only_for_an_arm_booted_before(tmp_path):
    run = store.RunStore.create(tmp_path)
    first = sittings.Sitting.begin(run, 1000.0, 900.0, clock=Clock(1000.0))
    assert first.number == 1 and first.boot("baseline", ["baseline"], 1000.0, 150.0).cause == "plan"
    run.append_point(attempt("baseline", 1300.0))  # then a kill -9: no SittingEnded
    clock = Clock(5000.0)
    second = sittings.Sitting.begin(run, 5000.0, 600.0, clock=clock)
    assert second.number == 2 and second.earlier_s == 300.0
    assert second.boot("baseline", ["baseline"], 5000.0, 140.0).cause == "resume"  # mid-arm: the plan had one
    assert second.boot("fp8-kv", ["fp8-kv"], 5500.0, 150.0).cause == "plan"
    assert second.boot("fp8-kv", ["fp8-kv"], 5700.0, 90.0, is_fault=True).cause == "fault"
    clock.now = 5100.0
    model_eta = Eta(CostModel(), [POINT], boots=0, quick=False)
    second.eta_shown(3, 420.0, model_eta.anchor, model_eta.added_s)
    second.end()
    history = sittings.read(run.root)
    assert [type(r).__name__ for r in history.rows] == ["SittingBegan", "BootPaid", "SittingBegan", "BootPaid",
                                                         "BootPaid", "BootPaid", "EtaShown", "SittingEnded"]
    shown = history.etas()[0]
    assert shown.elapsed_s == 300.0 + 100.0 and shown.eta_s == 420.0 and shown.done == 3  # the run's time so far
    assert history.active_s == 300.0 + 100.0 and history.warnings == ()


def test_the_closing_line_and_json_count_sittings_and_the_boots_resuming_cost(tmp_path):
    run = store.RunStore.create(tmp_path)
    for row in [SittingBegan(1, 0.0, 1200.0), BootPaid(1, "baseline", 5.0, 160.0, "plan"), SittingEnded(1, 700.0),
                SittingBegan(2, 9000.0, 600.0), BootPaid(2, "baseline", 9025.0, 100.0, "resume"),
                BootPaid(2, "baseline", 9200.0, 40.0, "fault"), SittingEnded(2, 9300.0),
                SittingBegan(3, 20000.0, 300.0), BootPaid(3, "fp8-kv", 20030.0, 100.0, "resume"),
                SittingEnded(3, 20564.0)]:
        run.append_sitting(row)
    for ended_at in (690.0, 9290.0, 20560.0):  # each sitting's last finished point: 10, 10 and 4 s before its end
        run.append_point(attempt("baseline", ended_at))
    tally = reckoning.of_run(run.root, manifest(1200.0))
    assert tally is not None
    # the first sitting's 5 s start-up is the plan's fixed part; the resumed ones' 25 + 30 s were not planned, nor
    # the 10 + 10 s of points the first two sittings' ends cut off (the last sitting's end is the run's)
    assert tally.lines() == ["took 26m04s in 3 sittings vs estimate 20m00s (+30%); resuming cost 2 extra boots "
                             "(3m20s), 2 start-ups (0m55s) and 0m20s of cut-off work: 21m29s without them (+7%)"]
    doc = tally.to_json()  # no ETA recorded above: no swing line
    assert (doc["estimate_s"], doc["calibrated"], doc["actual_s"], doc["sittings"]) == (1200, True, 1564.0, 3)
    assert (doc["resume_boots"], doc["resume_boots_s"], doc["resume_starts_s"], doc["cut_s"],
            doc["actual_without_resuming_s"]) == (2, 200.0, 55.0, 20.0, 1289.0)
    assert doc["error_pct"] == 30.3 and doc["eta_swing_up_pct"] is None


def test_a_sitting_resumed_at_an_arm_boundary_still_pays_its_start_up(tmp_path):
    run = store.RunStore.create(tmp_path)
    for row in [SittingBegan(1, 0.0, 900.0), BootPaid(1, "baseline", 10.0, 100.0, "plan"), SittingEnded(1, 400.0),
                SittingBegan(2, 5000.0, 500.0), BootPaid(2, "fp8-kv", 5020.0, 100.0, "plan"),
                SittingEnded(2, 5500.0)]:
        run.append_sitting(row)
    run.append_point(attempt("baseline", 400.0))  # the first sitting ended with its last point: nothing cut off
    tally = reckoning.of_run(run.root, manifest(900.0))
    assert (tally.resume_boots, tally.resume_starts_s, tally.without_resuming_s) == (0, 20.0, 880.0)
    assert tally.lines()[0].endswith("; resuming cost 1 start-up (0m20s): 14m40s without them (-2%)")


def test_adaptive_repeats_that_joined_are_measured_at_the_cost_models_price_beside_the_estimate(tmp_path):
    run = store.RunStore.create(tmp_path)
    for row in [SittingBegan(1, 0.0, 1000.0), eta("baseline", 300.0, 700.0, added_s=40.0),
                eta("baseline", 400.0, 640.0, added_s=90.0), SittingEnded(1, 500.0),  # two repeats joined: 90 s
                SittingBegan(2, 900.0, 600.0), eta("fp8-kv", 600.0, 500.0, added_s=30.0, sitting=2),
                SittingEnded(2, 1600.0)]:
        run.append_sitting(row)
    run.append_point(attempt("baseline", 500.0))
    tally = reckoning.of_run(run.root, manifest(1000.0))
    assert tally.adaptive_s == 120.0 and tally.planned_s == 1120.0  # each sitting's Eta counts its own
    assert tally.lines()[0].startswith("took 20m00s in 2 sittings vs estimate 16m40s + 2m00s of adaptive repeats = "
                                       "18m40s (+7%)")


def test_one_sitting_says_so_and_an_uncalibrated_estimate_is_named(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_sitting(SittingBegan(1, 0.0, 600.0))
    run.append_sitting(SittingEnded(1, 540.0))
    uncalibrated = dataclasses.replace(manifest(600.0), estimate=Estimate(600.0, False, "uncalibrated: ...", 1, None))
    assert reckoning.of_run(run.root, uncalibrated).lines() == [
        "took 9m00s in 1 sitting vs estimate 10m00s (-10%, uncalibrated)"]


def test_a_run_recorded_without_an_estimate_gets_no_reckoning(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_sitting(SittingBegan(1, 0.0, 600.0))
    assert reckoning.of_run(run.root, manifest(None)) is None
    assert reckoning.of_run(store.RunStore.create(tmp_path).root, manifest(600.0)) is None  # nothing recorded
    assert reckoning.resume_line(None, 2, 300.0) is None and reckoning.resume_line(manifest(600.0).estimate, 1,
                                                                                     300.0) is None
    assert "planned estimate 10m00s" in reckoning.resume_line(manifest(600.0).estimate, 2, 300.0)


def test_the_swing_is_the_projected_finish_against_the_first_projection_after_each_arms_first_point():
    shown = [eta(None, 10.0, 5000.0),  # before any point: the ETA is free to move
             eta("baseline", 200.0, 800.0),  # reference: finish at 1000
             eta("baseline", 300.0, 820.0),  # 1120: +12%
             eta("baseline", 400.0, 520.0),  # 920: -8%
             eta("fp8-kv", 600.0, 900.0),  # a new arm's first point: a new reference, 1500
             eta("fp8-kv", 700.0, 950.0, added_s=150.0),  # 1650 with 150 s of repeats planned: 1500, +0%
             eta("baseline", 50.0, 100.0, sitting=2)]  # a resumed sitting starts its own segment
    up, down = reckoning.swing(shown)
    assert up == pytest.approx(12.0) and down == pytest.approx(-8.0)
    assert reckoning.swing([eta(None, 10.0, 100.0)]) is None


def test_the_swing_line_says_whether_the_eta_kept_its_bound():
    base = reckoning.Reckoning(1200.0, True, 1264.0, 1, 0, 0.0, (12.0, -8.0))
    assert base.lines()[1] == "ETA held within +12%/-8% after each arm's first point (bound ±25%)"
    wide = dataclasses.replace(base, swing_pct=(31.0, -2.0))
    assert wide.lines()[1] == "ETA swung +31%/-2% after each arm's first point (bound ±25%)"
    assert wide.to_json()["eta_swing_up_pct"] == 31.0 and wide.to_json()["eta_swing_bound_pct"] == 25


def test_the_eta_names_the_arm_whose_first_point_anchors_it_and_counts_added_work():
    plan = [POINT, dataclasses.replace(POINT, point_id="b2", repeat=2),
            dataclasses.replace(POINT, point_id="f1", arm="fp8-kv")]
    clock = Clock(0.0)
    model = CostModel()
    e = Eta(model, plan, boots=2, quick=False, clock=clock)
    assert e.anchor is None
    e.point_done(plan[0], 30.0)
    assert e.anchor == "baseline"
    e.point_done(plan[1], 30.0)
    assert e.anchor == "baseline"
    extra = dataclasses.replace(POINT, point_id="b3", repeat=3)
    e.add([extra])
    assert e.added_s == pytest.approx(model.point_s(extra) * e.ratio(("chat", "concurrency")))
    e.point_done(plan[2], 30.0)
    assert e.anchor == "fp8-kv"

    # a tune's refine trial: its boot joins the ETA with its points (on the H200 it showed 1m06s for 3m03s of work)
    left, boots, added = e.seconds_left(), e.boots_left, e.added_s
    trial = dataclasses.replace(POINT, point_id="t1", arm="cps2896")
    e.add([trial], boots=1)
    assert e.boots_left == boots + 1
    assert e.seconds_left() == pytest.approx(left + model.point_s(trial) * e.ratio(("chat", "concurrency"))
                                             + e.boot_left_s())
    assert e.added_s - added == pytest.approx(e.seconds_left() - left)  # planned work, not a swing


def test_a_boot_left_is_the_boots_seen_damped_by_the_model_and_not_scaled_by_the_points_again():
    """Points ran at half their estimate and a boot took 60 s: the next boot is (model + 60) / 2, not that times 0.5
    (the boot seen already says how fast this host boots); before any boot, the points' correction scales it."""
    clock = Clock(0.0)
    model = CostModel()
    plan = [POINT, dataclasses.replace(POINT, point_id="b2", repeat=2)]
    e = Eta(model, plan, boots=2, quick=False, clock=clock)
    e.point_done(plan[0], 0.5 * model.point_s(POINT))
    assert e.ratio(None) == pytest.approx(0.75)  # half the estimate, damped by the model's own 1.0
    assert e.boot_left_s() == pytest.approx(model.boot_s(False) * 0.75)
    e.boot_done(60.0)
    assert e.boot_left_s() == pytest.approx((model.boot_s(False) + 60.0) / 2)
    e.boot_done(80.0)
    assert e.boot_left_s() == pytest.approx((model.boot_s(False) + 60.0 + 80.0) / 3)


def test_the_closing_json_is_complete_and_rounded():
    tally = reckoning.Reckoning(1200.4, False, 1264.26, 2, 1, 100.04, (12.34, -8.76), resume_starts_s=20.02)
    assert tally.to_json() == {
        "estimate_s": 1200, "adaptive_s": 0.0, "calibrated": False, "actual_s": 1264.3, "sittings": 2,
        "resume_boots": 1, "resume_boots_s": 100.0, "resume_starts_s": 20.0, "cut_s": 0.0,
        "actual_without_resuming_s": 1144.2, "error_pct": 5.3,
        "error_without_resuming_pct": -4.7, "eta_swing_up_pct": 12.3, "eta_swing_down_pct": -8.8,
        "eta_swing_bound_pct": 25}
    assert tally.lines()[0] == ("took 21m04s in 2 sittings vs estimate 20m00s (+5%, uncalibrated); resuming cost "
                                "1 extra boot (1m40s) and 1 start-up (0m20s): 19m04s without them (-5%)")
    assert reckoning.Reckoning(0.0, True, 60.0, 1, 0, 0.0, None).error_pct(60.0) == 0.0  # no estimate to miss
