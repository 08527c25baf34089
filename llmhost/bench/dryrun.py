"""What `run_bench.py --dry-run` prints: the plan point by point with its estimate, and what the budget left out."""
from __future__ import annotations

from llmhost.bench import budget, costs, points
from llmhost.bench.arms import Arm
from llmhost.bench.runner import fmt_s


def print_plan(plan: list[points.Point], arms: list[Arm], boots: int, model: costs.CostModel, quick: bool,
               planned: budget.BudgetPlan | None) -> None:
    """The dry-run table: every point with its load and estimate, then the total, what the model learned from,
    and what the budget left out."""
    print(f"[bench] plan: {len(plan)} points over {len(arms)} arms ({', '.join(a.name for a in arms)})")
    print(f"{'#':>4}  {'point_id':<48} {'pattern':<11} {'conc':>5} {'rate':>6} {'prompts':>7} {'est':>7}")
    for i, p in enumerate(plan, 1):
        rate = f"{p.request_rate:g}" if p.request_rate else "inf"
        print(f"{i:>4}  {p.point_id:<48} {p.pattern:<11} {p.concurrency or '-':>5} {rate:>6} {p.num_prompts:>7} "
              f"{fmt_s(model.point_s(p)):>7}")
    print(f"[bench] estimate: {fmt_s(model.plan_s(plan, boots, quick))} ({boots} server boots x "
          f"~{model.boot_s(quick):.0f}s restart/load generator/warm-up + points), {model.label}")
    if planned is not None:
        print(f"[bench] budget {fmt_s(planned.budget_s)}: {len(planned.left_out)} points left out"
              f"{': ' + ', '.join(p.point_id for p in planned.left_out) if planned.left_out else ''}; "
              f"{fmt_s(planned.reserve_s)} kept for adaptive repeats of headline points whose throughput CI is "
              f"above {budget.CI_TARGET_PCT:g}%")
