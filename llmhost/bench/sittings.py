"""Each invocation of a benchmark run, the first and every `--resume`, as it went: RUN_DIR/sittings.jsonl.

    sitting = Sitting.begin(run, began_at, remaining_s)  # SittingBegan; its number = earlier sittings + 1
    sitting.boot(lead, arm_names, started_at, boot_s)    # BootPaid: a server boot, and why it was paid
    sitting.eta_shown(done, eta_s, anchor, added_s)      # EtaShown: an ETA a progress line printed
    sitting.end()                                        # SittingEnded
    history = read(run_dir)                              # every record, each sitting's span, the run's time

A run split over several invocations (a time limit, a crash, ./serve.sh stop) boots its current arm again at each
resume, where the plan counted one boot per arm. So each boot says why it was paid: `resume` when an earlier sitting
already booted one of its arms (a boot record or a point attempt of it: this boot is paid only because the run
resumed mid-arm), `plan` when it is its arms' first, `fault` when the server died during a point and was restarted
for the retry.

Every record is appended as it happens (whole fsynced lines, llmhost.files), so a kill -9 loses nothing recorded
before it. A sitting without its SittingEnded (killed) ended, for the time count, at its last record or point
attempt: what it ran after that (at most a boot's worth, between two progress lines) is unknown and not counted.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from llmhost.bench import records, store
from llmhost.bench.records import PointRecord, Record, RecordError

Cause = Literal["plan", "resume", "fault"]


@dataclasses.dataclass(frozen=True, slots=True)
class SittingBegan(Record):
    sitting: int  # 1: the first invocation, 2..: each --resume
    at: float  # unix seconds: when run_bench.py started
    # The ETA's work left (points + boots) as it began: a resume's is logged here, the manifest keeps the estimate
    remaining_s: float
    event: Literal["began"] = "began"


@dataclasses.dataclass(frozen=True, slots=True)
class BootPaid(Record):
    sitting: int
    arm: str  # the boot's lead arm (arms sharing its launch flags run on it)
    started_at: float  # unix seconds
    boot_s: float  # restart, load generator, warm pass, tool calls; a fault's: the restart alone
    cause: Cause
    error: str = ""  # the restart failed: its time was paid all the same
    event: Literal["boot"] = "boot"


@dataclasses.dataclass(frozen=True, slots=True)
class EtaShown(Record):
    sitting: int
    at: float  # unix seconds
    done: int  # points done when it was printed
    elapsed_s: float  # the run's time so far: earlier sittings' and this one's (between them not counted)
    eta_s: float
    anchor: str | None  # Eta.anchor: the arm whose first point re-fit the ETA freely last; None before any
    added_s: float  # Eta.added_s: work planned during the run (adaptive repeats) joined to the ETA so far
    event: Literal["eta"] = "eta"


@dataclasses.dataclass(frozen=True, slots=True)
class SittingEnded(Record):
    sitting: int
    at: float  # unix seconds
    event: Literal["ended"] = "ended"


SittingRecord = SittingBegan | BootPaid | EtaShown | SittingEnded
EVENTS: dict[str, type[SittingRecord]] = {"began": SittingBegan, "boot": BootPaid, "eta": EtaShown,
                                          "ended": SittingEnded}


def record_from_dict(data: dict[str, Any]) -> SittingRecord:
    """A sittings.jsonl line, by its `event`."""
    kind = EVENTS.get(data.get("event")) if isinstance(data, dict) else None  # type: ignore[arg-type]
    if kind is None:
        raise RecordError(f"sitting record has no known event ({str(data)[:40]})")
    return kind.from_dict(data)


def stamp(row: SittingRecord) -> float:
    """The latest moment a record shows its sitting alive."""
    return row.started_at + row.boot_s if isinstance(row, BootPaid) else row.at


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    sitting: int
    began_at: float
    ended_at: float  # its SittingEnded, else the last thing recorded in it
    is_closed: bool  # False: killed, or still running

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_at - self.began_at)


def spans(rows: Iterable[SittingRecord], attempts: Iterable[PointRecord]) -> tuple[Span, ...]:
    """Each sitting from its SittingBegan to its SittingEnded, or (killed) to the last of its records and of the
    point attempts that ended before the next sitting began."""
    rows, attempts = list(rows), list(attempts)
    began = sorted((r for r in rows if isinstance(r, SittingBegan)), key=lambda r: r.at)
    out = []
    for i, start in enumerate(began):
        ended = [r.at for r in rows if isinstance(r, SittingEnded) and r.sitting == start.sitting]
        if ended:
            out.append(Span(start.sitting, start.at, ended[0], True))
            continue
        until = began[i + 1].at if i + 1 < len(began) else math.inf
        seen = [stamp(r) for r in rows if r.sitting == start.sitting]
        seen += [p.ended_at for p in attempts if start.at <= p.ended_at < until]
        out.append(Span(start.sitting, start.at, max(seen, default=start.at), False))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class History:
    rows: tuple[SittingRecord, ...]
    attempts: tuple[PointRecord, ...]  # every recorded attempt of a point (points.jsonl)
    warnings: tuple[str, ...]  # sittings.jsonl's damage skipped (points.jsonl's is told where points are read)

    @property
    def spans(self) -> tuple[Span, ...]:
        return spans(self.rows, self.attempts)

    @property
    def active_s(self) -> float:
        """The run's time: every sitting's span, the time between sittings (nothing ran) not counted."""
        return sum(s.duration_s for s in self.spans)

    def boots(self) -> list[BootPaid]:
        return [r for r in self.rows if isinstance(r, BootPaid)]

    def etas(self) -> list[EtaShown]:
        return [r for r in self.rows if isinstance(r, EtaShown)]


def read(root: Path) -> History:
    """The run's sittings.jsonl and points.jsonl (absent: none); a damaged line is skipped."""
    run = store.RunStore(root)
    rows = records.read_records(run.sittings_path, record_from_dict, shown_as=run.sittings_path.name)
    attempts = run.read_points()
    return History(tuple(rows.records), tuple(attempts.records), tuple(rows.warnings))


class Sitting:
    """This invocation's recorder: each record appended as it happens, through the run's store."""

    def __init__(self, append: Callable[[Record], None], number: int, began_at: float, earlier_s: float,
                 booted_before: set[str], clock: Callable[[], float] = time.time):
        self.append, self.number, self.began_at, self.clock = append, number, began_at, clock
        self.earlier_s = earlier_s  # the run's time in earlier sittings
        self.booted_before = booted_before  # arms an earlier sitting booted

    @classmethod
    def begin(cls, run: store.RunStore, began_at: float, remaining_s: float,
              clock: Callable[[], float] = time.time) -> "Sitting":
        """Number this sitting after those the run recorded, and record its start."""
        history = read(run.root)
        number = 1 + sum(isinstance(r, SittingBegan) for r in history.rows)
        booted = {b.arm for b in history.boots()} | {p.arm for p in history.attempts}
        sitting = cls(run.append_sitting, number, began_at, history.active_s, booted, clock)
        run.append_sitting(SittingBegan(number, began_at, remaining_s))
        return sitting

    def boot(self, lead: str, arms: Iterable[str], started_at: float, boot_s: float, error: str = "",
             is_fault: bool = False) -> BootPaid:
        """Record a boot of `lead` (serving `arms`) that took boot_s seconds from started_at."""
        cause: Cause = "fault" if is_fault else "resume" if self.booted_before & set(arms) else "plan"
        row = BootPaid(self.number, lead, started_at, boot_s, cause, error)
        self.append(row)
        return row

    def eta_shown(self, done: int, eta_s: float, anchor: str | None, added_s: float) -> None:
        """Record an ETA as a progress line printed it, with the Eta's anchor and added work (EtaShown)."""
        now = self.clock()
        self.append(EtaShown(self.number, now, done, self.earlier_s + now - self.began_at, eta_s, anchor, added_s))

    def end(self) -> None:
        """Record its end. A failed write (a full disk) is not raised: the run is ending anyway (maybe for that
        very reason), and its end then counts from its last record."""
        try:
            self.append(SittingEnded(self.number, self.clock()))
        except OSError:
            pass
