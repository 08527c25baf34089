"""`run_bench.py --startup N`: how fast the server starts, arm by arm, and where each start spends its time.

    ./run_bench.py --startup 3 --arm nopcg="--disable-piecewise-cuda-graph" --arm tok1="--tokenizer-worker-num 1"
    ./run_bench.py --startup 2 --import-profile   # + which packages the start's Python imports spend their time in

Every arm (baseline = our defaults, plus the --arm / --arms ones) restarts the server N times through
llmhost.serve.lifecycle, as ./serve.sh restart does; no load points run. Each restart is one StartupRecord in
startups.jsonl, appended as soon as it is ready (a killed run keeps what it recorded): the whole restart's wall time,
launch-to-ready (what serve.sh's 'ready in N s' line says) and that start's phases read from SGLang's log
(llmhost.serve.startup). The closing table and JSON line give per arm the median ready time (min-max) and the median
of each phase over the starts that logged it. With --import-profile every process of the server writes CPython's
import profile into its log (llmhost.serve.import_profile), and each arm gets the median import seconds per package.

Writes $RESULTS_DIR/bench/<run_id>-startup/ (manifest.json with startup_restarts, startups.jsonl, raw/serve-<arm>.log).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

from llmhost import config, provenance
from llmhost.bench import arms as arms_mod
from llmhost.bench import costs, restart_runs, runner, store
from llmhost.bench.records import StartupRecord
from llmhost.bench.eta import fmt_s
from llmhost.serve import import_profile, startup
from llmhost.serve.console import ServeError

DEFAULT_RESTARTS = 3  # the acceptance: the median of 3 restarts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--startup", type=int, nargs="?", const=DEFAULT_RESTARTS, metavar="N",
                        help="measure start-up only: restart the server N times per arm (default N: "
                        f"{DEFAULT_RESTARTS}; arms: baseline + --arm ones, or --arms), no load points; prints "
                        "per arm the median ready time and the median of each start-up phase")
    parser.add_argument("--import-profile", action="store_true",
                        help="with --startup: the server's processes profile their Python imports "
                        "(PYTHONPROFILEIMPORTTIME=1); prints per arm the median import seconds per package")


def problem(args: argparse.Namespace) -> str | None:
    """Why --startup cannot work with the other options given, as one line; None when it can."""
    if getattr(args, "import_profile", False) and args.startup is None:
        return "--import-profile profiles the server's start: give it with --startup N"
    return restart_runs.mode_problem(args, "startup", "restart per arm", "restarts only")


# --- one restart ----------------------------------------------------------------------------------------------

def restart_once(cfg: config.Config, run: store.RunStore, arm: arms_mod.Arm, repeat: int,
                 since: float, imports: bool = False) -> StartupRecord:
    """Restart the server with the arm's flags and record how it went (a failed start is a record too); `imports`:
    with the import profile on. runner.UserStopped when ./serve.sh stop ran after `since` (the user's stop ends the
    run)."""
    began = time.time()
    started_at = provenance.utc_now(began)
    try:
        ready = restart_runs.restart(cfg, run, arm, since, extra_env=import_profile.ENV if imports else "")
    except ServeError as exc:  # a crash, a timeout, a flag the server refuses: recorded, the next restart runs
        return StartupRecord(arm.name, repeat, "failed", started_at, time.time() - began, None, {},
                             error=str(exc).splitlines()[0][:300])
    restart_s = time.time() - began
    timeline = ready.timeline
    profile = import_profile.read(cfg.state_dir / "server.log") if imports else None
    return StartupRecord(arm.name, repeat, "ok", started_at, restart_s,
                         timeline.ready_s if timeline else ready.waited_s,
                         {p.name: p.seconds for p in timeline.phases} if timeline else {},
                         launch_command=ready.launch_command or None,
                         imports_s=profile.packages_s if profile else {},
                         import_processes=profile.processes if profile else 0)


def progress_line(rec: StartupRecord, done: int, total: int, eta: float) -> str:
    head = f"[bench startup {done}/{total}] arm {rec.arm}, restart {rec.repeat}"
    left = f"  ETA {fmt_s(eta)}" if done < total else ""
    if rec.status != "ok":
        return f"{head}: failed after {rec.restart_s:.0f} s: {rec.error}{left}"
    phases = ", ".join(f"{name} {s:.0f} s" for name, s in rec.phases.items())
    imports = import_profile.ImportProfile(rec.import_processes, rec.imports_s) if rec.imports_s else None
    return f"{head}: ready in {rec.ready_s:.0f} s (whole restart {rec.restart_s:.0f} s)" + \
        (f": {phases}" if phases else "") + (f"; {imports.line()}" if imports else "") + left


def eta_s(rows: list[StartupRecord], left: int, estimate_s: float) -> float:
    """Seconds the `left` restarts will take: the median whole restart after the run's first, which pays the
    host's cold caches (one H200 host: 94 s, then 32, 32 and 32 s), else the cost model's estimate."""
    warm = [r.restart_s for r in rows[1:]]
    return left * (statistics.median(warm) if warm else estimate_s)


# --- medians and the table ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class ArmStartup:
    """One arm's starts, summarised: medians over its ok starts (None without any)."""

    arm: str
    ok: int
    failed: int
    ready_s: float | None
    ready_min_s: float | None
    ready_max_s: float | None
    restart_s: float | None
    phases: dict[str, float]  # phase -> median seconds over the starts that logged it, in log order
    imports: import_profile.ImportProfile | None = None  # median seconds per package over the profiled starts
    imports_starts: int = 0  # the starts profiled


def median_imports(rows: list[StartupRecord]) -> import_profile.ImportProfile | None:
    """Per package, the median of its import seconds over the profiled starts (0 in a start that did not import it);
    None when no start was profiled."""
    profiled = [r for r in rows if r.imports_s]
    if not profiled:
        return None
    names = dict.fromkeys(n for r in profiled for n in r.imports_s)
    medians = {n: statistics.median(r.imports_s.get(n, 0.0) for r in profiled) for n in names}
    return import_profile.ImportProfile(round(statistics.median(r.import_processes for r in profiled)),
                                        dict(sorted(medians.items(), key=lambda kv: (-kv[1], kv[0]))))


def in_log_order(names: list[str]) -> list[str]:
    """The phase names in the order SGLang logs them, whichever start logged them first; unknown ones after."""
    return [n for n in startup.PHASE_ORDER if n in names] + [n for n in names if n not in startup.PHASE_ORDER]


def summarize(rows: list[StartupRecord]) -> list[ArmStartup]:
    """Per arm, in the order the arms first appear."""
    out = []
    for arm in dict.fromkeys(r.arm for r in rows):
        ok = [r for r in rows if r.arm == arm and r.status == "ok" and r.ready_s is not None]
        ready = [r.ready_s for r in ok if r.ready_s is not None]
        names = in_log_order(list(dict.fromkeys(name for r in ok for name in r.phases)))
        phases = {n: statistics.median(r.phases[n] for r in ok if n in r.phases) for n in names}
        out.append(ArmStartup(arm, len(ok), sum(1 for r in rows if r.arm == arm) - len(ok),
                              statistics.median(ready) if ready else None, min(ready, default=None),
                              max(ready, default=None),
                              statistics.median(r.restart_s for r in ok) if ok else None, phases,
                              median_imports(ok), sum(1 for r in ok if r.imports_s)))
    return out


def table_lines(arms: list[ArmStartup]) -> list[str]:
    """A fixed-width table: arm, starts, median ready s (min-max), median whole restart, then one column per phase;
    then, for the arms whose starts were profiled, a line of their median import seconds per package."""
    names = in_log_order(list(dict.fromkeys(n for a in arms for n in a.phases)))
    head = ["arm", "starts", "ready s (min-max)", "restart s", *names]
    body = [[a.arm, f"{a.ok}" + (f" +{a.failed} failed" if a.failed else ""),
             f"{a.ready_s:.0f} ({a.ready_min_s:.0f}-{a.ready_max_s:.0f})" if a.ready_s is not None else "-",
             f"{a.restart_s:.0f}" if a.restart_s is not None else "-",
             *(f"{a.phases[n]:.0f}" if n in a.phases else "-" for n in names)] for a in arms]
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    table = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in (head, *body)]
    return table + [f"{a.arm} (median of {a.imports_starts} starts): {a.imports.line()}" for a in arms if a.imports]


def closing(run: store.RunStore, arms: list[ArmStartup], restarts: int) -> dict:
    """The last stdout line: the run directory and per-arm medians, seconds to 0.01 (the records keep them whole)."""
    def s(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    def imports(a: ArmStartup) -> dict:
        if a.imports is None:
            return {}
        top = list(a.imports.packages_s.items())[:import_profile.TOP]
        return {"import_processes": a.imports.processes, "imports_s_medians_sum": s(a.imports.total_s),
                "imports_s_median": {n: s(v) for n, v in top}}

    return {"run_dir": str(run.root), "run_id": run.run_id, "restarts_per_arm": restarts,
            "arms": {a.arm: {"starts_ok": a.ok, "starts_failed": a.failed, "ready_s_median": s(a.ready_s),
                             "ready_s_min": s(a.ready_min_s), "ready_s_max": s(a.ready_max_s),
                             "restart_s_median": s(a.restart_s),
                             "phases_s_median": {n: s(v) for n, v in a.phases.items()}, **imports(a)}
                     for a in arms}}


# --- the run --------------------------------------------------------------------------------------------------

def print_plan(arms: list[arms_mod.Arm], restarts: int, model: costs.CostModel) -> None:
    """What --startup --dry-run prints: each arm's flags, the restarts and the estimate by the cost model."""
    total = len(arms) * restarts
    print(f"[bench] start-up plan: {restarts} restarts x {len(arms)} arms, no load points")
    for arm in arms:
        print(f"  {arm.name:<20} {' '.join(arm.flags) or '(our defaults)'}")
    print(f"[bench] estimate: {fmt_s(total * model.ready_s)} ({total} restarts x ~{model.ready_s:.0f} s), "
          f"{model.label}")
    print(json.dumps({"dry_run": True, "startup_restarts": restarts, "arms": [a.name for a in arms],
                      "estimate_s": round(total * model.ready_s), "calibrated": model.is_calibrated}))


def measure_all(cfg: config.Config, run: store.RunStore, arms: list[arms_mod.Arm], restarts: int,
                estimate_s: float, imports: bool = False) -> int:
    """Every arm's restarts, each recorded as it finishes with the ETA of the rest (estimate_s a restart until the
    run's own say otherwise); the table and the closing JSON line; the exit code."""
    since, done, rows = time.time(), 0, []
    total = len(arms) * restarts
    runner.interrupt_on_sigterm()
    try:
        for arm in arms:
            for repeat in range(1, restarts + 1):
                print(f"[bench startup {done}/{total}] arm {arm.name}, restart {repeat}: restarting "
                      f"(progress in {run.root}/raw/serve-{arm.name}.log)", flush=True)
                rec = restart_once(cfg, run, arm, repeat, since, imports)
                run.append_startup(rec)
                rows.append(rec)
                done += 1
                print(progress_line(rec, done, total, eta_s(rows, total - done, estimate_s)), flush=True)
    except (KeyboardInterrupt, runner.UserStopped, OSError) as exc:
        return restart_runs.cut_short(exc, run, f"a new --startup run (the restarts so far are in {run.root}/"
                                         "startups.jsonl)")
    summary = summarize(rows)
    for line in table_lines(summary):
        print(f"[bench] {line}")
    print(json.dumps(closing(run, summary, restarts)))
    return 0 if all(r.status == "ok" for r in rows) else 1


def main(cfg: config.Config, model: costs.CostModel, restarts: int, arm_names: list[str] | None,
         user_arms: list[str], tag: str, dry_run: bool, argv: list[str], imports: bool = False) -> int:
    """`run_bench.py --startup`: pick the arms (baseline unless --arms says otherwise), then the dry run, or the
    run under the bench lock; `imports`: --import-profile."""
    try:
        arms = restart_runs.pick_arms(cfg, arm_names, user_arms)
    except arms_mod.ArmError as exc:
        print(f"[bench] error: {exc} — see ./run_bench.py --help", file=sys.stderr)
        return 2
    if dry_run:
        print_plan(arms, restarts, model)
        return 0

    def measure(run: store.RunStore) -> int:
        total = len(arms) * restarts
        print(f"[bench] run directory {run.root} (start-up: {restarts} restarts x {len(arms)} arms"
              f"{', import profile on' if imports else ''}; estimate {fmt_s(total * model.ready_s)}, "
              f"{model.label})", flush=True)
        return measure_all(cfg, run, arms, restarts, model.ready_s, imports)

    return restart_runs.run_locked(
        cfg, argv, lambda: restart_runs.new_run(cfg, arms, "startup", tag, argv, startup_restarts=restarts), measure)
