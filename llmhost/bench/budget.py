"""The plan under a time budget (`run_bench.py --budget-min N`), and the adaptive repeats that spend what is left.

    planned = plan(arms, workloads, loads, model, budget_s=45 * 60)   # .points, .left_out, .estimate_s, .reserve_s
    extra = extra_repeats(records, model, spare_s)                    # during the run, at the end of each boot

What goes in, in this order, each point only while the cost model (llmhost.bench.costs) says the plan still fits:
1. the headline points (agent c=64, chat c=64) on every arm, MIN_REPEATS repeats each, an arm's all together or
   none (a tight budget drops the last arms rather than leave every arm with an unquotable CI);
2. the baseline's full sweep, its 10,000-request tail run and its 2,000-request burst, one repeat;
3. every other arm's points that its one setting can change (ARM_SCOPE, data per arm), one repeat, arm by arm.
Steps 2-3 stop at 1 - RESERVE_SHARE of the budget. A point that does not fit is left out and listed; the time left
over (reserve_s) is for adaptive repeats: after a
boot's planned points, a headline point whose throughput CI half-width across repeats (llmhost.repeats) is still
above CI_TARGET_PCT gets one more repeat, widest first, while the boot's share of the budget remains. The throughput
is the one the dashboard's headline quotes: each steady repeat's steady-window output tok/s, as the runner recorded
it in the point's summary (the whole point's for runs recorded before it did).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from llmhost import repeats
from llmhost.bench import costs, points
from llmhost.bench.arms import Arm, boots
from llmhost.bench.costs import CostModel
from llmhost.bench.records import Point, PointRecord, PointSummary

HEADLINE: tuple[tuple[str, str, int], ...] = (("agent", "concurrency", 64), ("chat", "concurrency", 64))
MIN_REPEATS = 3  # the fewest repeats whose Student-t CI is worth quoting (t(0.975, 2) = 4.3)
MAX_REPEATS = 10  # adaptive repeats stop here: past it a wide CI is the point's own noise, not too few repeats
CI_TARGET_PCT = 3.0  # throughput CI half-width a headline point should reach
DEFAULT_BUDGET_MIN = 45.0
RESERVE_SHARE = 0.15  # of the budget kept from the sweep for adaptive repeats (the headline's 3 may use it)

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


def plan(arms: list[Arm], workloads: list[str], loads: points.Loads, model: CostModel, budget_s: float,
         quick: bool = False) -> BudgetPlan:
    """The candidates that fit budget_s, a boot counted with an arm's first point (arms sharing launch flags
    share a boot, as the runner runs them)."""
    lead = {arm.name: group[0].name for group in boots(arms) for arm in group}
    taken: list[Point] = []
    left_out: list[Point] = []
    booted: set[str] = set()
    spent_s = costs.RUN_FIXED_S
    for unit in candidates(arms, workloads, loads):
        arm = unit[0].arm
        cost_s = sum(map(model.point_s, unit)) + (0.0 if lead[arm] in booted else model.boot_s(quick))
        is_head = is_headline(unit[0].workload, unit[0].pattern, unit[0].concurrency)
        if spent_s + cost_s <= (budget_s if is_head else budget_s * (1 - RESERVE_SHARE)):
            taken += unit
            booted.add(lead[arm])
            spent_s += cost_s
        else:
            left_out += unit
    return BudgetPlan(taken, left_out, spent_s, budget_s)


def throughput_by_repeat(done: Iterable[PointRecord]) -> dict[tuple, tuple[dict[int, float], int]]:
    """Per headline point with an ok summary, keyed by its identity across repeats: (repeat -> the throughput its
    headline card quotes, the number of ok repeats). That throughput is the steady window's output tok/s of each
    repeat that had a steady one (llmhost.bench.window; the card averages those), else — no repeat of the point
    recorded one — the whole point's. The latest ok attempt of a repeat wins."""
    latest: dict[tuple, dict[int, PointSummary]] = {}
    for r in done:
        if r.status == "ok" and r.summary is not None and is_headline(r.workload, r.pattern, r.concurrency):
            key = (r.arm, r.workload, r.pattern, r.concurrency, r.request_rate, r.num_prompts)
            latest.setdefault(key, {})[r.repeat] = r.summary
    out = {}
    for key, by_repeat in latest.items():
        steady = {rep: s.steady_output_throughput for rep, s in by_repeat.items()
                  if s.steady_output_throughput is not None}
        has_windows = any(s.steady_window_s is not None for s in by_repeat.values())
        out[key] = (steady if has_windows else {rep: s.output_throughput for rep, s in by_repeat.items()},
                    len(by_repeat))
    return out


def extra_repeats(done: Iterable[PointRecord], arms: set[str], model: CostModel, spare_s: float) -> list[Point]:
    """One more repeat for each headline point of these arms that has MIN_REPEATS or more ok repeats and a
    throughput CI half-width above CI_TARGET_PCT (or fewer than MIN_REPEATS steady ones), widest first, while their
    cost fits in spare_s."""
    wide: list[tuple[float, Point]] = []
    done = list(done)
    last = {(r.arm, r.workload, r.pattern, r.concurrency, r.request_rate, r.num_prompts): r.repeat for r in
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
