"""What `run_bench.py --dry-run` prints: the plan point by point with its estimate, and what the budget left out.
A planned run records the same estimate in its manifest (`estimate`), so its end can say how it did against it."""
from __future__ import annotations

from llmhost.bench import arms as arms_mod, budget, costs, points
from llmhost.bench.arms import Arm
from llmhost.bench.eta import fmt_s
from llmhost.bench.records import Estimate


def active_arms(arms: list[Arm], plan: list[points.Point]) -> list[Arm]:
    """The arms with points in the plan: an arm without points is not restarted."""
    return [a for a in arms if any(p.arm == a.name for p in plan)]


def estimate(plan: list[points.Point], arms: list[Arm], model: costs.CostModel, quick: bool,
             planned: budget.BudgetPlan | None) -> Estimate:
    """The plan's estimate by the cost model: its points, one boot per group of its arms sharing launch flags,
    the run's fixed part."""
    boots = len(arms_mod.boots(active_arms(arms, plan)))
    return Estimate(estimate_s=model.plan_s(plan, boots, quick), calibrated=model.is_calibrated,
                    label=model.label, boots=boots, budget_s=planned.budget_s if planned else None)


def print_plan(plan: list[points.Point], arms: list[Arm], model: costs.CostModel, quick: bool,
               planned: budget.BudgetPlan | None) -> Estimate:
    """The dry-run table: every point with its load and estimate, then the total, what the model learned from,
    and what the budget left out; returns the estimate."""
    active = active_arms(arms, plan)
    est = estimate(plan, arms, model, quick, planned)
    print(f"[bench] plan: {len(plan)} points over {len(active)} arms ({', '.join(a.name for a in active)})")
    print(f"{'#':>4}  {'point_id':<48} {'pattern':<11} {'conc':>5} {'rate':>6} {'prompts':>7} {'est':>7}")
    for i, p in enumerate(plan, 1):
        rate = f"{p.request_rate:g}" if p.request_rate else "inf"
        print(f"{i:>4}  {p.point_id:<48} {p.pattern:<11} {p.concurrency or '-':>5} {rate:>6} {p.num_prompts:>7} "
              f"{fmt_s(model.point_s(p)):>7}")
    print(f"[bench] estimate: {fmt_s(est.estimate_s)} ({est.boots} server boots x "
          f"~{model.boot_s(quick):.0f}s restart/load generator/warm-up + points), {est.label}")
    if planned is not None:
        print(f"[bench] budget {fmt_s(planned.budget_s)}: {len(planned.left_out)} points left out"
              f"{': ' + ', '.join(p.point_id for p in planned.left_out) if planned.left_out else ''}; "
              f"{fmt_s(planned.reserve_s)} kept for adaptive repeats of headline points whose throughput CI is "
              f"above {budget.CI_TARGET_PCT:g}%{expected_repeats(plan, model)}")
    return est


def expected_repeats(plan: list[points.Point], model: costs.CostModel) -> str:
    """'; the spread of the last run that repeated them calls for agent c=64 on baseline 9 repeats (3.8%), ...' for
    the planned headline points whose spread calls for more than the minimum ('' when none does)."""
    said = []
    for p in plan:
        wanted = budget.planned_repeats(model, p)
        if p.repeat == 1 and budget.is_headline(p.workload, p.pattern, p.concurrency) and \
                wanted > budget.MIN_REPEATS:
            said.append(f"{p.workload} c={p.concurrency} on {p.arm} {wanted} repeats ({model.spread(p):.1f}%)")
    return f"; the spread of the last run that repeated them calls for {', '.join(said)}" if said else ""
