"""The plan under a time budget (`run_bench.py --budget-min N`), and the adaptive repeats that spend what is left.

    planned = plan(arms, workloads, loads, model, budget_s=45 * 60)   # .points, .left_out, .estimate_s, .reserve_s
    extra = extra_repeats(records, model, spare_s)                    # during the run, at the end of each boot

What goes in, in this order, each point only while the cost model (llmhost.bench.costs) says the plan still fits:
1. the headline points (agent c=64, chat c=64) on every arm, MIN_REPEATS repeats each, an arm's all together or
   none (a tight budget drops the last arms rather than leave every arm with an unquotable CI);
2. the baseline's full sweep, its 10,000-request tail run and its 2,000-request burst, one repeat;
3. every other arm's points that its one setting can change (ARM_SCOPE, data per arm), one repeat, arm by arm.
Steps 2-3 stop where the reserve for adaptive repeats begins: RESERVE_SHARE of the budget, or what the repeats the
headline points' spread calls for should cost, whichever is more. A point's spread is how far its throughput moved
from repeat to repeat on its arm's flags in the newest run that repeated it (llmhost.bench.spread); agent c=64 on the
H200 needs 9 repeats for a CI within ±3%, chat c=64 3. A point that does not fit is left out and listed.
Adaptive repeats: after a boot's planned points, a headline point whose throughput CI half-width across repeats
(llmhost.repeats) is still above CI_TARGET_PCT gets one more repeat, widest first, while the boot's share of the
spare time remains: the spare time less what the later boots' headline points' spread calls for, and at least an
even share (`boot_share_s`). Split evenly, the first boot of a 20-minute run on the H200 got 3 more repeats of agent
c=64 (±4.0%) and left the spare time to arms that needed none. The repeats a boot may add (`likely_extra`) get their
datasets built while the server boots, as its planned points do: built inside the point, an agent c=64 repeat took
35 s instead of 24 s. The throughput is the one the dashboard's headline quotes: each steady repeat's steady-window
output tok/s, as the runner recorded it in the point's summary (the whole point's for runs recorded before it did).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from llmhost import repeats
from llmhost.bench import costs, points, spread
from llmhost.bench.arms import Arm, boots
from llmhost.bench.costs import CostModel
from llmhost.bench.records import Point, PointRecord

HEADLINE: tuple[tuple[str, str, int], ...] = (("agent", "concurrency", 64), ("chat", "concurrency", 64))
MIN_REPEATS = 3  # the fewest repeats whose Student-t CI is worth quoting (t(0.975, 2) = 4.3)
MAX_REPEATS = 10  # adaptive repeats stop here: past it a wide CI is the point's own noise, not too few repeats
CI_TARGET_PCT = 3.0  # throughput CI half-width a headline point should reach
DEFAULT_BUDGET_MIN = 45.0
RESERVE_SHARE = 0.15  # of the budget kept from the sweep for adaptive repeats at least (the headline's 3 may use it)

# What each arm's one setting can change, as (workload, pattern) pairs; an arm not listed (FP8 KV, page size,
# attention backend, user arms) can change every sweep point. The radix cache only ever reuses shared prefixes:
# chat and long prompts are random ids that share none, so turning it off changes nothing there.
ARM_SCOPE: dict[str, frozenset[tuple[str, str]]] = {
    "no-prefix-cache": frozenset({("agent", "concurrency"), ("agent", "qps"), ("agent", "cold"), ("agent", "warm"),
                                  ("agent-tools", "concurrency")}),
}


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetPlan:
    points: list[Point]
    left_out: list[Point]  # candidates that did not fit
    estimate_s: float  # points + boots + the run's fixed part, by the cost model
    budget_s: float

    @property
    def reserve_s(self) -> float:
        """Budget left for adaptive repeats."""
        return max(0.0, self.budget_s - self.estimate_s)


def is_headline(workload: str, pattern: str, concurrency: int | None) -> bool:
    return (workload, pattern, concurrency) in HEADLINE


def arm_rows(arm: Arm, workloads: list[str], loads: points.Loads) -> list[points.Row]:
    """The rows an arm runs: the baseline everything, another arm the rows in its scope (all when not listed)."""
    rows = points.with_loads(points.FULL_SWEEP + (points.BASELINE_RUNS if arm.is_baseline else ()), loads)
    scope = ARM_SCOPE.get(arm.name)
    return [r for r in rows if r[0] in workloads and (arm.is_baseline or scope is None or (r[0], r[1]) in scope)]


def planned_repeats(model: CostModel, point: Point) -> int:
    """The repeats a headline point's spread calls for: as many as the spread its flags and kind showed in the
    newest run that repeated it needs for a CI within CI_TARGET_PCT (MIN_REPEATS..MAX_REPEATS; MIN_REPEATS
    unseen)."""
    return spread.repeats_needed(model.spread(point), CI_TARGET_PCT, MIN_REPEATS, MAX_REPEATS)


def candidates(arms: list[Arm], workloads: list[str], loads: points.Loads) -> list[list[Point]]:
    """Every point the budget may take, in units taken whole or not at all, most important first (the module
    docstring's order)."""
    rows = {arm.name: arm_rows(arm, workloads, loads) for arm in arms}
    out = [[points.make_point(arm.name, *r, rep) for rep in range(1, MIN_REPEATS + 1) for r in rows[arm.name]
            if is_headline(r[0], r[1], r[2])] for arm in arms]
    ordered = sorted(arms, key=lambda a: not a.is_baseline)  # the baseline's sweep before the arms'
    out += [[points.make_point(arm.name, *r, 1)] for arm in ordered for r in rows[arm.name]
            if not is_headline(r[0], r[1], r[2])]
    return [unit for unit in out if unit]


def expected_extra_s(heads: Iterable[Point], model: CostModel) -> float:
    """What the repeats after MIN_REPEATS that these headline points' spread calls for should cost (each point
    counted once, whatever repeat of it is given)."""
    seen = {spread.series(p): p for p in heads}
    return sum(max(0, planned_repeats(model, p) - MIN_REPEATS) * model.point_s(p) for p in seen.values())


def kept_s(point: Point, taken: list[Point], model: CostModel, budget_s: float) -> float:
    """The part of the budget a candidate may not use: none for the headline points, for the others the reserve
    for adaptive repeats, RESERVE_SHARE of the budget or what the repeats that the taken headline points' spread
    calls for should cost, whichever is more."""
    if is_headline(point.workload, point.pattern, point.concurrency):
        return 0.0
    heads = [p for p in taken if is_headline(p.workload, p.pattern, p.concurrency)]
    return max(RESERVE_SHARE * budget_s, expected_extra_s(heads, model))


def plan(arms: list[Arm], workloads: list[str], loads: points.Loads, model: CostModel, budget_s: float,
         quick: bool = False) -> BudgetPlan:
    """The candidates that fit budget_s, a boot counted with an arm's first point (arms sharing launch flags
    share a boot, as the runner runs them); an arm whose headline points do not fit is dropped, its sweep too."""
    lead = {arm.name: group[0].name for group in boots(arms) for arm in group}
    taken: list[Point] = []
    left_out: list[Point] = []
    booted: set[str] = set()
    dropped: set[str] = set()  # arms whose headline points did not fit
    spent_s = costs.RUN_FIXED_S
    for unit in candidates(arms, workloads, loads):
        arm = unit[0].arm
        cost_s = sum(map(model.point_s, unit)) + (0.0 if lead[arm] in booted else model.boot_s(quick))
        if arm not in dropped and spent_s + cost_s <= budget_s - kept_s(unit[0], taken, model, budget_s):
            taken += unit
            booted.add(lead[arm])
            spent_s += cost_s
        else:
            if is_headline(unit[0].workload, unit[0].pattern, unit[0].concurrency):
                dropped.add(arm)
            left_out += unit
    return BudgetPlan(taken, left_out, spent_s, budget_s)


def throughput_by_repeat(done: Iterable[PointRecord]) -> dict[spread.Series, tuple[dict[int, float], int]]:
    """spread.throughput_by_repeat of the headline points."""
    return spread.throughput_by_repeat(done, lambda r: is_headline(r.workload, r.pattern, r.concurrency))


def boot_share_s(spare_s: float, later: Iterable[Point], later_boots: int, model: CostModel) -> float:
    """What this boot may spend on adaptive repeats out of the run's spare time: what the later boots' headline
    points (`later`: the planned points still to run after it) are not expected to need, and never less than an
    even share of spare_s over this boot and the later_boots."""
    return max(spare_s / (later_boots + 1), spare_s - expected_extra_s(
        [p for p in later if is_headline(p.workload, p.pattern, p.concurrency)], model))


def likely_extra(todo: Iterable[Point], model: CostModel, spare_s: float) -> list[Point]:
    """The adaptive repeats a boot could pay for out of spare_s, for the load generator to build their datasets
    while the server boots: after each headline point's highest repeat in `todo`, first the repeats its spread
    calls for (planned_repeats), then more up to MAX_REPEATS, one more per point a round, while their cost fits.
    Which ones run is decided after the planned points (extra_repeats); a dataset built and never used cost only
    time inside the boot."""
    last: dict[spread.Series, Point] = {}
    for p in todo:
        key = spread.series(p)
        if is_headline(p.workload, p.pattern, p.concurrency) and (key not in last or p.repeat > last[key].repeat):
            last[key] = p
    out: list[Point] = []
    nxt = {key: p.repeat + 1 for key, p in last.items()}
    for cap in ({key: planned_repeats(model, p) for key, p in last.items()}, dict.fromkeys(last, MAX_REPEATS)):
        while True:
            added = False
            for key, p in last.items():
                if nxt[key] > cap[key]:
                    continue
                more = points.make_point(p.arm, p.workload, p.pattern, p.concurrency, p.request_rate,
                                         p.num_prompts, nxt[key])
                if model.point_s(more) <= spare_s:
                    out.append(more)
                    spare_s -= model.point_s(more)
                    nxt[key] += 1
                    added = True
            if not added:
                break
    return out


def extra_repeats(done: Iterable[PointRecord], arms: set[str], model: CostModel, spare_s: float) -> list[Point]:
    """One more repeat for each headline point of these arms that has MIN_REPEATS or more ok repeats and a
    throughput CI half-width above CI_TARGET_PCT (or fewer than MIN_REPEATS steady ones), widest first, while their
    cost fits in spare_s."""
    wide: list[tuple[float, Point]] = []
    done = list(done)
    last = {spread.series(r): r.repeat for r in
            sorted(done, key=lambda r: r.repeat)}  # the highest recorded repeat, whatever its outcome
    for key, (values, n_ok) in throughput_by_repeat(done).items():
        arm, workload, pattern, conc, rate, n = key
        if arm not in arms or not MIN_REPEATS <= n_ok < MAX_REPEATS:
            continue
        half_pct = repeats.half_width_pct(repeats.across_repeats(values)) if len(values) >= MIN_REPEATS \
            else math.nan  # too few steady repeats for a CI worth quoting
        if math.isnan(half_pct) or half_pct > CI_TARGET_PCT:  # nan: no CI to trust either
            nxt = points.make_point(arm, workload, pattern, conc, rate, n, last[key] + 1)
            wide.append((math.inf if math.isnan(half_pct) else half_pct, nxt))
    out: list[Point] = []
    for _, p in sorted(wide, key=lambda x: -x[0]):
        if model.point_s(p) <= spare_s:
            out.append(p)
            spare_s -= model.point_s(p)
    return out


def headline_cis(done: Iterable[PointRecord]) -> list[tuple[str, float, float, int]]:
    """(label, mean tok/s, CI half-width %, repeats) of each headline point with 2 or more steady repeats, as its
    card quotes it, in record order: what a budget run's end says of the CIs it was after."""
    out = []
    for (arm, workload, _, conc, _, _), (values, _) in throughput_by_repeat(done).items():
        ci = repeats.across_repeats(values)
        if len(values) >= 2:
            out.append((f"{arm} {workload} c={conc}", ci.value, repeats.half_width_pct(ci), len(values)))
    return out


def headline_line(done: Iterable[PointRecord]) -> str | None:
    """'headline throughput, 95% CI over repeats: baseline agent c=64 5,516 tok/s ±4.0% (6 repeats), ...; wider
    than the ±3% target: baseline agent c=64' (None without a headline point repeated)."""
    cis = headline_cis(done)
    if not cis:
        return None
    wide = [label for label, _, half, _ in cis if not half <= CI_TARGET_PCT]
    return ("headline throughput, 95% CI over repeats: "
            + ", ".join(f"{label} {mean:,.0f} tok/s ±{half:.1f}% ({n} repeats)" for label, mean, half, n in cis)
            + (f"; wider than the ±{CI_TARGET_PCT:g}% target: {', '.join(wide)}" if wide
               else f"; all within the ±{CI_TARGET_PCT:g}% target"))

