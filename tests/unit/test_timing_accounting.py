"""Start-up timing as documented: every phase read from SGLang's own lines, the phases in the order SGLang logs them."""
from __future__ import annotations

import pytest

from llmhost.bench import startup_bench
from llmhost.bench.records import StartupRecord
from llmhost.serve import startup

# A start with --tp-size 2: SGLang 0.5.17 stamps each scheduler rank's lines with it (" TP0"), the launcher's not.
TP2_START = ["[2026-12-01 10:00:05] server_args=ServerArgs(tp_size=2)",
             "[2026-12-01 10:00:25 TP0] Init torch distributed begin.",
             "[2026-12-01 10:00:25 TP1] Init torch distributed begin.",
             "[2026-12-01 10:00:27 TP0] Load weight end. elapsed=0.21 s, type=Qwen3ForCausalLM",
             "[2026-12-01 10:00:30 TP0] Memory pool end. avail mem=12.79 GB",
             "[2026-12-01 10:00:40 TP0] Capture target prefill CUDA graph end. elapsed=9.87 s",
             "[2026-12-01 10:00:46 TP0] Capture target decode CUDA graph end. elapsed=6.41 s",
             "[2026-12-01 10:00:48] INFO:     Application startup complete."]


def test_scheduler_lines_stamped_with_their_rank_end_their_phases():
    launched, ready = startup.log_epoch("2026-12-01 10:00:00"), startup.log_epoch("2026-12-01 10:00:50")
    parts = startup.phases(TP2_START, launched, ready)
    assert [(p.name, p.seconds) for p in parts] == [
        ("launcher", 5), ("scheduler start", 20), ("weights", 2), ("KV pool", 3), ("prefill graphs", 10),
        ("decode graphs", 6), ("HTTP + tokenizer workers", 2), ("first generation", 2)]


def test_stamps_with_data_parallel_ranks_or_milliseconds_are_read_to_the_second():
    lines = ["[2026-12-01 10:00:05.912] server_args=ServerArgs(dp_size=2)",
             "[2026-12-01 10:00:25 DP0 TP0] Init torch distributed begin."]
    assert startup.marker_times(lines) == {"launcher": startup.log_epoch("2026-12-01 10:00:05"),
                                           "scheduler start": startup.log_epoch("2026-12-01 10:00:25")}


def start(arm: str, phases: dict[str, float]) -> StartupRecord:
    return StartupRecord(arm, 1, "ok", "2026-12-01T10:00:00Z", 70.0, sum(phases.values()), phases)


LEAN = {"launcher": 20, "scheduler start": 20, "decode graphs": 5, "first generation": 3}  # no prefill graphs
FULL = {"launcher": 20, "scheduler start": 20, "prefill graphs": 9, "decode graphs": 5, "first generation": 3}


def test_an_arms_phase_medians_stay_in_log_order_when_its_first_start_lacked_a_phase():
    (arm,) = startup_bench.summarize([start("a", LEAN), start("a", FULL)])
    assert list(arm.phases) == ["launcher", "scheduler start", "prefill graphs", "decode graphs", "first generation"]
    assert arm.phases["prefill graphs"] == pytest.approx(9)


def test_the_tables_phase_columns_are_in_log_order_whichever_arm_logged_a_phase_first():
    head = startup_bench.table_lines(startup_bench.summarize([start("lean", LEAN), start("full", FULL)]))[0]
    assert head.index("scheduler start") < head.index("prefill graphs") < head.index("decode graphs") \
        < head.index("first generation")
