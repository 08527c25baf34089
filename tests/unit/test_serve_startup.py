"""The start-up timeline, read from real SGLang 0.5.17 logs captured on the H200."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmhost.serve import startup

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # SGLang logs local time; the captures were taken on a UTC host
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def at(stamp: str) -> float:
    return startup.log_epoch(stamp)


def test_eight_tokenizer_workers_start_is_split_into_phases_that_add_up():
    lines = (CAPTURES / "startup_8_tokenizer_workers.log").read_text().splitlines()
    launched, ready = at("2026-12-01 15:44:55"), at("2026-12-01 15:47:16")
    parts = {p.name: p.seconds for p in startup.phases(lines, launched, ready)}
    assert parts["launcher"] == 24 and parts["scheduler start"] == 24  # 15:45:19, then 15:45:43
    assert parts["prefill graphs"] == 44 and parts["decode graphs"] == 6  # SGLang: elapsed=43.91 s, 5.55 s
    assert parts["HTTP + tokenizer workers"] >= 30  # the workers come up one by one after Uvicorn starts
    assert sum(parts.values()) == pytest.approx(ready - launched)


def test_one_tokenizer_worker_start_from_the_older_capture():
    lines = (CAPTURES / "server.log").read_text().splitlines()
    launched, ready = at("2026-11-29 15:54:40"), at("2026-11-29 15:56:57")
    parts = {p.name: p.seconds for p in startup.phases(lines, launched, ready)}
    assert parts["prefill graphs"] == 60 and parts["KV pool"] == 2
    assert list(parts)[-1] == "first generation" and sum(parts.values()) == pytest.approx(ready - launched)


def test_a_missing_phase_is_folded_into_the_next_so_the_sum_still_holds():
    lines = ["[2026-12-01 10:00:05] server_args=ServerArgs(x)",
             "[2026-12-01 10:00:20] Memory pool end. avail mem=12 GB",  # no weights line
             "[2026-12-01 10:00:30] Capture target decode CUDA graph end. elapsed=3.4 s"]  # no prefill graphs
    parts = startup.phases(lines, at("2026-12-01 10:00:00"), at("2026-12-01 10:00:40"))
    assert [(p.name, p.seconds) for p in parts] == [("launcher", 5), ("KV pool", 15), ("decode graphs", 10),
                                                    ("first generation", 10)]


def test_the_line_names_the_total_and_each_phase(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[2026-12-01 10:00:05] server_args=ServerArgs(x)\n"
                   "[2026-12-01 10:00:25] INFO:     Application startup complete.\n")
    line = startup.timeline_line(log, "2026-12-01T10:00:00Z", at("2026-12-01 10:00:27"))
    assert line == "ready in 27 s: launcher 5 s, HTTP + tokenizer workers 20 s, first generation 2 s"


def test_no_timeline_without_a_start_time_or_log_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("no timestamps here\n")
    assert startup.timeline_line(log, None, 0.0) is None
    assert startup.timeline_line(log, "2026-12-01T10:00:00Z", at("2026-12-01 10:01:00")) is None
    assert startup.timeline_line(tmp_path / "absent.log", "2026-12-01T10:00:00Z", 0.0) is None
    assert startup.timeline_line(log, "yesterday", 0.0) is None


def test_the_timeline_of_a_real_start_is_structured_with_its_ready_time(tmp_path):
    log = CAPTURES / "startup_8_tokenizer_workers.log"
    timeline = startup.read_timeline(log, "2026-12-01T15:44:55Z", at("2026-12-01 15:47:16"))
    assert timeline is not None and timeline.ready_s == 141
    names = [p.name for p in timeline.phases]
    assert names[:2] == ["launcher", "scheduler start"] and names[-1] == "first generation"
    assert sum(p.seconds for p in timeline.phases) == pytest.approx(timeline.ready_s)
    assert timeline.line().startswith("ready in 141 s: launcher 24 s, scheduler start 24 s")


def test_a_log_without_markers_still_gives_the_ready_time_but_no_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("no timestamps here\n")
    timeline = startup.read_timeline(log, "2026-12-01T10:00:00Z", at("2026-12-01 10:00:30"))
    assert timeline == startup.Timeline(30.0, ()) and timeline.line() is None


def test_with_several_workers_the_timeline_is_the_one_that_finished_its_start_up_last(tmp_path):
    """ROUTER=on: readiness waited for every worker, so the phases shown are the slowest worker's, read from each
    worker's own log."""
    def worker(name: str, weights_end: str, decode_end: str) -> Path:
        log = tmp_path / f"{name}.log"
        log.write_text(f"[2026-12-01 10:00:05] server_args=ServerArgs(model_path='m')\n"
                       f"[2026-12-01 10:00:20] Init torch distributed begin.\n"
                       f"[2026-12-01 {weights_end}] Load weight end. elapsed=0.21 s\n"
                       f"[2026-12-01 {decode_end}] Capture target decode CUDA graph end. elapsed=3 s\n"
                       f"[2026-12-01 {decode_end}] INFO:     Application startup complete.\n")
        return log
    fast, slow = worker("worker0", "10:00:22", "10:00:30"), worker("worker1", "10:00:24", "10:00:41")
    launched, ready = "2026-12-01T10:00:00Z", at("2026-12-01 10:00:50")  # the fixture's UTC: log and pane agree
    both = [(fast, None), (slow, None)]
    timeline = startup.read_timeline(tmp_path / "server.log", launched, ready, both)
    got = {p.name: p.seconds for p in timeline.phases}
    assert got == {"launcher": 5, "scheduler start": 15, "weights": 4, "decode graphs": 17,
                   "HTTP + tokenizer workers": 0, "first generation": 9}
    assert startup.read_timeline(tmp_path / "server.log", launched, ready, both[::-1]).phases == timeline.phases
    routed = startup.read_timeline(tmp_path / "server.log", launched, ready, both, router=True)
    assert [(p.name, p.seconds) for p in routed.phases][-1] == ("router + first generation", 9)


def test_two_workers_sharing_an_h200_count_the_second_ones_start_from_its_own_launch():
    """SGLang 0.5.17 on one H200, ROUTER=on GPUS=0,0 (captured): worker0 launched with the pane at 13:48:17 and
    served at 13:49:18; worker1, launched at 13:49:20 once worker0 served, served at 13:50:02; the router then
    started and the service was ready at 13:50:16. The wait for worker0 is its own phase, not worker1's launcher
    (the line said 'launcher 74 s' before), and the router's start joins the first generation."""
    logs = [(CAPTURES / "router_shared_gpu_worker0.log", at("2026-12-03 13:48:17") + 0.4),
            (CAPTURES / "router_shared_gpu_worker1.log", at("2026-12-03 13:49:20") + 0.7)]
    timeline = startup.read_timeline(Path("server.log"), "2026-12-03T13:48:17Z", at("2026-12-03 13:50:16"), logs,
                                     router=True)
    assert timeline.line() == ("ready in 119 s: earlier workers 63 s, launcher 11 s, scheduler start 15 s, weights "
                               "1 s, KV pool 1 s, prefill graphs 9 s, decode graphs 4 s, HTTP + tokenizer workers 1 s, "
                               "router + first generation 14 s")
    assert sum(p.seconds for p in timeline.phases) == timeline.ready_s
    # a launch stamp left by an earlier start (before this one) or unknown: counted from the service's start
    stale = [(path, at("2026-12-03 13:40:00")) for path, _ in logs]
    unknown = [(path, None) for path, _ in logs]
    for given in (stale, unknown):
        phases = startup.read_timeline(Path("server.log"), "2026-12-03T13:48:17Z", at("2026-12-03 13:50:16"), given,
                                       router=True).phases
        assert phases[0] == startup.Phase("launcher", 74.0) and startup.EARLIER not in [p.name for p in phases]
