"""CPython's import profile in a server log: self seconds per top-level package over every process, whatever the
interleaving, and the one line that names the largest."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmhost.serve import import_profile

HEADER = "import time: self [us] | cumulative | imported package"


def row(self_us: int, name: str, depth: int = 0) -> str:
    return f"import time: {self_us:>9} | {self_us:>10} | {'  ' * depth}{name}"


def test_self_times_add_up_per_top_level_package_over_processes_and_other_lines_are_skipped():
    lines = [HEADER, row(1_000_000, "torch.cuda", 2), "[2026-12-01 15:45:19] server_args=ServerArgs(...)",
             HEADER, row(500_000, "torch"), row(2_500_000, "sglang.srt.server_args", 1), row(250_000, "json"),
             "import time: garbled", row(250_000, "sglang")]
    profile = import_profile.parse(lines)
    assert profile.processes == 2 and profile.packages_s == {"sglang": 2.75, "torch": 1.5, "json": 0.25}
    assert list(profile.packages_s) == ["sglang", "torch", "json"]  # largest first
    assert profile.total_s == pytest.approx(4.5)
    assert profile.line(top=2) == ("imports 4.5 s summed over 2 processes: sglang 2.8 s, torch 1.5 s, "
                                   "1 more 0.2 s")


def test_behind_the_router_every_members_tagged_lines_are_summed():
    """ROUTER=on: server.log prefixes each member's lines with its name; both workers' processes count."""
    lines = [f"[{name}] {line}" for name in ("worker0", "worker1")
             for line in (HEADER, row(1_000_000, "torch"), row(500_000, "sglang.srt"))]
    lines.append("[router] 2026-12-01T10:00:00 INFO smg: Starting router on 127.0.0.1")
    profile = import_profile.parse(lines)
    assert profile.processes == 2 and profile.packages_s == {"torch": 2.0, "sglang": 1.0}


def test_a_log_without_profile_lines_or_no_log_at_all_has_no_profile(tmp_path):
    assert import_profile.parse(["[2026-12-01 15:45:19] Load weight end.", HEADER]) is None
    assert import_profile.read(tmp_path / "missing.log") is None


def test_it_reads_what_cpython_itself_writes_for_a_process_and_its_spawned_child(tmp_path):
    code = ("import multiprocessing as mp, json\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=print); p.start(); p.join()\n")
    script = tmp_path / "two.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        subprocess.run([sys.executable, str(script)], env=env, stderr=out, stdout=out, check=True, timeout=60)
    profile = import_profile.read(log)
    assert profile.processes >= 2 and {"json", "multiprocessing"} <= set(profile.packages_s)
    assert import_profile.ENV.split("=") == ["PYTHONPROFILEIMPORTTIME", "1"]


def test_ties_go_by_name_a_cut_header_still_counts_one_process_and_a_short_list_has_no_tail():
    profile = import_profile.parse([row(100_000, "b"), row(100_000, "a"), row(300_000, "c.x")])
    assert list(profile.packages_s) == ["c", "a", "b"] and profile.processes == 1
    assert profile.line() == "imports 0.5 s summed over 1 processes: c 0.3 s, a 0.1 s, b 0.1 s"


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"\xff\xfe binary noise\n" + f"{HEADER}\n{row(2_000_000, 'torch')}\n".encode())
    assert import_profile.read(log).packages_s == {"torch": 2.0}
