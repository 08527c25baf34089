"""Start-up phases: which occurrence of a line ends a phase, lines outside the start, and SGLang's local-time stamps."""
from __future__ import annotations

import calendar
import time

import pytest

from llmhost.serve import startup


@pytest.fixture
def tz(monkeypatch):
    def use(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()
    yield use
    monkeypatch.undo()
    time.tzset()


def utc(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")))


def test_the_first_rank_to_log_a_line_ends_its_phase(tz):
    tz("UTC")
    lines = ["[2026-12-01 10:00:05] server_args=ServerArgs(tp_size=2)",
             "[2026-12-01 10:00:20 TP0] Load weight end. elapsed=0.21 s",
             "[2026-12-01 10:00:23 TP1] Load weight end. elapsed=0.25 s",
             "[2026-12-01 10:00:30 TP0] Memory pool end. avail mem=12 GB"]
    parts = startup.phases(lines, utc("2026-12-01 10:00:00"), utc("2026-12-01 10:00:40"))
    assert [(p.name, p.seconds) for p in parts] == [("launcher", 5), ("weights", 15), ("KV pool", 10),
                                                    ("first generation", 10)]


def test_lines_stamped_before_the_launch_or_after_ready_are_not_phases_of_this_start(tz):
    tz("UTC")
    lines = ["[2026-12-01 09:59:50] Init torch distributed begin.",  # before the launch
             "[2026-12-01 10:00:05] server_args=ServerArgs(x)",
             "[2026-12-01 10:00:20] Load weight end. elapsed=0.2 s",
             "[2026-12-01 10:00:45] Memory pool end. avail mem=12 GB"]  # after ready
    parts = startup.phases(lines, utc("2026-12-01 10:00:00"), utc("2026-12-01 10:00:30"))
    assert [(p.name, p.seconds) for p in parts] == [("launcher", 5), ("weights", 15), ("first generation", 10)]


def test_a_line_stamped_earlier_than_the_previous_phase_end_is_a_zero_phase_and_the_sum_holds(tz):
    tz("UTC")
    lines = ["[2026-12-01 10:00:10] server_args=ServerArgs(x)",
             "[2026-12-01 10:00:08] Init torch distributed begin.",  # stamped 2 s before the launcher's line
             "[2026-12-01 10:00:20] Load weight end. elapsed=0.2 s"]
    parts = startup.phases(lines, utc("2026-12-01 10:00:00"), utc("2026-12-01 10:00:30"))
    assert [(p.name, p.seconds) for p in parts] == [("launcher", 10), ("scheduler start", 0), ("weights", 10),
                                                    ("first generation", 10)]
    assert sum(p.seconds for p in parts) == 30


def test_the_log_is_read_in_local_time_and_the_launch_in_utc(tz, tmp_path):
    tz("JST-9")  # UTC+9, a POSIX rule (no zone files needed): 10:00 in the log is 01:00 UTC
    log = tmp_path / "server.log"
    log.write_text("[2026-12-01 10:00:05] server_args=ServerArgs(x)\n"
                   "[2026-12-01 10:00:25] INFO:     Application startup complete.\n")
    timeline = startup.read_timeline(log, "2026-12-01T01:00:00Z", utc("2026-12-01 01:00:30"))
    assert timeline is not None and timeline.ready_s == 30
    assert [(p.name, p.seconds) for p in timeline.phases] == [("launcher", 5), ("HTTP + tokenizer workers", 20),
                                                              ("first generation", 5)]


def test_lines_stamped_in_the_launch_second_or_the_ready_second_belong_to_this_start(tz):
    tz("UTC")
    lines = ["[2026-12-01 10:00:00] server_args=ServerArgs(x)",  # the launch's own second
             "[2026-12-01 10:00:20] Load weight end. elapsed=0.2 s",
             "[2026-12-01 10:00:30] INFO:     Application startup complete."]  # ready within the same second
    parts = startup.phases(lines, utc("2026-12-01 10:00:00"), utc("2026-12-01 10:00:30"))
    assert [(p.name, p.seconds) for p in parts] == [("launcher", 0), ("weights", 20), ("HTTP + tokenizer workers", 10),
                                                    ("first generation", 0)]


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tz, tmp_path):
    tz("UTC")
    log = tmp_path / "server.log"
    log.write_bytes(b"[2026-12-01 10:00:05] server_args=ServerArgs(x)\n"
                    b"[2026-12-01 10:00:06] a tokenizer said \xff\xfe\n"
                    b"[2026-12-01 10:00:25] INFO:     Application startup complete.\n")
    timeline = startup.read_timeline(log, "2026-12-01T10:00:00Z", utc("2026-12-01 10:00:30"))
    assert timeline is not None and timeline.line() == ("ready in 30 s: launcher 5 s, HTTP + tokenizer workers 20 s, "
                                                        "first generation 5 s")
