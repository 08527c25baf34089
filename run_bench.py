#!/usr/bin/env python3
"""Benchmark the SGLang server arm by arm with SGLang's own load generator; write a results run directory.

Each arm (baseline FlashInfer, prefix cache off, FP8 KV, page size 16, Triton attention, your own) differs from the
baseline by one launch flag and runs on a freshly restarted server (./serve.sh restart). Each point is one
`python -m sglang.benchmark.serving` subprocess after a verified prefix-cache flush; telemetry (/metrics + GPU)
is sampled every second on the same clock as the per-request start times.

    ./run_bench.py --dry-run                 # the plan, with a time estimate; nothing runs
    ./run_bench.py --quick                   # all five arms, small (~13 min on an H200 incl. 5 restarts)
    ./run_bench.py --arms baseline,fp8-kv --repeat 3 --tag fp8
    ./run_bench.py --arm chunk4k="--chunked-prefill-size 4096"
    ./run_bench.py --resume results/bench/20260101-120000   # after a crash or kill: only what is missing

Writes $RESULTS_DIR/bench/<run_id>/ (manifest.json, points.jsonl, requests/, telemetry.jsonl, toolcalls.jsonl,
servers/, raw/) and points $RESULTS_DIR/bench/latest at it; ./make_dashboard.py turns it into HTML.
The last stdout line is one JSON document: {"run_dir", "points_ok", "points_failed", ...}.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from llmhost import arms as arms_mod
from llmhost import config, points, server, store, telemetry, toolcalls
from llmhost.workloads import REGISTRY as WORKLOADS

REPO = Path(__file__).resolve().parent
RESTART_EST_S = 130.0  # measured on an H200 (SGLang 0.5.17, warm kernel caches): 102-162 s to ready; ~7 min cold
WARM_ARM_EST_S = 15.0  # the untimed warm pass of a full run: load-generator start + 16 short requests

SLO_DEFAULTS = {"ttft_ms": 1000.0, "itl_ms": 50.0, "pct": 99.0}  # recorded in the manifest; the dashboard can override


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    arms: list[str] | None
    user_arms: list[str]
    workloads: list[str]
    quick: bool
    repeat: int
    seed: int
    tag: str
    resume: Path | None
    dry_run: bool
    slo: dict[str, float]
    argv: list[str]


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", help=f"comma-separated arms to run (default: all; built in: {', '.join(arms_mod.REGISTRY)})")
    parser.add_argument("--arm", action="append", default=[], metavar='NAME="FLAGS"',
                        help="add an arm: baseline + these launch_server flags (repeatable; also BENCH_USER_ARMS)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads (default: all: {', '.join(WORKLOADS)})")
    parser.add_argument("--quick", action="store_true", help="small plan: one agent point per arm + cold/warm and "
                        "Poisson points on the baseline (~13 min on an H200 with 5 arms: 5 restarts of ~130 s + 7 points)")
    parser.add_argument("--repeat", type=int, default=1, help="repeats of every point (default: 1)")
    parser.add_argument("--seed", type=int, default=1, help="dataset + arrival seed for bench_serving (default: 1)")
    parser.add_argument("--tag", default="", help="suffix of the run id (letters, digits, - and _)")
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a killed run; plan and seed "
                        "come from its manifest, points already recorded are kept")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate, run nothing")
    parser.add_argument("--slo-ttft-ms", type=float, default=SLO_DEFAULTS["ttft_ms"],
                        help="SLO recorded with the run: time to first token, ms (default: 1000)")
    parser.add_argument("--slo-itl-ms", type=float, default=SLO_DEFAULTS["itl_ms"],
                        help="SLO recorded with the run: mean inter-token latency, ms (default: 50)")
    parser.add_argument("--slo-pct", type=float, default=SLO_DEFAULTS["pct"],
                        help="SLO recorded with the run: percent of requests meeting both (default: 99)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.tag and not all(c.isalnum() or c in "-_" for c in args.tag):
        parser.error(f"--tag {args.tag!r}: use letters, digits, - and _")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown or not workloads:
        parser.error(f"unknown workload {', '.join(unknown) or '(none)'} (known: {', '.join(WORKLOADS)})")
    if args.resume and not (args.resume / "manifest.json").is_file():
        parser.error(f"--resume {args.resume}: no manifest.json there (pass a results/bench/<run_id> directory)")
    names = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
    slo = {k: getattr(args, f"slo_{k}") for k in SLO_DEFAULTS}
    return Options(names, args.arm, workloads, args.quick, args.repeat, args.seed, args.tag, args.resume,
                   args.dry_run, slo, list(argv))


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def arm_overhead_s(quick: bool) -> float:
    """Per-arm time outside the points: the restart, plus the warm pass of a full run."""
    return RESTART_EST_S + (0.0 if quick else WARM_ARM_EST_S)


def print_plan(plan: list[points.Point], arms: list[arms_mod.Arm], restart_s: float) -> None:
    """The dry-run table: every point with its load and estimate, then the total."""
    print(f"[bench] plan: {len(plan)} points over {len(arms)} arms ({', '.join(a.name for a in arms)})")
    print(f"{'#':>4}  {'point_id':<48} {'pattern':<11} {'conc':>5} {'rate':>6} {'prompts':>7} {'est':>7}")
    for i, p in enumerate(plan, 1):
        rate = f"{p.request_rate:g}" if p.request_rate else "inf"
        print(f"{i:>4}  {p.point_id:<48} {p.pattern:<11} {p.concurrency or '-':>5} {rate:>6} {p.num_prompts:>7} "
              f"{fmt_s(points.estimate_s(p)):>7}")
    total = sum(map(points.estimate_s, plan)) + restart_s * len(arms)
    print(f"[bench] estimate: {fmt_s(total)} on an H200 ({len(arms)} arms x ~{restart_s:.0f}s restart/warm-up + points)")


class BenchError(Exception):
    """A problem that stops the run; the message is one line naming it and the next step."""


@dataclasses.dataclass(slots=True)
class Bench:
    """What every step of a run needs (mutable run state: progress counters, the point telemetry is tagged with)."""

    cfg: config.Config
    store: store.RunStore
    module: str
    seed: int
    env: dict[str, str]
    sampler: telemetry.Sampler
    total: int
    done: int = 0
    est_left_s: float = 0.0
    est_spent_s: float = 0.0
    t0: float = dataclasses.field(default_factory=time.monotonic)

    def eta(self) -> str:
        """Remaining estimate, scaled by how the estimates compared with reality so far."""
        factor = (time.monotonic() - self.t0) / self.est_spent_s if self.est_spent_s > 30 else 1.0
        return fmt_s(self.est_left_s * min(max(factor, 0.3), 5.0))

    def progress(self, text: str) -> None:
        print(f"[bench {self.done}/{self.total}] {text}  ETA {self.eta()}", flush=True)

    def spend(self, estimate_s: float) -> None:
        self.est_left_s -= estimate_s
        self.est_spent_s += estimate_s


# --- the environment ---------------------------------------------------------------------------------------------

def loadgen_env(cfg: config.Config) -> dict[str, str]:
    """Load-generator environment: bench_serving reads the API key from OPENAI_API_KEY, never from its argv."""
    env = dict(os.environ)
    key = cfg.api_key()
    if key:
        env["OPENAI_API_KEY"] = key
    return env


# --- one arm: a fresh server -------------------------------------------------------------------------------------

def restart_server(b: Bench, arm: arms_mod.Arm) -> str:
    """./serve.sh restart with this arm's one difference; record servers/<arm>.json. Returns '' or an error."""
    env = {**os.environ, "SERVER_EXTRA_ARGS": arms_mod.server_extra_args(b.cfg.server_extra_args, arm)}
    log = b.store.raw_dir() / f"serve-{arm.name}.log"
    started = time.time()
    try:
        with open(log, "ab") as out:
            code = subprocess.run([str(REPO / "serve.sh"), "restart"], env=env, cwd=REPO, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=b.cfg.ready_timeout_s + 300).returncode
    except subprocess.TimeoutExpired:
        code = 124
    if code != 0:
        return f"./serve.sh restart failed for arm {arm.name}: {points.last_line(log)}"
    state = b.cfg.state_dir
    status, body = server.http_get(b.cfg, "/server_info", timeout=10, api_key=b.cfg.api_key())
    try:
        info = json.loads(body) if status == 200 else {"error": f"HTTP {status}: {body[:200]}"}
    except json.JSONDecodeError:
        info = {"error": "not JSON"}
    launch = state / "launch_command.txt"
    b.store.write_server(arm.name, {
        "arm": arm.name, "launch_command": launch.read_text().strip() if launch.exists() else None,
        "server_info": store.redact(info), "ready_s": time.time() - started,
        "started_at": (state / "started_at").read_text().strip() if (state / "started_at").exists()
        else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))})
    return ""


def server_alive(cfg: config.Config) -> bool:
    return server.http_get(cfg, "/health", timeout=10, api_key=cfg.api_key())[0] == 200


def warm_arm(b: Bench, arm: arms_mod.Arm) -> None:
    """A small untimed pass (first-request and kernel warm-up); a failure is a warning, never fatal."""
    probe = points.make_point(arm.name, "chat", "concurrency", 8, None, 16, 0)
    raw = b.store.raw_dir()
    argv = points.bench_argv(probe, WORKLOADS["chat"], base_url=b.cfg.base_url, model_dir=b.cfg.model_dir,
                             served_model_name=b.cfg.served_model_name, seed=b.seed,
                             output_file=raw / f"warm-{arm.name}.jsonl", measured=False)
    code, error = points.run_loadgen(b.cfg.sglang_python, b.module, argv, starts_file=raw / f"warm-{arm.name}.starts",
                                     log_file=raw / f"warm-{arm.name}.log", env=b.env, limit_s=300)
    if code:
        print(f"[bench] warning: warm pass of arm {arm.name} failed ({error}) — continuing", flush=True)


def check_tools(b: Bench, arm: arms_mod.Arm) -> None:
    """Tool-call quality of this arm (skipped with a reason on dummy weights)."""
    from llmhost.client import Endpoint, make_client

    endpoint = Endpoint(b.cfg.base_url + "/v1", b.cfg.served_model_name, b.cfg.api_key())
    rows = toolcalls.check(arm.name, make_client(endpoint, timeout_s=120), b.cfg.served_model_name, b.cfg.load_format)
    store.append_jsonl(b.store.toolcalls_path, rows)
    scored = [r for r in rows if "ok" in r]
    print(f"[bench] tool calls, arm {arm.name}: " + (f"{sum(bool(r['ok']) for r in scored)}/{len(scored)} right"
                                                     if scored else str(rows[0].get("skipped"))), flush=True)


# --- one point: flush, (warm), measure, parse ----------------------------------------------------------------------

def attempt_point(b: Bench, point: points.Point, attempt: int) -> dict:
    """Run one attempt of a point; returns its points.jsonl record (failures are data)."""
    b.sampler.point_id = point.point_id
    started, warn_note = time.time(), None
    raw = b.store.raw_dir()
    stem = raw / f"{point.point_id}.a{attempt}.{int(started)}"  # unique: an orphan of a killed run may still write
    workload = WORKLOADS[point.workload]
    common = dict(base_url=b.cfg.base_url, model_dir=b.cfg.model_dir, served_model_name=b.cfg.served_model_name,
                  seed=b.seed)
    flushed = server.flush_cache(b.cfg, b.cfg.api_key(), wait_s=120)  # 200 only once SGLang emptied the tree
    error, summary, rel = ("prefix cache flush failed (HTTP 400 for 120 s or no answer)" if not flushed else ""), {}, ""
    if flushed and point.pattern == "warm":
        code, warm_error = points.run_loadgen(
            b.cfg.sglang_python, b.module, points.bench_argv(point, workload, output_file=Path(f"{stem}.warm.jsonl"),
                                                             measured=False, **common),
            starts_file=Path(f"{stem}.warm.starts"), log_file=Path(f"{stem}.log"), env=b.env,
            limit_s=points.timeout_s(point))
        warn_note = f"warm pass failed: {warm_error}" if code else None
    if flushed:
        argv = points.bench_argv(point, workload, output_file=Path(f"{stem}.jsonl"), **common)
        code, error = points.run_loadgen(b.cfg.sglang_python, b.module, argv, starts_file=Path(f"{stem}.starts"),
                                         log_file=Path(f"{stem}.log"), env=b.env, limit_s=points.timeout_s(point))
        if not code:
            try:
                details = points.read_details(Path(f"{stem}.jsonl"))
                starts = json.loads(Path(f"{stem}.starts").read_text())
                rows = points.request_rows(details, starts, started)
                summary = points.summarize(details, rows, point.request_rate)
                rel = b.store.write_requests(point.point_id, rows)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                error = f"unreadable load-generator output: {type(exc).__name__}: {exc}"[:300]
    record = {**point.as_plan(), "attempt": attempt, "status": "failed" if error else "ok", "error": error or None,
              "started_at": started, "ended_at": time.time(),
              "cache_flushed": flushed and point.pattern != "warm", "summary": summary,
              "requests_file": rel or f"requests/{point.point_id}.jsonl"}
    if warn_note:
        record["warning"] = warn_note
    b.sampler.point_id = None
    return record


def run_point(b: Bench, arm: arms_mod.Arm, point: points.Point, first_attempt: int) -> bool:
    """Attempts until ok or failed on the retry; a dead server is restarted before the retry. Returns ok."""
    for attempt in range(first_attempt, 3):
        b.progress(f"{point.point_id}: running{' (retry)' if attempt > 1 else ''}")
        record = attempt_point(b, point, attempt)
        b.store.append_point(record)
        s = record["summary"]
        if record["status"] == "ok":
            note = "  CLIENT-BOUND" if s.get("client_bound") else ""
            b.done += 1
            b.spend(points.estimate_s(point))
            b.progress(f"{point.point_id} ok {record['ended_at'] - record['started_at']:.1f}s "
                       f"({s['completed']} done, {s['failed']} failed, {s['output_throughput']:.0f} tok/s){note}")
            return True
        print(f"[bench] {point.point_id} attempt {attempt} failed: {record['error']}", flush=True)
        if attempt == 1 and not server_alive(b.cfg):
            print(f"[bench] the server is not answering — restarting arm {arm.name} before the retry", flush=True)
            error = restart_server(b, arm)
            if error:
                print(f"[bench] {error}", flush=True)
    b.done += 1
    b.spend(points.estimate_s(point))
    return False


# --- the run -----------------------------------------------------------------------------------------------------

def open_run(opts: Options, cfg: config.Config) -> tuple[store.RunStore, list[arms_mod.Arm], list[points.Point], int]:
    """A new run (arms, plan, seed from the options) or the resumed one (all three from its manifest)."""
    if opts.resume:
        run = store.RunStore(opts.resume)
        manifest = run.read_manifest()
        arms = [arms_mod.Arm(**{**a, "flags": tuple(a["flags"])}) for a in manifest["arms"]]
        return run, arms, [points.Point(**p) for p in manifest["plan"]], int(manifest["seed"])
    try:
        arms = arms_mod.select(opts.arms, [*opts.user_arms, *arms_mod.config_arm_specs(cfg.bench_user_arms)])
    except arms_mod.ArmError as exc:
        raise BenchError(f"{exc} — see ./run_bench.py --help") from None
    return None, arms, points.build_plan(arms, opts.workloads, opts.quick, opts.repeat), opts.seed  # type: ignore[return-value]


def manifest(run: store.RunStore, opts: Options, cfg: config.Config, arms: list[arms_mod.Arm],
             plan: list[points.Point], seed: int) -> dict:
    return {"schema": 1, "run_id": run.run_id, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": ["run_bench.py", *opts.argv], "git_commit": store.git_commit(),
            "versions": store.versions(cfg.sglang_python), "gpu": telemetry.gpu_info(),
            "config": config.redacted(cfg), "seed": seed, "slo": opts.slo,
            "arms": [a.as_manifest() for a in arms],
            "workloads": [WORKLOADS[w].as_manifest() for w in dict.fromkeys(p.workload for p in plan)],
            "plan": [p.as_plan() for p in plan]}


def run_arms(b: Bench, arms: list[arms_mod.Arm], plan: list[points.Point], quick: bool) -> None:
    """Arm by arm: fresh server, warm pass, tool calls, then every point not yet recorded."""
    attempts = b.store.latest_attempts()
    done = b.store.done_points()
    for arm in arms:
        todo = [p for p in plan if p.arm == arm.name and p.point_id not in done]
        if not todo:
            continue
        b.progress(f"arm {arm.name}: restarting the server with {' '.join(arm.flags) or 'the baseline flags'}")
        error = restart_server(b, arm)
        b.est_left_s -= arm_overhead_s(quick)
        if error:  # recorded as attempt-1 failures: --resume tries them again
            print(f"[bench] {error} — its {len(todo)} points are marked failed", flush=True)
            for p in todo:
                b.store.append_point({**p.as_plan(), "attempt": 1, "status": "failed", "error": error,
                                      "started_at": time.time(), "ended_at": time.time(), "cache_flushed": False,
                                      "summary": {}, "requests_file": f"requests/{p.point_id}.jsonl"})
                b.done += 1
                b.spend(points.estimate_s(p))
            continue
        if not quick:
            warm_arm(b, arm)
        if arm.name not in b.store.toolcall_arms():
            check_tools(b, arm)
        for p in todo:
            run_point(b, arm, p, int(attempts.get(p.point_id, {}).get("attempt", 0)) + 1)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = config.load()
        run, arms, plan, seed = open_run(opts, cfg)
        quick = opts.quick if run is None else "--quick" in run.read_manifest().get("command", [])
    except (config.ConfigError, BenchError) as exc:
        print(f"[bench] error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, config.ConfigError) else 2
    # --- the plan: print it and stop, or check it against the installed load generator ---
    if opts.dry_run:
        print_plan(plan, arms, arm_overhead_s(quick))
        print(json.dumps({"dry_run": True, "points": len(plan), "arms": [a.name for a in arms],
                          "estimate_s": round(sum(map(points.estimate_s, plan)) + arm_overhead_s(quick) * len(arms))}))
        return 0
    env = loadgen_env(cfg)
    try:
        module, help_text = points.find_loadgen(cfg.sglang_python, env)
    except points.LoadgenError as exc:
        print(f"[bench] error: {exc}", file=sys.stderr)
        return 1
    probe = points.bench_argv(plan[0], WORKLOADS[plan[0].workload], base_url=cfg.base_url, model_dir=cfg.model_dir,
                              served_model_name=cfg.served_model_name, seed=seed, output_file=Path("x"))
    flags = sorted({f for p in plan for f in points.unknown_flags(
        [*probe, *WORKLOADS[p.workload].dataset_args(p.num_prompts)], help_text)})
    if flags:
        print(f"[bench] error: the installed {module} lacks {', '.join(flags)} — install SGLang "
              f"{cfg.sglang_version} (./setup_host.sh)", file=sys.stderr)
        return 1
    # --- the run directory: a new one (manifest first) or the resumed one ---
    if run is None:
        run = store.RunStore.create(cfg.results_path, opts.tag)
        run.write_manifest(manifest(run, opts, cfg, arms, plan, seed))
    (run.raw_dir() / "bench_help.txt").write_text(help_text)
    print(f"[bench] run directory {run.root} ({len(plan)} points, {len(arms)} arms, load generator {module})")
    # --- telemetry on, arms, telemetry off ---
    sampler = telemetry.Sampler(cfg.base_url, lambda rows: store.append_jsonl(run.telemetry_path, rows),
                                cfg.api_key()).start()
    done_before = run.done_points()
    b = Bench(cfg, run, module, seed, env, sampler, total=len(plan), done=len(done_before),
              est_left_s=sum(points.estimate_s(p) for p in plan if p.point_id not in done_before)
              + arm_overhead_s(quick) * len({p.arm for p in plan if p.point_id not in done_before}))
    try:
        run_arms(b, arms, plan, quick)
    except KeyboardInterrupt:
        print(f"[bench] interrupted — continue with ./run_bench.py --resume {run.root}", file=sys.stderr)
        return 130
    finally:
        sampler.stop()
    latest = run.latest_attempts()
    ok = sum(1 for p in plan if latest.get(p.point_id, {}).get("status") == "ok")
    print(json.dumps({"run_dir": str(run.root), "run_id": run.run_id, "points_planned": len(plan), "points_ok": ok,
                      "points_failed": len(plan) - ok, "telemetry_ticks": sampler.ticks}))
    return 0 if ok == len(plan) else 1


if __name__ == "__main__":
    raise SystemExit(main())
