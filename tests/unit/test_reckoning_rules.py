"""A run against its estimate on worked examples: the ETA swing nets out only the work planned since its reference,
work cut off after a boot counts from the boot's end, a start-up ends where the first point began, and the closing
line's edges (a swing of exactly the bound is held, under half a second of cut-off work is not named)."""
from __future__ import annotations

import dataclasses

import pytest

from fixtures_reckoning import attempt, manifest
from llmhost.bench import reckoning, store
from llmhost.bench.sittings import BootPaid, EtaShown, SittingBegan, SittingEnded


def shown(elapsed_s: float, eta_s: float, added_s: float) -> EtaShown:
    return EtaShown(1, 0.0, 0, elapsed_s, eta_s, "baseline", added_s)


def test_the_swing_nets_out_only_the_work_added_since_its_reference():
    # 50 s of repeats had joined before the reference: it projects 100 + 900 = 1,000 s
    rows = [shown(100.0, 900.0, 50.0),
            shown(200.0, 800.0, 50.0),  # 1,000 s, nothing added since: 0%
            shown(300.0, 760.0, 110.0),  # 1,060 s with 60 s added since: 1,000 s, 0%
            shown(400.0, 760.0, 110.0),  # 1,160 - 60 = 1,100 s: +10%
            shown(500.0, 400.0, 110.0)]  # 900 - 60 = 840 s: -16%
    up, down = reckoning.swing(rows)
    assert up == pytest.approx(10.0) and down == pytest.approx(-16.0)


def tally_of(tmp_path, rows, attempts, estimate_s: float) -> reckoning.Reckoning:
    run = store.RunStore.create(tmp_path)
    for row in rows:
        run.append_sitting(row)
    for a in attempts:
        run.append_point(a)
    tally = reckoning.of_run(run.root, manifest(estimate_s))
    assert tally is not None
    return tally


def test_work_cut_off_after_a_boot_counts_from_the_boots_end(tmp_path):
    # sitting 1: a boot 10-110 s, stopped at 150 s before any point finished: 40 s cut off (not 140 s)
    # sitting 2: started up 20 s, a resume boot of 100 s, one point to its end
    tally = tally_of(tmp_path, [SittingBegan(1, 0.0, 600.0), BootPaid(1, "baseline", 10.0, 100.0, "plan"),
                                SittingEnded(1, 150.0), SittingBegan(2, 1000.0, 600.0),
                                BootPaid(2, "baseline", 1020.0, 100.0, "resume"), SittingEnded(2, 1500.0)],
                     [attempt(1130.0, 1500.0)], 500.0)
    assert (tally.actual_s, tally.cut_s, tally.resume_starts_s, tally.resume_boots_s) == (650.0, 40.0, 20.0, 100.0)
    assert tally.without_resuming_s == pytest.approx(650.0 - 40.0 - 20.0 - 100.0)


def test_a_start_up_ends_where_the_first_point_attempt_began(tmp_path):
    # sitting 2 reached no boot: its first point began 30 s in and ended 100 s in; its start-up is 30 s
    tally = tally_of(tmp_path, [SittingBegan(1, 0.0, 600.0), BootPaid(1, "baseline", 10.0, 100.0, "plan"),
                                SittingEnded(1, 400.0), SittingBegan(2, 1000.0, 300.0), SittingEnded(2, 1100.0)],
                     [attempt(110.0, 400.0), attempt(1030.0, 1100.0)], 500.0)
    assert (tally.actual_s, tally.resume_starts_s, tally.cut_s) == (500.0, 30.0, 0.0)
    assert tally.lines()[0] == ("took 8m20s in 2 sittings vs estimate 8m20s (+0%); resuming cost 1 start-up (0m30s): "
                                "7m50s without them (-6%)")


def test_a_swing_of_exactly_the_bound_is_held_within_it():
    tally = reckoning.Reckoning(1200.0, True, 1200.0, 1, 0, 0.0, (25.0, -25.0))
    assert tally.lines()[1] == "ETA held within +25%/-25% after each arm's first point (bound ±25%)"


def test_under_half_a_second_of_cut_off_work_is_not_named():
    tally = reckoning.Reckoning(600.0, True, 660.0, 2, 0, 0.0, None, resume_starts_s=60.0, cut_s=0.3)
    assert tally.lines() == ["took 11m00s in 2 sittings vs estimate 10m00s (+10%); resuming cost 1 start-up "
                             "(1m00s): 9m59s without them (-0%)"]
    named = dataclasses.replace(tally, cut_s=0.5)
    assert named.lines()[0].endswith("resuming cost 1 start-up (1m00s) and 0m00s of cut-off work: 9m59s without them "
                                     "(-0%)")
