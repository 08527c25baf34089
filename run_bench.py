#!/usr/bin/env python3
"""Benchmark the SGLang server arm by arm with SGLang's own load generator; write a results run directory.

Each arm (baseline FlashInfer, prefix cache off, FP8 KV, page size 16, Triton attention, your own) differs from the
baseline by one launch flag and runs on a freshly restarted server (llmhost.serve.lifecycle, what ./serve.sh
restart runs); consecutive arms with the same flags share a boot. One load-generator process per boot imports
SGLang's own benchmark module (sglang.benchmark.serving) once and runs every point of the boot in-process, each after
a verified prefix-cache flush, in a seeded shuffle; repeat k uses seed SEED + k - 1 on every arm (paired). Each
request is recorded with its start/end time, TTFT (first token of any kind), ITLs and cached tokens; telemetry
(/metrics + GPU) is sampled every second on the same clock.

    ./run_bench.py --dry-run                 # the plan fitted to --budget-min 45, with its estimate (calibrated on
                                             # this host's last runs, or says "uncalibrated"); runs nothing
    ./run_bench.py --budget-min 20 --arms baseline,no-prefix-cache,fp8-kv
    ./run_bench.py --quick                   # all five arms, small (~7 min on an H200 incl. 5 restarts)
    ./run_bench.py --arms baseline,fp8-kv --repeat 3 --tag fp8
    ./run_bench.py --arm chunk4k="--chunked-prefill-size 4096"
    ./run_bench.py --arms baseline --workloads chat --concurrency 1,16,64,128 --rates 2,8 --duration-s 60
    ./run_bench.py --resume results/bench/20260101-120000   # after a crash, kill or stop: missing + failed points
    ./run_bench.py --resume results/bench/20260101-120000 --only-missing   # failed points stay failed
    ./run_bench.py --tune --slo-ttft-ms 500 --slo-itl-ms 50 --budget-min 30 [--apply]   # search launch flags
                                             # for goodput on the agent workload (llmhost.tune); --apply writes
                                             # the winner to config.local.env
    ./run_bench.py --arms baseline --workloads agent --concurrency 64 --repeat 1 --kernel-profile   # + where a
                                             # forward pass's GPU time goes under that load: decode and extend
                                             # attention, GEMMs, idle (llmhost.bench.load_profile)
    ./run_bench.py --startup 3 --arm tok1="--tokenizer-worker-num 1"   # start-up only: ready time and phase
                                             # medians per arm over 3 restarts each (llmhost.bench.startup_bench)
    ./run_bench.py --startup 2 --import-profile   # + per arm, the import seconds of the server's processes by
                                             # package (llmhost.serve.import_profile)
    ./run_bench.py --single-stream 3 --arm nooverlap="--disable-overlap-schedule"   # one stream only: per arm,
                                             # ms per output token split into weight-read floor, GPU above it,
                                             # CPU gap between forwards and streaming (llmhost.bench.single_stream;
                                             # SGLang's instruments on for that run, the server left on the last arm)

Writes $RESULTS_DIR/bench/<run_id>/ (manifest.json, points.jsonl, requests/, telemetry.jsonl, toolcalls.jsonl,
servers/, sittings.jsonl, point_kernels.jsonl with --kernel-profile, raw/) and points $RESULTS_DIR/bench/latest at
it; ./make_dashboard.py turns it into HTML.
The lines before the last say how the run did against the estimate it was planned with, over all its sittings
(the first run and each --resume), and how far its ETA swung (llmhost.bench.reckoning). The last stdout line is one
JSON document: {"run_dir", "points_ok", "points_failed", ..., "estimate_s", "actual_s", "sittings", ...}.

Faults: one run per server at a time (a second is refused, exit 75, naming the first: $WORK_DIR/server/bench.lock);
./serve.sh stop during a run ends it with one line and leaves the server stopped; a dead server is restarted once
per point; a write failure (disk full) ends the run with one line naming the path and the free space; a point
killed at its time limit keeps its finished requests; a failed point names the server log's error when there is one.
"""
from __future__ import annotations

import json
import shutil
import sys
import time

from llmhost.bench import arms as arms_mod
from llmhost import config, deps, files, provenance
from llmhost.bench import budget, costs, dryrun, options, points, preflight, records, runlock, runner, startup_bench
from llmhost.bench import load_profile, model_shape, reckoning, run_end, single_stream, sittings, store, telemetry
from llmhost.bench.eta import Eta, fmt_s
from llmhost.bench.runner import BenchError
from llmhost.bench.workloads import REGISTRY as WORKLOADS
from llmhost.tune import cli as tune_cli, driver as tune_driver

EXIT_BUSY = 75  # another run holds the server (EX_TEMPFAIL, as ./serve.sh uses for its own lock)


# --- the run -----------------------------------------------------------------------------------------------------

def open_run(opts: options.Options, cfg: config.Config, model: costs.CostModel) -> tuple[
        store.RunStore, list[arms_mod.Arm], list[points.Point], int, budget.BudgetPlan | None,
        tune_driver.TuneRun | None]:
    """A new run (arms, plan, seed from the options; the plan fitted to --budget-min unless --quick or --repeat
    fix it; a --tune run's trials fitted to it) or the resumed one (all from its manifest, no budget)."""
    if opts.resume:
        run = store.RunStore(opts.resume)
        try:
            manifest = run.read_manifest()
        except records.RecordError as exc:  # one line, the words make_dashboard.py uses for the same file
            raise BenchError(f"--resume: {exc}") from None
        if opts.apply and manifest.tune is None:
            raise BenchError(f"--apply: {opts.resume} is not a --tune run (it has no winner to write)")
        tune = tune_driver.TuneRun.from_dict(manifest.tune) if manifest.tune else None
        return run, list(manifest.arms), list(manifest.plan), manifest.seed, None, tune
    if opts.tune:
        tune, arms, plan = tune_cli.open_tune(opts.workloads, opts.loads, opts.repeat, opts.budget_min, model, cfg)
        return None, arms, plan, opts.seed, None, tune  # type: ignore[return-value]
    try:
        arms = arms_mod.select(opts.arms, opts.user_arms, arms_mod.config_arm_specs(cfg.bench_user_arms))
    except arms_mod.ArmError as exc:
        raise BenchError(f"{exc} — see ./run_bench.py --help") from None
    planned = None
    model = model.with_arms(arms)
    if opts.quick or opts.repeat is not None:
        plan = points.build_plan(arms, opts.workloads, opts.quick, opts.repeat or 1, opts.loads)
    else:
        planned = budget.plan(arms, opts.workloads, opts.loads, model, opts.budget_min * 60)
        plan = planned.points
        if not plan and planned.left_out:
            raise BenchError(f"nothing fits in --budget-min {opts.budget_min:g}: one boot and the first point take "
                             f"~{fmt_s(model.boot_s(False) + model.point_s(planned.left_out[0]))} — raise it")
    if not plan:  # --quick has agent and chat points only
        raise BenchError(f"no points: {'--quick' if opts.quick else 'the sweep'} has none for workloads "
                         f"{','.join(opts.workloads)} — add agent or chat to --workloads, or drop --quick")
    return None, arms, plan, opts.seed, planned, None  # type: ignore[return-value]


def manifest(run: store.RunStore, opts: options.Options, cfg: config.Config, arms: list[arms_mod.Arm],
             plan: list[points.Point], seed: int, tune: tune_driver.TuneRun | None,
             estimate: records.Estimate | None) -> records.Manifest:
    shape, shape_note = model_shape.read(cfg.model_dir)  # what a decode step reads, for the dashboard
    return records.Manifest(
        run_id=run.run_id, provenance=provenance.collect(["run_bench.py", *opts.argv], python=cfg.sglang_python),
        config=config.redacted(cfg), seed=seed, slo=opts.slo, arms=tuple(arms),
        workloads=tuple(records.WorkloadRecord.of(WORKLOADS[w]) for w in dict.fromkeys(p.workload for p in plan)),
        plan=tuple(plan), tune=tune.to_dict() if tune else None, estimate=estimate,
        model_shape=shape, model_shape_note=shape_note)


def main(argv: list[str] | None = None) -> int:
    began_at = time.time()  # this sitting of the run began: the time it counts starts here
    opts = options.parse_args(sys.argv[1:] if argv is None else argv, __doc__)
    try:
        cfg = config.load()
        deps.ensure(__file__, ("openai", "numpy"), "bench")  # the host python3 lacks them; setup's venv has them
        model = costs.fit(cfg.results_path / "bench")  # this host's last runs, else the H200 defaults
        if opts.startup:  # start-up only: restarts, no load points, its own run directory
            return startup_bench.main(cfg, model, opts.startup, opts.arms, opts.user_arms, opts.tag, opts.dry_run,
                                      opts.argv, opts.import_profile)
        if opts.single_stream:  # one stream only: per arm where its time per output token goes
            return single_stream.main(cfg, opts.single_stream, opts.arms, opts.user_arms, opts.tag, opts.dry_run,
                                      opts.argv)
        run, arms, plan, seed, planned, tune = open_run(opts, cfg, model)
        model = model.with_arms(arms)  # each arm's points priced by its launch flags
        quick = opts.quick if run is None else "--quick" in run.read_manifest().provenance.command
    except (config.ConfigError, BenchError) as exc:
        print(f"[bench] error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, config.ConfigError) else 2
    # --- what a real run would stop at, checked before any work, and by the dry run too ---
    ready = preflight.check(cfg, plan, seed, new_run=run is None)
    if opts.dry_run:
        left = plan
        if run is not None:  # a resume: what is left to run, not what the plan was
            for line in store.resume_lines(run, plan, opts.only_missing):
                print(f"[bench] {line}")
            done = run.done_points(opts.only_missing)
            left = [p for p in plan if p.point_id not in done]
        print_dry_run(with_profiles(left, opts.kernel_profile), arms, model, quick, planned, tune,
                      ready if isinstance(ready, str) else None)
    if isinstance(ready, str):
        print(f"[bench] error: {ready}", file=sys.stderr)
        return 1
    if opts.dry_run:
        return 0
    module, help_text, env = ready
    # --- one run per server at a time: refused before anything is created or restarted, the owner named ---
    lock = runlock.RunLock(cfg.state_dir)
    try:
        lock.acquire(["run_bench.py", *opts.argv])
    except runlock.RunBusy as exc:
        print(f"[bench] error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    with lock:
        # --- the run directory: a new one (manifest first) or the resumed one ---
        try:
            # a new run's (a resumed one keeps its first); a tune's dry run prices only its coarse stage (the
            # refine stage spends what is left): no estimate to hold it to
            estimate = dryrun.estimate(with_profiles(plan, opts.kernel_profile), arms, model, quick, planned) \
                if run is None and not tune else None
            run = open_store(run, opts, cfg, arms, plan, seed, help_text, tune, estimate)
        except files.WriteError as exc:  # nothing half-written is left: an empty new run directory is removed
            print(f"[bench] error: {exc} — free space or fix permissions, then run again", file=sys.stderr)
            return 1
        lock.record_owner(["run_bench.py", *opts.argv], run.root)
        print(f"[bench] run directory {run.root} ({len(plan)} points, {len(arms)} arms, load generator {module})")
        if opts.resume:  # what --resume will do, before it does it
            for line in store.resume_lines(run, plan, opts.only_missing):
                print(f"[bench] {line}", flush=True)
        sampler = telemetry.Sampler(cfg.base_url, run.append_telemetry, cfg.api_key())
        bench = runner.Bench(cfg, run, module, seed, env, sampler, total=len(plan), only_missing=opts.only_missing,
                             kernel_profile=opts.kernel_profile)
        stages = tune_cli.stages_hook(tune, model, run.read_manifest().slo or opts.slo, run, cfg,
                                      tune_cli.config_target() if opts.apply else None, bool(opts.resume)) \
            if tune else None  # a tune's coarse and refine stages run in place of the plain arm loop
        return execute(bench, arms, plan, quick, model, planned.budget_s if planned else None, began_at, stages)


def with_profiles(plan: list[points.Point], kernel_profile: bool) -> list[points.Point]:
    """The plan and, with --kernel-profile, the profile pass each closed-loop load adds (so estimates count it)."""
    return plan + load_profile.passes(plan) if kernel_profile else plan


def print_dry_run(plan: list[points.Point], arms: list[arms_mod.Arm], model: costs.CostModel, quick: bool,
                  planned: budget.BudgetPlan | None, tune: tune_driver.TuneRun | None, problem: str | None) -> None:
    """The dry run: the plan with its estimate (and a tune's trials), then one JSON line; nothing starts."""
    est = dryrun.print_plan(plan, arms, model, quick, planned)
    if tune:
        tune_cli.print_plan(tune, model)
    print(json.dumps({"dry_run": True, "points": len(plan), "arms": [a.name for a in dryrun.active_arms(arms, plan)],
                      "estimate_s": round(est.estimate_s), "calibrated": est.calibrated,
                      "budget_s": planned.budget_s if planned else None,
                      "left_out": [p.point_id for p in planned.left_out] if planned else [], "problem": problem,
                      **({"tune": {"trials": [t.name for t in tune.trials], "cut": list(tune.cut)}} if tune else {})}))


def open_store(run: store.RunStore | None, opts: options.Options, cfg: config.Config, arms: list[arms_mod.Arm],
               plan: list[points.Point], seed: int, help_text: str, tune: tune_driver.TuneRun | None,
               estimate: records.Estimate | None) -> store.RunStore:
    """The resumed run (its manifest, the first estimate included, as it is), or a new one with its manifest
    written first; WriteError (one line) when that fails, and then a new run's directory is removed again (it
    holds nothing)."""
    fresh = run is None
    if run is None:
        run = store.RunStore.create(cfg.results_path, opts.tag or ("tune" if tune else ""))
    try:
        if fresh:
            run.write_manifest(manifest(run, opts, cfg, arms, plan, seed, tune, estimate))
        files.write_text_atomic(run.raw_dir() / "bench_help.txt", help_text)
    except files.WriteError:
        if fresh:
            shutil.rmtree(run.root, ignore_errors=True)  # created a moment ago by this run: nothing recorded in it
        raise
    return run


def execute(b: runner.Bench, arms: list[arms_mod.Arm], plan: list[points.Point], quick: bool,
            model: costs.CostModel, budget_s: float | None, began_at: float,
            stages: tune_cli.Stages | None = None) -> int:
    """Telemetry on, every boot, telemetry off; the closing lines; the exit code. `budget_s`: the --budget-min
    budget, whose time left after the plan goes to adaptive repeats (None: no adaptive repeats). `began_at`: when
    this sitting of the run began (time.time()). `stages`: a tune run's stages, run instead of the plain arm loop
    (they return the final arms, plan and closing JSON part)."""
    run = b.store
    done_before = run.done_points(b.only_missing)
    if stages is None and all(p.point_id in done_before for p in plan):
        # a --resume of a finished run: nothing to start, and no sitting that would count its start-up as the run's
        print("[bench] nothing left to run: every point is recorded", flush=True)
        return close(b, plan, {})
    b.sampler.start()
    left = {p.arm for p in plan if p.point_id not in done_before}
    b.done = len(done_before)
    b.clock = Eta(model, with_profiles([p for p in plan if p.point_id not in done_before], b.kernel_profile),
                  len(runner.boots([a for a in arms if a.name in left])), quick)
    b.budget_end = time.monotonic() + budget_s if budget_s else None
    runner.interrupt_on_sigterm()
    resume = f"./run_bench.py --resume {run.root}"
    closing: dict = {}  # a tune's part of the closing JSON
    try:
        b.sitting = sittings.Sitting.begin(run, began_at, b.clock.seconds_left())  # appended as it goes
        line = reckoning.resume_line(run.read_manifest().estimate, b.sitting.number, b.clock.seconds_left())
        if line:
            print(f"[bench] {line}", flush=True)
        if stages is None:
            runner.run_arms(b, arms, plan, quick)
        else:
            arms, plan, closing = stages(b)
    except (KeyboardInterrupt, runner.UserStopped, OSError) as exc:
        ended = run_end.ended_by(exc, run.root, resume)
        if ended is None:
            raise
        print(ended[0], file=sys.stderr)
        return ended[1]
    except points.LoadgenError as exc:  # the installed SGLang's benchmark API is not the one this toolkit drives
        print(f"[bench] error: {exc}", file=sys.stderr)
        return 1
    finally:
        b.sampler.stop()
        if b.sitting:
            b.sitting.end()
    gaps = b.sampler.gap_warning()
    if gaps:
        print(f"[bench] warning: {gaps}", file=sys.stderr)
    return close(b, plan, closing)


def close(b: runner.Bench, plan: list[points.Point], closing: dict) -> int:
    """The closing lines (the reckoning over all sittings, the headline CIs) and the closing JSON; the exit code:
    0 when every planned point is ok. `closing`: a tune's part of the JSON."""
    run = b.store
    latest = run.latest_attempts()
    ok = sum(1 for p in plan if p.point_id in latest and latest[p.point_id].status == "ok")
    tally = reckoning.of_run(run.root, run.read_manifest())  # None: a run planned before runs kept an estimate
    for line in tally.lines() if tally else ():
        print(f"[bench] {line}", flush=True)
    cis = budget.headline_line(latest.values())
    if cis:
        print(f"[bench] {cis}", flush=True)
    serving = run_end.left_serving(b.serving)
    if serving:
        print(f"[bench] {serving}", flush=True)
    print(json.dumps({"run_dir": str(run.root), "run_id": run.run_id, "points_planned": len(plan), "points_ok": ok,
                      "points_failed": len(plan) - ok,
                      "adaptive_repeats": len(set(latest) - {p.point_id for p in plan}),
                      "telemetry_ticks": b.sampler.ticks,
                      "telemetry_gaps": len(b.sampler.gaps), **(tally.to_json() if tally else {}),
                      **({"tune": closing} if closing else {})}))
    return 0 if ok == len(plan) else 1

if __name__ == "__main__":
    raise SystemExit(main())
