"""What run_bench.py's restart-per-arm modes share (--startup, --single-stream): no load points, the arms restarted
one by one through llmhost.serve.lifecycle (as ./serve.sh restart does), a run directory of their own.

    problem = mode_problem(args, "startup", "restart per arm", "restarts only")     # before run_bench's defaults
    arms = pick_arms(cfg, ["baseline"], ['tok1=--tokenizer-worker-num 1'])   # ArmError: one line
    return run_locked(cfg, argv, lambda: new_run(cfg, arms, "startup", tag, argv, startup_restarts=3), measure)

The server is left running with the last arm's flags, as after any benchmark arm.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from llmhost import config, files, provenance
from llmhost.bench import arms as arms_mod
from llmhost.bench import costs, records, run_end, runlock, runner, store
from llmhost.bench.bootwatch import BootWatch
from llmhost.serve import lifecycle
from llmhost.serve.console import Console

EXIT_BUSY = 75  # another run holds the server, as run_bench.py says it
MODES = ("startup", "single_stream")  # the options that pick a restart-per-arm mode; one at a time
# Options that plan load points: these modes have none, so any of them is a mistake, not something to ignore.
LOAD_OPTIONS = ("concurrency", "rates", "patterns", "workloads", "budget_min", "tune", "quick", "repeat",
                "duration_s", "resume", "only_missing", "apply")


def mode_problem(args: argparse.Namespace, mode: str, unit: str, measures: str) -> str | None:
    """Why the mode option `mode` (e.g. "startup") cannot work with the other options given, as one line; None
    when it can or was not given. Called before run_bench.py fills in its defaults, so every option seen set was
    given. `unit`: what its N counts; `measures`: what the mode measures instead of load points."""
    value = getattr(args, mode)
    if value is None:
        return None
    flag = f"--{mode.replace('_', '-')}"
    if value < 1:
        return f"{flag} must be >= 1 {unit} (got {value})"
    given = [f"--{name.replace('_', '-')}" for name in (*LOAD_OPTIONS, *MODES)
             if name != mode and getattr(args, name, None)]
    if given:
        return f"{flag} measures {measures}, no load points: drop {', '.join(given)}"
    return None


def pick_arms(cfg: config.Config, names: list[str] | None, user_arms: list[str]) -> list[arms_mod.Arm]:
    """baseline (or the --arms names) plus the --arm ones; ArmError (one line) for a bad or unknown arm."""
    return arms_mod.select(names or ["baseline"], user_arms, arms_mod.config_arm_specs(cfg.bench_user_arms))


def new_run(cfg: config.Config, arms: list[arms_mod.Arm], kind: str, tag: str, argv: list[str],
            **manifest_fields: Any) -> store.RunStore:
    """A fresh <run_id>-<kind> directory with its manifest written first (WriteError, one line, when it fails).
    `manifest_fields`: the mode's own manifest field, e.g. startup_restarts=3."""
    run = store.RunStore.create(cfg.results_path, f"{tag}-{kind}" if tag else kind)
    try:
        run.write_manifest(records.Manifest(
            run_id=run.run_id, provenance=provenance.collect(["run_bench.py", *argv], python=cfg.sglang_python),
            config=config.redacted(cfg), seed=0, slo=None, arms=tuple(arms), workloads=(), plan=(),
            **manifest_fields))
    except files.WriteError:
        shutil.rmtree(run.root, ignore_errors=True)  # created a moment ago: nothing recorded in it
        raise
    return run


def run_locked(cfg: config.Config, argv: list[str], create: Callable[[], store.RunStore],
               measure: Callable[[store.RunStore], int]) -> int:
    """Under the bench lock (a second run is refused, exit 75): create the run directory, then measure; the exit
    code. A results directory that cannot be written is one line before anything is restarted."""
    problem = files.writable_dir_problem(cfg.results_path / "bench")
    if problem:
        print(f"[bench] error: {cfg.source('RESULTS_DIR')}: RESULTS_DIR={cfg.results_dir}: {problem}", file=sys.stderr)
        return 1
    lock = runlock.RunLock(cfg.state_dir)
    try:
        lock.acquire(["run_bench.py", *argv])
    except runlock.RunBusy as exc:
        print(f"[bench] error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    with lock:
        try:
            run = create()
        except files.WriteError as exc:
            print(f"[bench] error: {exc} — free space or fix permissions, then run again", file=sys.stderr)
            return 1
        lock.record_owner(["run_bench.py", *argv], run.root)
        return measure(run)


def restart(cfg: config.Config, run: store.RunStore, arm: arms_mod.Arm, since: float,
            extra_flags: Sequence[str] = (), extra_env: str = "") -> lifecycle.ReadyInfo:
    """Restart the server with the arm's flags (+ `extra_flags`, + `extra_env` KEY=VALUE pairs after SERVER_ENV),
    its progress appended to raw/serve-<arm>.log. ServeError when it does not start; runner.UserStopped when
    ./serve.sh stop ran after `since` (the user's stop ends the run)."""
    flags, settings = arms_mod.server_overrides(arm)
    if extra_env:
        settings = {**settings, "SERVER_ENV": f"{cfg.server_env} {extra_env}".strip()}
    watch = BootWatch(lambda text: print(f"[bench] arm {arm.name}: {text}", flush=True), costs.RESTART_EST_S,
                      cfg.state_dir / "server.log")
    try:
        with open(run.raw_dir() / f"serve-{arm.name}.log", "a") as log, watch:
            return lifecycle.restart(cfg, extra_args=[*flags, *extra_flags], settings=settings,
                                     console=Console(log, log), unless_stopped_since=since)
    except lifecycle.StoppedByUser as exc:
        raise runner.UserStopped(exc.when) from None


def cut_short(exc: BaseException, run: store.RunStore, fresh: str) -> int:
    """A mode run ended by Ctrl-C, ./serve.sh stop or a write failure: its one line (run_end) and exit code; any
    other exception is raised again. `fresh`: what the user can start instead, as run_end words it."""
    ended = run_end.ended_by(exc, run.root, fresh)
    if ended is None:
        raise exc
    print(ended[0], file=sys.stderr)
    return ended[1]
