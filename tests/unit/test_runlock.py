"""The run lock: one benchmark run per server, the owner named in the refusal, free again once released."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmhost.bench import runlock


def test_a_second_run_is_refused_naming_the_owner_until_the_first_releases(tmp_path):
    lock = runlock.RunLock(tmp_path)
    lock.acquire(["run_bench.py", "--quick"])
    lock.record_owner(["run_bench.py", "--quick"], tmp_path / "results" / "bench" / "r1")
    probe = ("import sys; from pathlib import Path; from llmhost.bench import runlock\n"
             "try:\n    runlock.RunLock(Path(sys.argv[1])).acquire(['run_bench.py'])\n"
             "except runlock.RunBusy as exc:\n    print(exc); sys.exit(75)\n")
    other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert other.returncode == 75, other.stderr
    assert f"pid {os.getpid()}, run {tmp_path / 'results' / 'bench' / 'r1'}, since " in other.stdout
    assert "(run_bench.py --quick)" in other.stdout
    lock.release()
    again = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout


def test_an_unreadable_owner_is_said_so_rather_than_guessed(tmp_path):
    (tmp_path / runlock.LOCK_FILE).write_text("{half")
    assert runlock.owner_line(tmp_path / runlock.LOCK_FILE) == "owner not readable yet"


@pytest.mark.parametrize("command", [["run_bench.py"], ["run_bench.py", "--resume", "results/bench/x"]])
def test_the_owner_record_is_rewritten_whole(tmp_path, command):
    lock = runlock.RunLock(tmp_path)
    lock.acquire(["run_bench.py", "--quick", "--arms", "baseline,fp8-kv,page-16,triton,no-prefix-cache"])
    lock.record_owner(command, None)
    assert runlock.owner_line(tmp_path / runlock.LOCK_FILE).endswith(f"({' '.join(command)})")
    lock.release()
