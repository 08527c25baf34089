"""How a run did against its own estimate, across resumes, and how far its ETA swung: its closing line and JSON.

    r = reckoning.of_run(run_dir, manifest)   # None: a run recorded without an estimate (before runs kept one)
    r.lines()     # ["took 21m04s in 3 sittings vs estimate 20m00s (+5%); resuming cost 2 extra boots (3m20s) and
                  #   2 start-ups (0m50s): 16m54s without them (-15%)", "ETA held within +12%/-8% after each arm's
                  #   first point (bound ±25%)"]
    r.to_json()   # estimate_s, adaptive_s, calibrated, actual_s, sittings, resume_boots, resume_boots_s,
                  # resume_starts_s, cut_s, actual_without_resuming_s, error_pct, eta_swing_up_pct, ...

The estimate is the dry run's, recorded in the manifest when the run was planned (llmhost.bench.dryrun). The actual
time is the sum of the sittings' spans (llmhost.bench.sittings): the time between sittings, when nothing ran, is not
counted. Adaptive repeats (llmhost.bench.budget) are work the plan kept budget for but did not price: the cost
model's price of those that joined (the ETA's added_s, each sitting's last) is added to the estimate they are
measured against. error_pct = actual / (estimate + adaptive) - 1. A boot paid only because a sitting resumed mid-arm
was not in the plan, nor was each resumed sitting's start-up (the load generator's check and the preflight, before
its first boot or point: the plan counts the run's fixed part once), nor the work a sitting's end cut off (after its
last finished point or boot: the interrupted point runs again), so the time without all three is given beside it:
the estimate's own error, apart from the cost of splitting.

ETA swing. Every ETA a progress line printed projects the run's finish: P = elapsed + ETA, on the run's time
(elapsed counts the earlier sittings). After each arm's first finished point in a sitting (the ETA's one free
re-fit, llmhost.bench.eta) the first projection printed, P0, is the reference; every later projection of that
segment (until the next arm's first point, or the sitting's end) swings by (P - A) / P0 - 1, where A is the work
planned since P0 (adaptive repeats: a new plan, not a misjudged one). Reported: the largest swing up and down over
all segments, beside the bound the ETA keeps per update (eta.SWING).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmhost.bench import eta as eta_mod, sittings
from llmhost.bench.eta import fmt_s
from llmhost.bench.records import Estimate, Manifest
from llmhost.bench.sittings import EtaShown


def swing(shown: Iterable[EtaShown]) -> tuple[float, float] | None:
    """(largest upward, largest downward) swing in percent of the projected finish after each arm's first point
    (the module docstring); None when no ETA was printed after one."""
    first: dict[tuple[int, str], EtaShown] = {}
    up = down = 0.0
    for row in shown:
        if row.anchor is None:
            continue
        ref = first.setdefault((row.sitting, row.anchor), row)
        projected_s = ref.elapsed_s + ref.eta_s
        if projected_s <= 0:
            continue
        moved = (row.elapsed_s + row.eta_s - (row.added_s - ref.added_s)) / projected_s - 1
        up, down = max(up, 100 * moved), min(down, 100 * moved)
    return (up, down) if first else None


@dataclasses.dataclass(frozen=True, slots=True)
class Reckoning:
    estimate_s: float
    calibrated: bool
    actual_s: float  # the sittings' spans summed
    sittings: int
    resume_boots: int
    resume_boots_s: float
    swing_pct: tuple[float, float] | None  # (up, down), None: no ETA after an arm's first point
    warnings: tuple[str, ...] = ()  # sittings.jsonl lines skipped (a torn last line: a kill mid-write)
    resume_starts_s: float = 0.0  # the resumed sittings' start-ups, each until its first boot or point
    cut_s: float = 0.0  # each sitting but the last, after its last finished point or boot: work run again
    adaptive_s: float = 0.0  # the cost model's price of the adaptive repeats that joined the plan

    @property
    def planned_s(self) -> float:
        return self.estimate_s + self.adaptive_s

    @property
    def without_resuming_s(self) -> float:
        return self.actual_s - self.resume_boots_s - self.resume_starts_s - self.cut_s

    def error_pct(self, actual_s: float) -> float:
        return 100 * (actual_s / self.planned_s - 1) if self.planned_s > 0 else 0.0

    def lines(self) -> list[str]:
        took = (f"took {fmt_s(self.actual_s)} in {self.sittings} sitting{'s' if self.sittings != 1 else ''} vs "
                f"estimate {fmt_s(self.estimate_s)}"
                + (f" + {fmt_s(self.adaptive_s)} of adaptive repeats = {fmt_s(self.planned_s)}"
                   if self.adaptive_s else "")
                + f" ({self.error_pct(self.actual_s):+.0f}%"
                f"{'' if self.calibrated else ', uncalibrated'})")
        if self.sittings > 1:
            costs = [f"{self.resume_boots} extra boot{'s' if self.resume_boots != 1 else ''} "
                     f"({fmt_s(self.resume_boots_s)})"] if self.resume_boots else []
            costs.append(f"{self.sittings - 1} start-up{'s' if self.sittings != 2 else ''} "
                         f"({fmt_s(self.resume_starts_s)})")
            costs += [f"{fmt_s(self.cut_s)} of cut-off work"] if self.cut_s >= 0.5 else []
            took += (f"; resuming cost {', '.join(costs[:-1]) + ' and ' if len(costs) > 1 else ''}{costs[-1]}: "
                     f"{fmt_s(self.without_resuming_s)} without them ({self.error_pct(self.without_resuming_s):+.0f}%)")
        if self.swing_pct is None:
            return [took]
        up, down = self.swing_pct
        bound = 100 * eta_mod.SWING
        held = "held within" if max(up, -down) <= bound else "swung"
        return [took, f"ETA {held} {up:+.0f}%/{down:+.0f}% after each arm's first point (bound ±{bound:.0f}%)"]

    def to_json(self) -> dict[str, Any]:
        up, down = self.swing_pct or (None, None)
        return {"estimate_s": round(self.estimate_s), "adaptive_s": round(self.adaptive_s, 1),
                "calibrated": self.calibrated,
                "actual_s": round(self.actual_s, 1), "sittings": self.sittings, "resume_boots": self.resume_boots,
                "resume_boots_s": round(self.resume_boots_s, 1), "resume_starts_s": round(self.resume_starts_s, 1),
                "cut_s": round(self.cut_s, 1),
                "actual_without_resuming_s": round(self.without_resuming_s, 1),
                "error_pct": round(self.error_pct(self.actual_s), 1),
                "error_without_resuming_pct": round(self.error_pct(self.without_resuming_s), 1),
                "eta_swing_up_pct": None if up is None else round(up, 1),
                "eta_swing_down_pct": None if down is None else round(down, 1),
                "eta_swing_bound_pct": round(100 * eta_mod.SWING)}


def of_run(root: Path, manifest: Manifest) -> Reckoning | None:
    """The run's reckoning from its manifest's estimate and its sittings; None when it recorded no estimate (or
    no sitting: killed between its manifest and its start)."""
    history = sittings.read(root) if manifest.estimate is not None else None
    if manifest.estimate is None or history is None or not history.spans:
        return None
    resumed = [b for b in history.boots() if b.cause == "resume"]
    return Reckoning(estimate_s=manifest.estimate.estimate_s, calibrated=manifest.estimate.calibrated,
                     actual_s=history.active_s, sittings=len(history.spans), resume_boots=len(resumed),
                     resume_boots_s=sum(b.boot_s for b in resumed), swing_pct=swing(history.etas()),
                     warnings=history.warnings, resume_starts_s=sum(start_up_s(history, s) for s in history.spans[1:]),
                     cut_s=sum(cut_off_s(history, s) for s in history.spans[:-1]),
                     adaptive_s=sum(max((e.added_s for e in history.etas() if e.sitting == s.sitting), default=0.0)
                                    for s in history.spans))


def start_up_s(history: sittings.History, span: sittings.Span) -> float:
    """A sitting's time before its first boot or point attempt began (all of it when it reached neither)."""
    firsts = [b.started_at for b in history.boots() if b.sitting == span.sitting]
    firsts += [p.started_at for p in history.attempts if span.began_at <= p.started_at <= span.ended_at]
    return max(0.0, min(firsts, default=span.ended_at) - span.began_at)


def cut_off_s(history: sittings.History, span: sittings.Span) -> float:
    """A sitting's time after its last finished point attempt or boot (after its start-up when it finished neither:
    that time is its start-up, start_up_s, not counted twice)."""
    lasts = [b.started_at + b.boot_s for b in history.boots() if b.sitting == span.sitting]
    lasts += [p.ended_at for p in history.attempts if span.began_at <= p.ended_at <= span.ended_at]
    return max(0.0, span.ended_at - max(lasts, default=span.began_at + start_up_s(history, span)))


def resume_line(estimate: Estimate | None, sitting: int, remaining_s: float) -> str | None:
    """What a --resume says as it begins (sitting 2, 3, ...): the run stays measured against its planned estimate;
    the cost model's time for the work left is logged beside it (sittings.jsonl). None for a first sitting."""
    if sitting < 2 or estimate is None:
        return None
    return (f"sitting {sitting} of this run: measured against its planned estimate {fmt_s(estimate.estimate_s)}; "
            f"the work left is ~{fmt_s(remaining_s)} by the cost model (its boots included)")
