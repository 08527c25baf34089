"""A run's time against its estimate: what resuming cost is named once, never twice."""
from __future__ import annotations

from fixtures_reckoning import attempt, manifest
from llmhost.bench import reckoning, store
from llmhost.bench.sittings import BootPaid, SittingBegan, SittingEnded


def test_a_resumed_sitting_that_reached_no_boot_is_a_start_up_not_also_cut_off_work(tmp_path):
    run = store.RunStore.create(tmp_path)
    for row in [SittingBegan(1, 0.0, 900.0), BootPaid(1, "baseline", 10.0, 100.0, "plan"), SittingEnded(1, 410.0),
                SittingBegan(2, 5000.0, 600.0), SittingEnded(2, 5030.0),  # stopped during its preflight
                SittingBegan(3, 9000.0, 600.0), BootPaid(3, "baseline", 9020.0, 100.0, "resume"),
                SittingEnded(3, 9500.0)]:
        run.append_sitting(row)
    run.append_point(attempt(110.0, 400.0))  # the first sitting's end cut off 10 s
    run.append_point(attempt(9120.0, 9500.0))
    tally = reckoning.of_run(run.root, manifest(750.0))
    assert tally is not None
    # 410 + 30 + 500 s ran; resuming added a 100 s boot, 30 + 20 s of start-ups and 10 s cut off: 780 s without them
    doc = tally.to_json()
    assert (doc["actual_s"], doc["resume_boots_s"], doc["resume_starts_s"], doc["cut_s"]) == (940.0, 100.0, 50.0, 10.0)
    assert doc["actual_without_resuming_s"] == 780.0
    assert tally.lines()[0].endswith("resuming cost 1 extra boot (1m40s), 2 start-ups (0m50s) and 0m10s of "
                                     "cut-off work: 13m00s without them (+4%)")
