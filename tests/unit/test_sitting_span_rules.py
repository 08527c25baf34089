"""The edges of a run's sittings (llmhost.bench.sittings): where a killed sitting ends, which attempts are its, what a
damaged sittings.jsonl line says, and what the recorder writes for a boot and an ETA."""
from __future__ import annotations

import pytest

from fixtures_reckoning import attempt
from llmhost.bench import sittings, store
from llmhost.bench.records import RecordError
from llmhost.bench.sittings import BootPaid, EtaShown, SittingBegan, SittingEnded


def test_a_boot_shows_its_sitting_alive_until_the_boot_ended():
    assert sittings.stamp(BootPaid(1, "baseline", 1000.0, 150.0, "plan")) == 1150.0
    assert sittings.stamp(EtaShown(1, 1200.0, 0, 0.0, 10.0, None, 0.0)) == 1200.0
    # a sitting killed during its boot's wait ended after the boot, not where it began
    (span,) = sittings.spans([SittingBegan(1, 990.0, 900.0), BootPaid(1, "baseline", 1000.0, 150.0, "plan")], [])
    assert (span.sitting, span.began_at, span.ended_at, span.is_closed) == (1, 990.0, 1150.0, False)


def test_a_killed_sitting_takes_the_attempts_that_ended_before_the_next_began():
    rows = [SittingBegan(1, 1000.0, 900.0), SittingBegan(2, 3000.0, 900.0), SittingBegan(3, 5000.0, 900.0)]
    attempts = [attempt(1000.0, 1000.0), attempt(1100.0, 1400.0), attempt(2900.0, 3000.0),  # at 3000: the 2nd's
                attempt(3100.0, 3500.0), attempt(5100.0, 5200.0)]
    spans = sittings.spans(rows, attempts)
    assert [(s.sitting, s.began_at, s.ended_at) for s in spans] == [(1, 1000.0, 1400.0), (2, 3000.0, 3500.0),
                                                                     (3, 5000.0, 5200.0)]
    # one that ended as it began recorded nothing after: it lasted no time, it did not run on to the next
    (only,) = sittings.spans([SittingBegan(1, 1000.0, 900.0)], [attempt(900.0, 999.0)])
    assert only.ended_at == 1000.0 and only.duration_s == 0.0


def test_sittings_are_taken_in_time_order_whatever_their_lines_order():
    rows = [SittingBegan(2, 3000.0, 900.0), SittingBegan(1, 1000.0, 900.0), SittingEnded(2, 3300.0)]
    spans = sittings.spans(rows, [attempt(1100.0, 1200.0), attempt(3100.0, 3200.0)])
    assert [(s.sitting, s.ended_at, s.is_closed) for s in spans] == [(1, 1200.0, False), (2, 3300.0, True)]


def test_a_line_without_a_known_event_is_one_named_error():
    for data in ({"event": "paused", "sitting": 1}, {"sitting": 1}, ["began"]):
        with pytest.raises(RecordError) as err:
            sittings.record_from_dict(data)  # type: ignore[arg-type]
        assert str(err.value) == f"sitting record has no known event ({str(data)[:40]})"
    with pytest.raises(RecordError) as err:  # the line's first 40 characters, no more
        sittings.record_from_dict({"event": "x", "note": "y" * 100})
    assert str(err.value) == "sitting record has no known event ({'event': 'x', 'note': '" + "y" * 16 + ")"
    assert sittings.record_from_dict({"event": "ended", "sitting": 2, "at": 5.0}) == SittingEnded(2, 5.0)


def test_a_damaged_line_is_skipped_and_named_by_its_file(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_sitting(SittingBegan(1, 1000.0, 900.0))
    with open(run.sittings_path, "a") as f:
        f.write('{"event": "paused"}\n')
    history = sittings.read(run.root)
    assert len(history.rows) == 1 and len(history.warnings) == 1
    assert history.warnings[0].startswith("sittings.jsonl")


def test_the_recorder_writes_a_failed_boot_and_an_etas_anchor(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_point(attempt(900.0, 950.0))  # an attempt of the chat point's arm, with no boot recorded
    sitting = sittings.Sitting.begin(run, 1000.0, 900.0, clock=lambda: 1060.0)
    assert "baseline" in sitting.booted_before  # its arm ran before: booting it again is the resume's cost
    failed = sitting.boot("baseline", ["baseline"], 1000.0, 45.0, error="exited with 1")
    assert failed.error == "exited with 1" and failed.cause == "resume"
    sitting.eta_shown(2, 300.0, "baseline", 12.0)
    rows = sittings.read(run.root).rows
    assert rows[1] == failed and rows[2] == EtaShown(1, 1060.0, 2, 60.0, 300.0, "baseline", 12.0)
