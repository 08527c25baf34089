"""The run's ETA, re-fit as points finish, without swinging.

    eta = Eta(model, todo_points, boots=3, quick=False)
    eta.point_done(point, wall_s); eta.boot_done(wall_s); eta.add(extra_points); eta.seconds_left()

The remaining time is the cost model's estimate of every point left (llmhost.bench.costs) times a correction per
kind of point (workload, pattern), plus the boots left. A correction is the mean of observed/estimated over the
finished points of its kind with the model's own estimate counted as one more observation of 1.0 (damping: one slow
point moves its kind halfway, not all the way); kinds not seen yet take the same mean over all finished points. A
boot left is the mean of the boots seen with the model's estimate counted as one more; before any, the model's
estimate times the points' correction (a slow host is slow at both). After each update the new remaining time is
held within ±SWING of what the previous ETA, counted down since, says is left — except at the first finished point
of each arm, the one moment a new server's speed is first seen. So a user sees a countdown that bends, never one
that jumps from 12 to 34 minutes mid-arm. `anchor` (the arm whose first point gave the last free re-fit) and
`added_s` (work added by `add`) let the run's end tell how far the projected finish moved after each arm's first
point (llmhost.bench.reckoning).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from llmhost.bench.costs import CostModel
from llmhost.bench.records import Point

SWING = 0.25  # largest relative change of the ETA at one update, after an arm's first point
PRIOR_WEIGHT = 1.0  # the model's estimate counts as this many observations of ratio 1.0


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Eta:
    def __init__(self, model: CostModel, todo: Iterable[Point], boots: int, quick: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.model, self.clock = model, clock
        self.left: dict[str, Point] = {p.point_id: p for p in todo}
        self.boots_left = boots
        self.boot_model_s = model.boot_s(quick)
        self.boots_seen: list[float] = []
        self.ratios: dict[tuple[str, str], list[float]] = {}
        self.arms_seen: set[str] = set()
        self.anchor: str | None = None  # the arm whose first finished point re-fit the ETA freely, latest first
        self.added_s = 0.0  # seconds of work `add` joined to the ETA: planned, not a swing
        self.fit_s = self.refit()
        self.fit_at = clock()

    def ratio(self, kind: tuple[str, str] | None) -> float:
        """Damped observed/estimated of a kind (None or unseen: of every finished point)."""
        seen = self.ratios.get(kind) if kind else None
        if not seen:
            seen = [r for rs in self.ratios.values() for r in rs]
        return (PRIOR_WEIGHT + sum(seen)) / (PRIOR_WEIGHT + len(seen))

    def refit(self) -> float:
        points_s = sum(self.model.point_s(p) * self.ratio((p.workload, p.pattern)) for p in self.left.values())
        return points_s + self.boots_left * self.boot_left_s()

    def boot_left_s(self) -> float:
        """One boot still to run (see the module docstring): a boot seen is not scaled by the points again."""
        if not self.boots_seen:
            return self.boot_model_s * self.ratio(None)
        return (PRIOR_WEIGHT * self.boot_model_s + sum(self.boots_seen)) / (PRIOR_WEIGHT + len(self.boots_seen))

    def update(self, is_free: bool) -> None:
        """Re-fit; held within ±SWING of the counted-down previous ETA unless `is_free`."""
        now = self.clock()
        fitted, expected = self.refit(), self.seconds_left(now)
        if not is_free and expected > 0 and (self.left or self.boots_left):  # nothing left is exactly 0
            fitted = min(max(fitted, (1 - SWING) * expected), (1 + SWING) * expected)
        self.fit_s, self.fit_at = fitted, now

    def point_done(self, point: Point, wall_s: float) -> None:
        """A point finished (ok or failed) after wall_s seconds."""
        if self.left.pop(point.point_id, None) is None:
            return
        estimate_s = self.model.point_s(point)
        if wall_s > 0 and estimate_s > 0:
            self.ratios.setdefault((point.workload, point.pattern), []).append(wall_s / estimate_s)
        is_first_of_arm = point.arm not in self.arms_seen
        self.arms_seen.add(point.arm)
        if is_first_of_arm:
            self.anchor = point.arm
        self.update(is_free=is_first_of_arm)

    def boot_done(self, wall_s: float) -> None:
        """A server boot (restart, load generator, warm pass) took wall_s seconds."""
        self.boots_left = max(0, self.boots_left - 1)
        self.boots_seen.append(wall_s)
        self.update(is_free=not self.arms_seen)

    def add(self, extra: Iterable[Point], boots: int = 0) -> None:
        """Work planned during the run (adaptive repeats; a tune's refine trials, each with its boot): its cost joins
        the ETA at once (not a swing)."""
        added = [p for p in extra if p.point_id not in self.left]
        self.left.update({p.point_id: p for p in added})
        self.boots_left += boots
        added_s = sum(self.model.point_s(p) * self.ratio((p.workload, p.pattern)) for p in added) \
            + boots * self.boot_left_s()
        self.fit_s += added_s
        self.added_s += added_s

    def seconds_left(self, now: float | None = None) -> float:
        return max(0.0, self.fit_s - ((self.clock() if now is None else now) - self.fit_at))
