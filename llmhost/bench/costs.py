"""What a benchmark costs on this host: a server boot and each point's wall time, learned from its last runs.

    model = costs.fit(cfg.results_path / "bench").with_arms(arms)   # the newest runs, else H200 defaults
    model.point_s(point), model.boot_s(quick), model.label   # "calibrated on ..." or "uncalibrated: ..."

How it learns (from points.jsonl, manifest.json, sittings.jsonl and servers/*.json of up to MAX_RUNS newest runs):
* A point costs its load: every ok attempt's wall time (ended_at - started_at: flush, warm-up, load, parse) minus
  the fixed per-point overhead and its priming pass if it had one (points.priming_s; an attempt not measured on a
  flushed cache was primed), divided by its requests, is the seconds per request of its kind (workload,
  pattern, concurrency, rate) *on its arm's launch flags*: an arm's setting changes its cost (prefix cache off made
  agent c=64 cost 2.2x the baseline's on the H200). A planned point is predicted as overhead (+ its priming pass if
  points.is_primed) + requests x the median of its own flags and kind; an arm whose flags were never measured with
  that kind is priced as the baseline's (flags none), else as any arm's; so a 10,000-request tail run is priced
  from the 1,000-request one only if they share a kind (they do not).
* A kind never seen is priced by the physics estimate (points.estimate_s) x the median observed/estimated ratio of
  the points seen: the host's systematic bias (overheads, batched decode slower than the single-stream ITL).
* A point's spread (its throughput's sd from repeat to repeat, % of the mean; llmhost.bench.spread) is the one
  its arm's flags and kind showed in the newest run that repeated it: the budget keeps time for the repeats that
  spread needs for a CI within ±3%.
* A boot is the median boot the newest runs paid (sittings.jsonl: restart, load-generator start, warm pass; a
  fault's restart-only boot and failed boots left out), newest run first until BOOTS_WANTED boots: boot time moves
  with the host's state (80 s one day, 105-185 s the next on the same H200 model), so the last runs are the best
  guess, and more than one boot of them keeps one odd boot from setting the price. A run recorded before sittings
  existed gives its servers' ready_s (shared boots counted once) + the load-generator start and warm pass. A run
  adds RUN_FIXED_S.
With no finished run the model is the documented H200 defaults below and says "uncalibrated".
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path

from llmhost.bench import points, records, sittings, spread, store
from llmhost.bench.arms import Arm
from llmhost.bench.records import Point, PointRecord

# H200 defaults (SGLang 0.5.17, Qwen3-4B, warm kernel caches), used until this host has a run to learn from.
# Restart to ready: the first boot on a fresh host took 63 s on an H200 and 77 s on an H100, the restarts after it
# 28-42 s (two runs, standby launcher; before it 104 s and 58-61 s); ~7 min with cold caches. At 105 s this prior
# overestimated both of those runs by 27-32%. A run on this host replaces it with what its boots took.
RESTART_EST_S = 60.0
# Once per boot: the benchmark module's imports + the tokenizer load (25 s from ready to the warm pass on the H200
# host). The load generator starts, and builds the boot's agent datasets, while the server boots: it adds only
# what outlasts the restart.
LOADGEN_START_S = 25.0
WARM_ARM_EST_S = 7.0  # the untimed warm pass of a full run: 16 requests at c=8, 2.3 s + the per-point overhead
# Once per run, outside boots and points: the load generator's --help check (a full import) before the manifest,
# the dashboard after the last point (the H200 gpu4 run: 448 s wall, 421 s from the manifest to its last point).
RUN_FIXED_S = 30.0
MAX_RUNS = 3  # newest runs learned from: enough points per kind, recent enough to be this host as it is now
# Boots a boot's price takes its median of: a one-boot run alone is one draw (the H200's first boot of a day 150-170 s,
# a boot right after another run's 107 s), so older runs' boots join it until there are this many.
BOOTS_WANTED = 3
RATIO_LIMITS = (0.2, 10.0)  # a bias outside this is a broken record, not a host

Kind = tuple[str, str, int | None, float | None]  # (workload, pattern, concurrency, request rate)
Flags = tuple[str, ...]  # an arm's launch flags: what makes its costs its own
BASELINE_FLAGS: Flags = ()


def kind_of(point: Point) -> Kind:
    return point.workload, point.pattern, point.concurrency, point.request_rate


@dataclasses.dataclass(frozen=True, slots=True)
class CostModel:
    per_request_s: dict[tuple[Flags, Kind], float] = dataclasses.field(default_factory=dict)  # median, runs read
    any_arm_s: dict[Kind, float] = dataclasses.field(default_factory=dict)  # median over every arm's points
    ratio: float = 1.0  # observed / physics estimate, median over the points read
    ready_s: float = RESTART_EST_S  # a server's restart to ready (runs recorded before sittings existed)
    boot_paid_s: float | None = None  # a whole boot as the newest run paid it (restart, load generator, warm pass)
    runs: tuple[str, ...] = ()  # run ids learned from, newest first
    points_seen: int = 0
    boots_seen: int = 0
    arm_flags: Mapping[str, Flags] = dataclasses.field(default_factory=dict)  # the planned arms (with_arms)
    # throughput's sd from repeat to repeat, % of the mean, in the newest run that repeated the point (spread.py)
    spread_pct: dict[tuple[Flags, Kind], float] = dataclasses.field(default_factory=dict)

    @property
    def is_calibrated(self) -> bool:
        return bool(self.runs)

    @property
    def label(self) -> str:
        if not self.is_calibrated:
            return (f"uncalibrated: no finished run to learn from, H200 defaults (restart {RESTART_EST_S:.0f} s, "
                    "points by prefill/decode arithmetic)")
        unseen = sorted(name for name, flags in self.arm_flags.items()
                        if flags != BASELINE_FLAGS and not any(key[0] == flags for key in self.per_request_s))
        return (f"calibrated on this host's last {len(self.runs)} run(s), newest {self.runs[0]} "
                f"({self.points_seen} points, {self.boots_seen} boots: boot {self.boot_s(False):.0f} s, "
                f"unseen points x{self.ratio:.2f}"
                + (f"; never measured here, priced as the baseline: {', '.join(unseen)}" if unseen else "") + ")")

    def with_arms(self, arms: Iterable[Arm]) -> "CostModel":
        """The model pricing these arms' points by their launch flags (an arm's name alone says nothing)."""
        return dataclasses.replace(self, arm_flags={a.name: tuple(a.flags) for a in arms})

    def point_s(self, point: Point) -> float:
        """Seconds the point should take on this host."""
        kind = kind_of(point)
        flags = self.arm_flags.get(point.arm)
        per = self.per_request_s.get((flags, kind)) if flags is not None else None
        if per is None:
            per = self.per_request_s.get((BASELINE_FLAGS, kind), self.any_arm_s.get(kind))
        if per is not None:
            prime_s = points.priming_s(point) if points.is_primed(point) else 0.0
            return points.LOADGEN_OVERHEAD_S + prime_s + point.num_prompts * per
        return points.estimate_s(point) * self.ratio

    def spread(self, point: Point) -> float | None:
        """How far the point's throughput moved from repeat to repeat on its arm's flags, as % of the mean; None
        when this host never repeated it on them (another arm's spread is not borrowed: the budget's reserve
        share covers what is not known)."""
        flags = self.arm_flags.get(point.arm)
        return self.spread_pct.get((flags, kind_of(point))) if flags is not None else None

    def boot_s(self, quick: bool) -> float:
        """Per-boot time outside the points: the restart, the load generator's start, the warm pass of a full run
        (a boot learned whole is taken as paid, quick or not: the warm pass is a few seconds of it)."""
        if self.boot_paid_s is not None:
            return self.boot_paid_s
        return max(self.ready_s, LOADGEN_START_S) + (0.0 if quick else WARM_ARM_EST_S)

    def plan_s(self, plan: list[Point], boots: int, quick: bool) -> float:
        return RUN_FIXED_S + sum(map(self.point_s, plan)) + boots * self.boot_s(quick)


def ok_points(run: Path) -> list[PointRecord]:
    """The run's ok attempts with a positive wall time; [] when points.jsonl is absent or unreadable."""
    try:
        rows = records.read_records(run / "points.jsonl", PointRecord.from_dict).records
    except (OSError, ValueError):
        return []
    return [r for r in rows if r.status == "ok" and r.ended_at > r.started_at and r.num_prompts > 0]


def ready_times(run: Path) -> list[float]:
    """ready_s of each boot of the run (a shared boot's copied record, same started_at, once)."""
    seen: dict[str, float] = {}
    for path in sorted((run / "servers").glob("*.json")):
        try:
            rec = records.ServerRecord.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if rec.ready_s > 0:
            seen.setdefault(rec.started_at, rec.ready_s)
    return list(seen.values())


def boots_paid(run: Path) -> list[float]:
    """Every whole boot the run paid, planned or resumed (sittings.jsonl), without failed and fault boots."""
    try:
        history = sittings.read(run)
    except (OSError, ValueError):
        return []
    return [b.boot_s for b in history.boots() if b.cause != "fault" and not b.error and b.boot_s > 0]


def arm_flags(run: Path) -> dict[str, Flags]:
    """The run's arms' launch flags by name, from its manifest ({} when it is missing or damaged)."""
    try:
        return {a.name: tuple(a.flags) for a in store.read_manifest(run / "manifest.json").arms}
    except records.RecordError:
        return {}


@dataclasses.dataclass(frozen=True, slots=True)
class RunSeen:
    name: str
    done: list[PointRecord]
    flags: dict[str, Flags]  # arm name -> flags
    ready: list[float]  # servers' ready_s
    paid: list[float]  # whole boots (sittings)


def fit(bench_dir: Path, max_runs: int = MAX_RUNS) -> CostModel:
    """The cost model learned from the newest runs under RESULTS_DIR/bench (run ids sort by time)."""
    runs: list[RunSeen] = []
    dirs = sorted((d for d in bench_dir.glob("*") if d.is_dir() and not d.is_symlink()), reverse=True) \
        if bench_dir.is_dir() else []
    for run in dirs:
        done = ok_points(run)
        if done:
            runs.append(RunSeen(run.name, done, arm_flags(run), ready_times(run), boots_paid(run)))
        if len(runs) == max_runs:
            break
    if not runs:
        return CostModel()
    per: dict[tuple[Flags, Kind], list[float]] = {}
    any_arm: dict[Kind, list[float]] = {}
    for seen in runs:
        for r in seen.done:
            prime_s = 0.0 if r.cache_flushed else points.priming_s(r)  # what it spent on priming
            cost = max(0.0, r.ended_at - r.started_at - points.LOADGEN_OVERHEAD_S - prime_s) / r.num_prompts
            any_arm.setdefault(kind_of(r), []).append(cost)
            if r.arm in seen.flags:  # an arm the manifest does not name has no flags to price by
                per.setdefault((seen.flags[r.arm], kind_of(r)), []).append(cost)
    spread_pct: dict[tuple[Flags, Kind], float] = {}
    for seen in runs:  # newest first: the newest run that repeated a point sets its spread
        for (arm, workload, pattern, conc, rate, _), (values, _) in spread.throughput_by_repeat(seen.done).items():
            pct = spread.spread_pct(values)
            if arm in seen.flags and not math.isnan(pct):
                spread_pct.setdefault((seen.flags[arm], (workload, pattern, conc, rate)), pct)
    done = [r for seen in runs for r in seen.done]
    ratio = statistics.median((r.ended_at - r.started_at) / points.estimate_s(r, primed=not r.cache_flushed)
                              for r in done)
    ready = [s for seen in runs for s in seen.ready]
    paid: list[float] = []  # the newest runs' recorded boots, newest first, until there are BOOTS_WANTED
    for seen in runs:
        if len(paid) >= BOOTS_WANTED:
            break
        paid += seen.paid
    return CostModel(per_request_s={k: statistics.median(v) for k, v in per.items()},
                     any_arm_s={k: statistics.median(v) for k, v in any_arm.items()},
                     ratio=min(max(ratio, RATIO_LIMITS[0]), RATIO_LIMITS[1]),
                     ready_s=statistics.median(ready) if ready else RESTART_EST_S,
                     boot_paid_s=statistics.median(paid) if paid else None,
                     runs=tuple(seen.name for seen in runs), points_seen=len(done),
                     boots_seen=len(paid) if paid else len(ready), spread_pct=spread_pct)
