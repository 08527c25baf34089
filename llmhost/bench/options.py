"""run_bench.py's command line: its options, and every combination that cannot work refused in one line before
anything runs (exit 2, argparse's usage error). The modes that add options (--tune, --startup, --single-stream)
bring their own and their own refusals (llmhost.tune.cli, llmhost.bench.startup_bench, llmhost.bench.single_stream).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

from llmhost import cli, slo as slo_rule
from llmhost.bench import arms as arms_mod
from llmhost.bench import budget, points, records, single_stream, startup_bench, store
from llmhost.bench.workloads import REGISTRY as WORKLOADS
from llmhost.tune import cli as tune_cli

SLO_DEFAULTS = slo_rule.DEFAULTS  # recorded in the manifest; the dashboard can override
TAG_MAX = 64  # a run id is YYYYmmdd-HHMMSS-TAG, one path component
MAX_REPEAT = 100  # --repeat: far past any budget, short of a plan too big to build


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    arms: list[str] | None
    user_arms: list[str]
    workloads: list[str]
    quick: bool
    repeat: int | None  # None: the --budget-min plan decides
    budget_min: float
    loads: points.Loads
    seed: int
    tag: str
    resume: Path | None
    only_missing: bool
    dry_run: bool
    slo: dict[str, float]
    argv: list[str]
    tune: bool = False
    apply: bool = False
    startup: int | None = None  # --startup N: restarts per arm, no load points
    single_stream: int | None = None  # --single-stream N: measured requests per arm, no load points
    import_profile: bool = False  # --import-profile (with --startup): the server's processes profile their imports
    kernel_profile: bool = False  # --kernel-profile: each closed-loop load's first repeat once more, GPU-profiled


def parse_args(argv: list[str], doc: str) -> Options:
    """run_bench.py's options, checked: a usage error exits 2 in one line (argparse's parser.error). `doc`: --help's
    text (the script's docstring)."""
    parser = cli.Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", help=f"comma-separated arms to run (default: all; built in: {', '.join(arms_mod.REGISTRY)})")
    parser.add_argument("--arm", action="append", default=[], metavar='NAME="FLAGS"',
                        help="add an arm: baseline + these launch_server flags and settings as KEY=value "
                        f"({', '.join(arms_mod.ARM_LIFECYCLE_SETTINGS)}); it runs even when --arms lists others "
                        "(repeatable; BENCH_USER_ARMS arms are picked by --arms like the built-in ones)")
    parser.add_argument("--workloads", help=f"comma-separated workloads (default: all: {', '.join(WORKLOADS)}; "
                        "agent with --tune)")
    parser.add_argument("--quick", action="store_true", help="small plan: one agent point per arm + cold/warm and "
                        "Poisson points on the baseline (~7 min on an H200 with 5 arms: 5 restarts of ~60 s + 7 "
                        "points)")
    parser.add_argument("--repeat", type=int, help="repeats of every point, no budget (default: the --budget-min "
                        "plan: 3 on the headline points, 1 elsewhere, more where the throughput CI is wide)")
    parser.add_argument("--budget-min", type=float, help="minutes the run should take on this host: the plan fits "
                        "them by the cost model learned from the last runs, keeping time for the repeats the "
                        "headline points' last measured spread calls for; the time left goes to adaptive repeats "
                        f"(default: {budget.DEFAULT_BUDGET_MIN:g})")
    parser.add_argument("--seed", type=int, default=1, help="dataset + arrival seed of repeat 1, >= 0; repeat k "
                        "uses SEED + k - 1, the same on every arm (default: 1)")
    parser.add_argument("--concurrency", metavar="N,N,...", help="closed-loop concurrency levels that replace the "
                        "plan's, per workload with concurrency points (e.g. 1,16,64,128; default: the plan's)")
    parser.add_argument("--rates", metavar="R,R,...", help="Poisson request rates, req/s, that replace the plan's, "
                        "per workload with rate points (e.g. 2,8,16; default: the plan's)")
    parser.add_argument("--patterns", metavar="P,P,...", help="only these kinds of point (of: "
                        f"{', '.join(points.PATTERNS)}; e.g. concurrency,qps; default: all the plan has)")
    parser.add_argument("--duration-s", type=float, help="size each concurrency and rate point so that its steady "
                        "window lasts about this many seconds on an H200, after its warm-up (default: the plan's "
                        "request counts)")
    parser.add_argument("--tag", default="", help=f"suffix of the run id (letters, digits, - and _; at most {TAG_MAX})")
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a killed or stopped run; plan and "
                        "seed come from its manifest, points ok are kept, failed ones tried again")
    parser.add_argument("--only-missing", action="store_true", help="with --resume: run only points never "
                        "finished; a point that failed its retry stays failed (default: failed points are retried)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate, run nothing")
    parser.add_argument("--slo-ttft-ms", type=float, default=SLO_DEFAULTS["ttft_ms"],
                        help="SLO recorded with the run: time to first token, ms (default: 1000)")
    parser.add_argument("--slo-itl-ms", type=float, default=SLO_DEFAULTS["itl_ms"],
                        help="SLO recorded with the run: mean inter-token latency, ms (default: 50)")
    parser.add_argument("--slo-pct", type=float, default=SLO_DEFAULTS["pct"],
                        help="SLO recorded with the run: percent of requests meeting both (default: 99)")
    parser.add_argument("--kernel-profile", action="store_true", help="after the first repeat of each closed-loop "
                        "load, run it once more, unmeasured, with SGLang's profiler on in its steady stretch for a "
                        "quarter more forward passes than a request's output tokens: GPU kernel time per pass by kind "
                        "(attention of decode steps and of extends, GEMM, norm, ...), each kind's wall time and the "
                        "idle between kernels, in point_kernels.jsonl and the dashboard (one extra pass per load: "
                        "counted in the estimate)")
    tune_cli.add_arguments(parser)
    startup_bench.add_arguments(parser)
    single_stream.add_arguments(parser)
    args = parser.parse_args(argv)
    # before the defaults below: a --workloads seen set was given
    problem = startup_bench.problem(args) or single_stream.problem(args)
    args.workloads = args.workloads or ("agent" if args.tune else ",".join(WORKLOADS))
    problem = problem or usage_problem(args)
    if problem:
        parser.error(problem)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    names = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
    slo = {k: getattr(args, f"slo_{k}") for k in SLO_DEFAULTS}
    loads = points.Loads(concurrency=cli.levels(args.concurrency, int), rates=cli.levels(args.rates, float),
                         duration_s=args.duration_s, patterns=cli.names_list(args.patterns))
    budget_min = (tune_cli.DEFAULT_BUDGET_MIN if args.tune else budget.DEFAULT_BUDGET_MIN) \
        if args.budget_min is None else args.budget_min
    return Options(names, args.arm, workloads, args.quick, args.repeat, budget_min, loads, args.seed, args.tag,
                   args.resume, args.only_missing, args.dry_run, slo, list(argv), args.tune, args.apply, args.startup,
                   args.single_stream, args.import_profile, args.kernel_profile)


def usage_problem(args: argparse.Namespace) -> str | None:
    """The first argument that cannot work, as one line; None when all can. Nothing is read but the manifest."""
    if args.repeat is not None and args.repeat < 1:
        return "--repeat must be >= 1"
    if args.repeat is not None and args.repeat > MAX_REPEAT:  # the plan is built point by point: a typo hangs it
        return f"--repeat must be <= {MAX_REPEAT} (got {args.repeat})"
    if args.budget_min is not None:
        if not (math.isfinite(args.budget_min) and args.budget_min >= 1):
            return f"--budget-min must be >= 1 minute (got {args.budget_min:g})"
        fixed = "--quick" if args.quick else "--repeat" if args.repeat is not None else ""
        if fixed and not args.tune:  # a tune's --repeat is per trial, inside its budget
            return f"--budget-min plans the run, {fixed} fixes its plan: give one of them"
    problem = cli.levels_problem("--concurrency", args.concurrency, int) \
        or cli.levels_problem("--rates", args.rates, float)
    if problem:
        return problem
    unknown_patterns = [p for p in cli.names_list(args.patterns) or () if p not in points.PATTERNS]
    if args.patterns is not None and (unknown_patterns or not cli.names_list(args.patterns)):
        return (f"--patterns {args.patterns!r}: unknown {', '.join(unknown_patterns) or '(none given)'} "
                f"(known: {', '.join(points.PATTERNS)})")
    if args.duration_s is not None and not (math.isfinite(args.duration_s) and args.duration_s >= 1):
        return f"--duration-s must be >= 1 second (got {args.duration_s:g})"
    problem = tune_cli.problem(args)
    if problem:
        return problem
    if args.kernel_profile and (args.tune or args.startup is not None or args.single_stream is not None):
        return ("--kernel-profile profiles the closed-loop points of a plain run: not with --tune, --startup or "
                "--single-stream (--single-stream profiles one stream's passes itself)")
    if args.seed < 0:  # bench_serving seeds numpy with it: a negative seed fails every point
        return f"--seed must be >= 0 (got {args.seed})"
    if args.tag and not re.fullmatch(rf"[A-Za-z0-9_-]{{1,{TAG_MAX}}}", args.tag):
        return f"--tag {args.tag[:80]!r}: use at most {TAG_MAX} letters, digits, - and _"
    problem = slo_rule.problem(args.slo_ttft_ms, args.slo_itl_ms, args.slo_pct)
    if problem:
        return problem
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown or not workloads:
        return f"unknown workload {', '.join(unknown) or '(none)'} (known: {', '.join(WORKLOADS)})"
    if args.arms is not None and not [a for a in args.arms.split(",") if a.strip()]:
        return f"--arms {args.arms!r} names no arm (built in: {', '.join(arms_mod.REGISTRY)})"
    if args.resume:
        return resume_problem(args)
    if args.only_missing:
        return "--only-missing goes with --resume RUN_DIR (it says which points a resume runs again)"
    return None


def resume_problem(args: argparse.Namespace) -> str | None:
    """--resume takes arms, plan, seed and tag from the run's manifest, checked as make_dashboard.py checks it."""
    given = [flag for flag, value in (("--arms", args.arms), ("--arm", args.arm), ("--quick", args.quick),
                                      ("--repeat", args.repeat), ("--budget-min", args.budget_min),
                                      ("--tag", args.tag), ("--concurrency", args.concurrency),
                                      ("--rates", args.rates), ("--patterns", args.patterns),
                                      ("--duration-s", args.duration_s)) if value]
    if given:
        return f"--resume continues the run's own plan: drop {', '.join(given)}"
    if not (args.resume / "manifest.json").is_file():
        return f"--resume {args.resume}: no manifest.json there (pass a results/bench/<run_id> directory)"
    try:
        manifest = store.read_manifest(args.resume / "manifest.json")
    except records.RecordError as exc:
        return f"--resume: {exc}"
    mode = "--startup" if manifest.startup_restarts is not None else \
        "--single-stream" if manifest.single_stream_requests is not None else None
    return f"--resume {args.resume}: a {mode} run has no points to resume — run {mode} again" if mode else None
