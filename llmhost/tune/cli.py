"""run_bench.py's --tune flags: their arguments, their checks, the tune's plan, its dry-run table, and the hook
that runs its stages in place of a plain run.

    add_arguments(parser); problem(args) -> one line or None
    tune, arms, plan = open_tune(workloads, loads, repeat, budget_min, model, cfg)  # BenchError (one line) if not
    stages = stages_hook(tune, model, slo, run, cfg, apply_to, resumed)        # Bench -> (arms, plan, closing JSON)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmhost import config, stats
from llmhost.bench import points, store
from llmhost.bench.arms import Arm
from llmhost.bench.costs import CostModel
from llmhost.bench.records import Point
from llmhost.bench.eta import fmt_s
from llmhost.bench.runner import Bench, BenchError
from llmhost.serve import spec
from llmhost.tune import driver, plan as plan_mod, space as space_mod

DEFAULT_BUDGET_MIN = 30.0
Stages = Callable[[Bench], tuple[list[Arm], list[Point], dict[str, Any]]]  # a tune's stages in place of the arm loop
TUNE_PATTERNS = ("concurrency", "qps")  # steady-state points: goodput is a rate only where there is a steady window


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tune", action="store_true", help="search launch flags for the most goodput (req/s "
                        "meeting --slo-*) on one workload (default: agent at concurrency "
                        f"{plan_mod.DEFAULT_CONCURRENCY}): the defaults, then one lever at a time, then around the "
                        f"best; {plan_mod.DEFAULT_REPEATS} paired repeats of the sweep's points per trial (two "
                        f"warm-up and four steady waves; --repeat, --duration-s change them) within --budget-min "
                        f"(default for --tune: {DEFAULT_BUDGET_MIN:g}); prints the ranking with CIs and the winner")
    parser.add_argument("--apply", action="store_true", help="with --tune: write the winner's settings to "
                        "config.local.env ($LLMHOST_CONFIG when set), keeping its other lines (default: print them)")


def problem(args: argparse.Namespace) -> str | None:
    """Why the --tune/--apply flags cannot work together with the rest, as one line; None when they can."""
    if args.apply and not (args.tune or args.resume):
        return "--apply writes the winner of a tune: add --tune (or --resume a tune run)"
    if not args.tune:
        return None
    if args.resume:
        return "--resume continues a tune run from its manifest: drop --tune"
    clash = [flag for flag, value in (("--arms", args.arms), ("--arm", args.arm), ("--quick", args.quick)) if value]
    if clash:
        return f"--tune makes its own trials (arms): drop {', '.join(clash)}"
    if args.repeat is not None and args.repeat < 2:
        return "--tune compares trials paired across repeats: --repeat must be >= 2 (a CI needs two)"
    if len([w for w in args.workloads.split(",") if w.strip()]) != 1:
        return "--tune tunes for one workload: give --workloads agent (or chat, long, agent-tools)"
    wrong = [p for p in (args.patterns or "").split(",") if p.strip() and p.strip() not in TUNE_PATTERNS]
    if wrong:
        return f"--tune measures steady-state goodput: --patterns takes {' or '.join(TUNE_PATTERNS)} (not {wrong[0]})"
    try:
        space_mod.space_from_env()
    except ValueError as exc:
        return str(exc)
    return None


def tune_loads(loads: points.Loads) -> points.Loads:
    """The user's loads, or the headline concurrency; points sized by --duration-s, else as the sweep's."""
    given = tuple(p for p, levels in (("concurrency", loads.concurrency), ("qps", loads.rates)) if levels)
    patterns = loads.patterns or given or ("concurrency",)
    return points.Loads(loads.concurrency or (plan_mod.DEFAULT_CONCURRENCY,), loads.rates, loads.duration_s
                        or plan_mod.DEFAULT_DURATION_S, patterns)


def open_tune(workloads: list[str], loads: points.Loads, repeat: int | None, budget_min: float | None,
              model: CostModel, cfg: config.Config) -> tuple[driver.TuneRun, list[Arm], list[Point]]:
    """The coarse stage fitted to the budget, over the levers these loads and cfg's server leave open; BenchError
    when not even the defaults fit or there is no load."""
    rows = [r for r in points.with_loads(points.FULL_SWEEP, tune_loads(loads)) if r[0] == workloads[0]]
    if not rows:
        raise BenchError(f"--tune: workload {workloads[0]} has no {'/'.join(TUNE_PATTERNS)} point for these loads")
    budget_s = (budget_min or DEFAULT_BUDGET_MIN) * 60
    levers, idle = space_mod.binding(space_mod.space_from_env(), rows)
    if idle:
        print(f"[tune] left out at these loads: {'; '.join(idle)}", flush=True)
    levers, same = space_mod.settled(levers, *settled_by(cfg))
    if same:
        print(f"[tune] left out for this server: {'; '.join(same)}", flush=True)
    tune, stage = driver.new_tune(levers, rows, repeat or plan_mod.DEFAULT_REPEATS, model, budget_s)
    if not stage.trials or stage.trials[0].settings:  # the defaults come first: no trial without them
        first = space_mod.coarse_trials(tune.space)[0]
        need_s = plan_mod.trial_s(first, rows, tune.repeats, model) / plan_mod.COARSE_SHARE
        raise BenchError(f"--budget-min {budget_s / 60:g} cannot hold even the defaults' trial: ~{fmt_s(need_s)} "
                         "needed — raise it, or lower --repeat/--duration-s")
    return tune, tune.arms(), tune.points()


def settled_by(cfg: config.Config) -> tuple[dict[str, str], dict[str, str]]:
    """(the values the defaults' server launches with, setting levers by their config.env value; the levers it would
    refuse to move: flag -> why)."""
    try:
        current = {flag: value or space_mod.SWITCH for flag, value in spec.launched_values(cfg).items()}
    except spec.SpecError as exc:
        raise BenchError(str(exc)) from None
    current.update({lv.flag: str(getattr(cfg, lv.flag.lower())) for lv in space_mod.SPACE
                    if space_mod.is_setting(lv.flag)})
    why = spec.several_tokenizers_problem(cfg)
    return current, {"--tokenizer-worker-num": why} if why else {}


def print_plan(tune: driver.TuneRun, model: CostModel) -> None:
    """The dry run's table: every trial with its flags and estimate, what the budget cut, the total."""
    print(f"[tune] {len(tune.trials)} coarse trials x {len(tune.rows)} loads x {tune.repeats} paired repeats "
          f"(budget {fmt_s(tune.budget_s)}: {100 * plan_mod.COARSE_SHARE:.0f}% coarse, the rest refines around the "
          "best)")
    for t in tune.trials:
        est = plan_mod.trial_s(t, tune.rows, tune.repeats, model)
        print(f"[tune]   {t.name:<28} {' '.join(t.flags()) or '(the defaults)':<40} {fmt_s(est):>8}")
    if tune.cut:
        print(f"[tune] cut by the budget: {', '.join(tune.cut)}")
    print(f"[tune] search space: " + "; ".join(f"{lv.flag} {','.join(lv.values)} ({lv.why})" for lv in tune.space))
    print(f"[tune] coarse estimate {fmt_s(tune.coarse_estimate_s)}, {model.label}")


def config_target() -> Path:
    """Where --apply writes: the file the configuration loader reads beside config.env."""
    return Path(os.environ.get("LLMHOST_CONFIG") or config.LOCAL_FILE)


def stages_hook(tune: driver.TuneRun, model: CostModel, slo: dict[str, float], run: store.RunStore,
                cfg: config.Config, apply_to: Path | None,
                resumed: bool) -> Stages:
    """What execute() runs in place of the plain arm loop for a tune run."""
    started = time.monotonic()
    left = driver.time_left(tune.budget_s, started, tune.coarse_estimate_s if resumed else 0.0)

    def record(t: driver.TuneRun) -> None:  # the refine stage planned: --resume must find it in the manifest
        run.write_manifest(dataclasses.replace(run.read_manifest(), arms=tuple(t.arms()), plan=tuple(t.points()),
                                               tune=t.to_dict()))

    def finish(t: driver.TuneRun, ranking: Any, spent_s: float) -> dict[str, Any]:
        return driver.finish(run.root, run.run_id, t, ranking, cfg.server_extra_args, apply_to, spent_s)

    return lambda b: driver.run_stages(b, tune, model, stats.Slo(**slo), left, record, finish)
