"""Where a server start's Python imports spend their time, from CPython's own import profile.

With PYTHONPROFILEIMPORTTIME=1 in the server's environment (`run_bench.py --startup N --import-profile` sets it),
every Python process the server starts (launcher, scheduler, detokenizer, tokenizer workers) writes one line per
module it imports to stderr, which serve.sh keeps in server.log:

    import time: self [us] | cumulative | imported package
    import time:      1708 |      40648 | site

    profile = read(state_dir / "server.log")  # None when the log holds no such lines
    profile.line()  # 'imports T s summed over N processes: PACKAGE S s, ... , K more R s'

Self times are summed per top-level package over all processes: processes that import side by side overlap in
wall time, so the total is import work, not seconds of the start. Lines of processes writing at once stay whole
(each is one short write), so the sums hold however the processes interleave.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

ENV = "PYTHONPROFILEIMPORTTIME=1"  # KEY=VALUE, as SERVER_ENV takes it
_HEADER = "import time: self [us] | cumulative | imported package"  # each process writes it once, first
_ROW = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \| *(\S+)\s*$")
_MEMBER = re.compile(r"^\[[\w.-]+\] ")  # ROUTER=on: server.log tags each member's lines '[worker0] '
TOP = 8  # packages named in a line


@dataclasses.dataclass(frozen=True, slots=True)
class ImportProfile:
    processes: int  # Python processes whose profile the log holds
    packages_s: dict[str, float]  # top-level package -> self seconds over its modules and processes, largest first

    @property
    def total_s(self) -> float:
        return sum(self.packages_s.values())

    def line(self, top: int = TOP) -> str:
        """'imports T s summed over N processes: PACKAGE S s, ..., K more R s': the `top` largest packages."""
        shown = list(self.packages_s.items())[:top]
        rest = self.total_s - sum(s for _, s in shown)
        more = len(self.packages_s) - len(shown)
        tail = f", {more} more {rest:.1f} s" if more else ""
        body = ", ".join(f"{name} {s:.1f} s" for name, s in shown)
        return f"imports {self.total_s:.1f} s summed over {self.processes} processes: {body}{tail}"


def parse(lines: Iterable[str]) -> ImportProfile | None:
    """The profile in these log lines (every member's, summed, behind the router); None when they hold none."""
    processes, self_us = 0, {}
    for line in lines:
        line = _MEMBER.sub("", line, count=1)
        if line.startswith(_HEADER):
            processes += 1
            continue
        row = _ROW.match(line)
        if row:
            package = row.group(2).split(".", 1)[0]
            self_us[package] = self_us.get(package, 0) + int(row.group(1))
    if not self_us:
        return None
    ordered = sorted(self_us.items(), key=lambda kv: (-kv[1], kv[0]))
    return ImportProfile(max(processes, 1), {name: us / 1e6 for name, us in ordered})


def read(log: Path) -> ImportProfile | None:
    """The profile in a server log; None when the log cannot be read or holds none."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            return parse(f)
    except OSError:
        return None
