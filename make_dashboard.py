#!/usr/bin/env python3
"""Build the interactive benchmark dashboard from a run directory written by run_bench.py.

One self-contained HTML file (works offline: plotly.js inlined once) with the environment, KPI cards, every arm vs
the baseline with bootstrap CIs, capacity / latency / QPS / tail / head-to-head charts, KV-cache and GPU telemetry,
tool-call quality and the exact launch commands. Reads only the stored results, so it can be rebuilt at any time
(e.g. with other SLOs) without re-running anything, on any machine with the toolkit's venv.

    ./make_dashboard.py results/bench/latest
    ./make_dashboard.py results/bench/latest --slo-ttft-ms 300 --slo-itl-ms 15 --slo-pct 95
    ./make_dashboard.py results/bench/20261129-120000 --compare results/bench/20261120-090000
    ./make_dashboard.py results/bench/latest --gpu-hourly-usd 3.50   # + dollars per million output tokens

Writes: RUN_DIR/dashboard.html (or --out FILE / --out DIR/), and summary.csv + summary.json beside it
(X.summary.csv/.json for --out X.html; headline numbers per arm/workload/pattern/load with CIs). The last stdout line is one JSON document naming the files.

A run without load points gets a page of its own, the page only (its numbers are in its records): a --startup run
where each arm's restart spends its time (phases per arm and per restart, failures), a --single-stream run where
one stream's time per output token goes (floor, GPU above it, CPU gap, streaming; what was not measured).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from llmhost import cli, config, deps, files, settings, slo as slo_rule

if TYPE_CHECKING:  # types only: llmhost.cost needs numpy, which deps.ensure provides first
    from llmhost import cost
    from llmhost.report.side_runs import SideKind


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    run_dir: Path
    out: Path
    compare: Path | None
    slo_ttft_ms: float | None
    slo_itl_ms: float | None
    slo_pct: float | None
    seed: int
    is_price_given: bool  # --gpu-hourly-usd given (even empty: no cost card); else GPU_HOURLY_USD of the config
    gpu_hourly_usd: float | None


def parse_args(argv: list[str] | None) -> Options:
    parser = cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory (results/bench/<run_id> or "
                        "results/bench/latest)")
    parser.add_argument("--out", metavar="FILE", help="HTML file to write, or a directory for DIR/dashboard.html "
                        "(default: RUN_DIR/dashboard.html); summary.csv and summary.json go beside it (X.summary.csv "
                        "and .json for another file name X.html)")
    parser.add_argument("--slo-ttft-ms", type=float, metavar="MS", help="SLO: time to first token per request, ms "
                        "(default: the run's manifest, else 1000)")
    parser.add_argument("--slo-itl-ms", type=float, metavar="MS", help="SLO: a request's mean inter-token latency (TPOT), ms "
                        "(default: the run's manifest, else 50)")
    parser.add_argument("--slo-pct", type=float, metavar="PCT", help="SLO: percent of requests that must meet both limits "
                        "(default: the run's manifest, else 99)")
    parser.add_argument("--compare", type=Path, metavar="OTHER_RUN", help="a second run directory: add a "
                        "regression view (matched points, deltas with CIs)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="bootstrap seed (default: 0; same seed, same CIs)")
    parser.add_argument("--gpu-hourly-usd", metavar="USD", help="what an hour of the server's GPU costs, US dollars: "
                        "adds dollars per million output tokens at the highest concurrency within the SLO; empty = "
                        "none (default: GPU_HOURLY_USD of the current config, not the run's, so a price set after "
                        "the run counts)")
    args = parser.parse_args(argv)
    price = None
    if args.gpu_hourly_usd is not None:
        try:
            price = settings.optional_price(args.gpu_hourly_usd)  # GPU_HOURLY_USD's own check
        except ValueError as exc:
            parser.error(f"--gpu-hourly-usd {args.gpu_hourly_usd} {exc}")
    problem = slo_rule.problem(args.slo_ttft_ms, args.slo_itl_ms, args.slo_pct)
    if problem:
        parser.error(problem)
    if args.seed < 0:  # numpy's generator takes no negative seed
        parser.error(f"--seed must be >= 0 (got {args.seed})")
    out = Path(args.out) if args.out else args.run_dir / "dashboard.html"
    if out.is_dir() or (args.out or "").endswith("/"):  # a directory, existing or meant: the page goes in it
        out = out / "dashboard.html"
    if args.out and files.writable_dir_problem(out.parent):  # the default's folder is RUN_DIR, checked on reading
        parser.error(f"--out {args.out}: {files.writable_dir_problem(out.parent)}")
    return Options(args.run_dir, out, args.compare, args.slo_ttft_ms,
                   args.slo_itl_ms, args.slo_pct, args.seed, args.gpu_hourly_usd is not None, price)


def gpu_price(opts: Options) -> cost.GpuPrice | None:
    """The flag's price, else GPU_HOURLY_USD of config.env / config.local.env / the environment, named by source;
    None: no cost card. Raises config.ConfigError (one line) for a bad config."""
    from llmhost import cost
    if opts.is_price_given:
        return None if opts.gpu_hourly_usd is None else cost.GpuPrice(opts.gpu_hourly_usd, "--gpu-hourly-usd")
    cfg = config.load()
    if cfg.gpu_hourly_usd is None:
        return None
    return cost.GpuPrice(cfg.gpu_hourly_usd, f"GPU_HOURLY_USD, {cfg.source('GPU_HOURLY_USD')}")


def draw_side_run(opts: Options, name: str, kind: SideKind) -> int:
    """The page of a --startup or --single-stream run (`name`: RUN_DIR, or --compare when only that one is);
    refused with --compare (a regression view needs load points on both sides)."""
    from llmhost.report import load, side_runs
    if opts.compare:
        path = opts.run_dir if name == "RUN_DIR" else opts.compare
        print(f"[dashboard] error: {name} {path} is a {kind.name} run (./run_bench.py {kind.flag}): --compare needs "
              f"two runs with load points — draw its page alone: ./make_dashboard.py {path}", file=sys.stderr)
        return 1
    try:
        run = side_runs.load(opts.run_dir, kind)
    except load.LoadError as exc:
        print(f"[dashboard] error: RUN_DIR {exc}", file=sys.stderr)
        return 1
    for warning in run.warnings:  # skipped lines: the page lists them too
        print(f"[dashboard] warning: {warning}", file=sys.stderr)
    try:
        files.write_text_atomic(opts.out, kind.page(run))
    except OSError as exc:  # llmhost.files.WriteError: one line naming the path and the free space
        print(f"[dashboard] error: {exc} — pass --out to a writable path", file=sys.stderr)
        return 1
    print(f"[dashboard] {opts.out} ({kind.name} run, {len(run.records)} {kind.noun}, {len(run.warnings)} warnings)")
    print(json.dumps({"html": str(opts.out), "kind": kind.name, kind.noun: len(run.records)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    deps.ensure(__file__, ("numpy", "pandas", "plotly"), "dashboard")  # the host python3 lacks them
    from llmhost import stats
    from llmhost.report import dashboard, load, side_runs

    # --- a run without load points (--startup, --single-stream) has a page of its own ---
    try:
        kinds = [(name, side_runs.kind_of(path)) for name, path in (("RUN_DIR", opts.run_dir),
                                                                    ("--compare", opts.compare)) if path]
    except load.LoadError as exc:
        print(f"[dashboard] error: {exc}", file=sys.stderr)
        return 1
    side = next(((name, kind) for name, kind in kinds if kind), None)
    if side:
        return draw_side_run(opts, *side)

    # --- the GPU's price: --gpu-hourly-usd, else the current config's (a price set after the run counts) ---
    try:
        price = gpu_price(opts)
    except config.ConfigError as exc:
        print(f"[dashboard] error: {exc} — fix it, or pass --gpu-hourly-usd ('' for no cost card)", file=sys.stderr)
        return 1

    # --- read the stored results (never a live server) ---
    try:
        run = load.load_run(opts.run_dir)
        other = load.load_run(opts.compare) if opts.compare else None
    except load.LoadError as exc:
        print(f"[dashboard] error: {exc}", file=sys.stderr)
        return 1
    for name, loaded in (("RUN_DIR", run), ("--compare", other)):
        if loaded is not None and not loaded.points:  # a page of empty charts is not a dashboard
            why = "; ".join(loaded.warnings) or "points.jsonl is missing or empty"
            print(f"[dashboard] error: {name} {loaded.path} has no readable points ({why}) — finish it with "
                  f"./run_bench.py --resume {loaded.path}", file=sys.stderr)
            return 1

    for warning in (*run.warnings, *(other.warnings if other else ())):  # skipped lines: the page lists them too
        print(f"[dashboard] warning: {warning}", file=sys.stderr)

    # --- SLO: options win over the run's recorded defaults ---
    recorded = dataclasses.asdict(run.slo) if run.slo else slo_rule.DEFAULTS
    slo = stats.Slo(ttft_ms=opts.slo_ttft_ms or recorded["ttft_ms"], itl_ms=opts.slo_itl_ms or recorded["itl_ms"],
                    pct=opts.slo_pct or recorded["pct"])

    # --- build and write the page + summary files ---
    dash = dashboard.build(run, slo, other=other, seed=opts.seed, price=price)
    try:
        paths = dashboard.write(dash, opts.out)
    except OSError as exc:  # llmhost.files.WriteError: one line naming the path and the free space
        print(f"[dashboard] error: {exc} — pass --out to a writable path", file=sys.stderr)
        return 1
    print(f"[dashboard] {paths[0]} ({len(dash.summary)} points, {len(run.warnings)} warnings)")
    print(json.dumps({"html": str(paths[0]), "summary_csv": str(paths[1]), "summary_json": str(paths[2]),
                      "points": len(dash.summary), "compared_with": other.run_id if other else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
