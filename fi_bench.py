#!/usr/bin/env python3
"""FlashInfer opened up: decode over paged KV, split-KV balance, JIT cost, and one HTML report.

Runs on the GPU host with the server's Python (torch + flashinfer); `report` runs anywhere (charts need plotly: the
toolkit venv; without it the page keeps every table):

    python3 fi_bench.py sparse            # page size x placement x batch x KV dtype x decode path (~3 min, H200)
    python3 fi_bench.py sparse --quick    # page sizes 1,16, one batch shape, fewer repeats (~30 s)
    python3 fi_bench.py balance           # split-KV auto/off/forced/graph x lengths x batch, planning cost (~1 min)
    python3 fi_bench.py jit               # JIT compile / cached-load cost per variant (~2 min; after fi_jit_setup.sh)
    .venv/bin/python fi_bench.py report   # fi_report.html + fi_summary.json from whatever results exist

Kernel times come from CUDA-graph replay (CUPTI when cupti-python is installed; --timing), with the plain CUDA-event
timer beside them. Writes sparse.json / balance.json / jit.json into --out-dir (default $RESULTS_DIR/fi); `report`
reads them (and trace.json from fi_trace.py) and writes fi_report.html and fi_summary.json beside them. The last
stdout line of every subcommand is one JSON document. Exit: 0 ok, 1 a check failed or the host cannot run it,
2 usage.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from llmhost import config
from llmhost.fi import balance, jit, jit_variants, kv_layout, lengths, sparse, stage, timing
from llmhost.fi.cli import OneLineParser, choice_list, int_list
from llmhost.fi.sparse_kernels import KV_DTYPES, PATHS

QUICK = {"page_sizes": "1,16", "batches": "64x4096", "repeat": 10}
TIMINGS = ("auto", "graph", "cupti", "event")


def add_sparse(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("sparse", parents=[common], help="paged-KV decode: page size, placement, dtype, path",
                        description="Decode attention over paged KV: page size x placement x batch shape (equal "
                        "total tokens) x KV dtype x decode path. Checks outputs, then times them. Shared placements "
                        "(BF16, tensor cores) are also decoded reading each prompt once (two-level, and FlashInfer's "
                        "cascade wrapper).")
    sp.add_argument("--page-sizes", type=int_list, default=(1, 4, 16, 64), help="tokens per page (default 1,4,16,64)")
    sp.add_argument("--batches", default="64x4096,16x16384,256x1024",
                    help="REQUESTSxTOKENS shapes (default 64x4096,16x16384,256x1024: 256K tokens each)")
    sp.add_argument("--dtypes", type=choice_list(KV_DTYPES), default=tuple(KV_DTYPES),
                    help="KV cache dtypes (default bf16,fp8; fp8 = e5m2)")
    sp.add_argument("--paths", type=choice_list(PATHS), default=tuple(PATHS),
                    help="decode kernels: cuda-core, tensor-core (default both)")
    sp.add_argument("--placements", type=choice_list(kv_layout.PLACEMENTS), default=tuple(kv_layout.PLACEMENTS),
                    help="page placements (default: all, " + ",".join(kv_layout.PLACEMENTS) + ")")
    sp.add_argument("--repeat", type=int, default=30, help="timed iterations per case and timer (default 30)")
    sp.add_argument("--quick", action="store_true", help="page sizes 1,16, batch 64x4096, repeat 10")
    sp.set_defaults(run=cmd_sparse, subparser=sp)


def add_balance(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    bp = sub.add_parser("balance", parents=[common], help="split-KV decisions by length distribution, plan() cost",
                        description="Split-KV as planned, off, forced where the planner declined, and as SGLang's "
                        "CUDA-graph decode plans it, across length distributions at equal total tokens; the CPU "
                        "cost of plan() and fast_decode_plan next to the kernel time.")
    bp.add_argument("--batches", type=int_list, default=(4, 16, 64, 128), help="batch sizes (default 4,16,64,128)")
    bp.add_argument("--distributions", type=choice_list(lengths.DISTRIBUTIONS), default=tuple(lengths.DISTRIBUTIONS),
                    help=f"length distributions (default {','.join(lengths.DISTRIBUTIONS)})")
    bp.add_argument("--total-tokens", type=int, default=65536, help="KV tokens per batch (default 65536)")
    bp.add_argument("--page-size", type=int, default=1, help="tokens per page (default 1, as SGLang plans decode)")
    bp.add_argument("--repeat", type=int, default=30, help="timed kernel iterations per case (default 30)")
    bp.add_argument("--plan-repeat", type=int, default=50, help="timed planning calls per case (default 50)")
    bp.set_defaults(run=cmd_balance, subparser=bp)


def add_jit(sub: argparse._SubParsersAction, paths: argparse.ArgumentParser) -> None:
    jp = sub.add_parser("jit", parents=[paths], help="JIT compile / cached-load / run cost per attention variant",
                        description="JIT cost per attention variant in fresh worker processes over an empty "
                        "private cache (prepare it with ./fi_jit_setup.sh); see llmhost/fi/jit.py.")
    jp.add_argument("--variants", help="comma-separated variant names, or 'all' (default: the default set, "
                    f"{len(jit_variants.DEFAULT_VARIANTS)} variants; ~2 min on an H200 with 16 cores, 4 at a time)")
    jp.add_argument("--list", action="store_true", help="list the variants and exit")
    jp.add_argument("--jobs", type=int, help="variants measured at a time (default: CPU cores / 4, 1..4; "
                    "1 = each compile alone)")
    jp.add_argument("--allow-warm", action="store_true", help="measure even over a non-empty JIT cache or "
                    "prebuilt kernels; results are labelled warm (default: refuse)")
    jp.add_argument("--repeat", type=int, default=30, help="steady-state timed iterations per variant (default 30)")
    jp.add_argument("--timeout-s", type=int, default=300, help="limit per worker process, seconds (default 300)")
    jp.add_argument("--diff", default="decode_base,decode_softcap", help="two variants whose generated sources "
                    "to diff (default: decode_base,decode_softcap)")
    jp.set_defaults(run=cmd_jit, subparser=jp)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fi_bench.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{sparse,balance,jit,report}",
                                parser_class=OneLineParser)
    paths = argparse.ArgumentParser(add_help=False)
    paths.add_argument("--out-dir", type=Path, help="results directory (default: $RESULTS_DIR/fi)")
    paths.add_argument("--model-dir", type=Path, help="model directory with config.json, for the attention shape "
                       "(default: MODEL_DIR from config.env)")
    common = argparse.ArgumentParser(add_help=False, parents=[paths])
    common.add_argument("--seed", type=int, default=0, help="seed for page placement, lengths and data (default 0)")
    common.add_argument("--timing", choices=TIMINGS, default="auto", help="kernel timer: graph = CUDA-graph replay, "
                        "cupti = CUPTI (needs cupti-python), event = CUDA events around each call; auto = cupti "
                        "when installed, else graph (default auto)")
    add_sparse(sub, common)
    add_balance(sub, common)
    add_jit(sub, paths)
    rp = sub.add_parser("report", help="fi_report.html + fi_summary.json from the results in --out-dir",
                        description="Build the offline FlashInfer report from sparse/balance/jit/trace JSON "
                        "(any may be missing). Needs plotly (the toolkit venv).")
    rp.add_argument("--out-dir", type=Path, help="results directory (default: $RESULTS_DIR/fi)")
    rp.set_defaults(run=cmd_report, subparser=rp)
    return parser


# ------------------------------------------------------------------------------ validation: args -> options, one each
def sparse_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> sparse.SparseOptions:
    page_sizes, batches, repeat = args.page_sizes, args.batches, args.repeat
    if args.quick:
        page_sizes, batches, repeat = int_list(QUICK["page_sizes"]), QUICK["batches"], QUICK["repeat"]
    try:
        shapes_ = sparse.parse_batches(batches)
    except ValueError as exc:
        parser.error(f"--batches: {exc}")
    if repeat < 3:
        parser.error("--repeat must be >= 3 (p10/p90 need samples)")
    return sparse.SparseOptions(page_sizes=page_sizes, batches=shapes_, dtypes=args.dtypes, paths=args.paths,
                                placements=args.placements, repeat=repeat, timing=timing_method(args.timing),
                                seed=args.seed)


def balance_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> balance.BalanceOptions:
    if args.total_tokens < max(args.batches):
        parser.error(f"--total-tokens {args.total_tokens} is less than one token per request")
    if args.page_size < 1 or args.repeat < 3 or args.plan_repeat < 5:
        parser.error("--page-size must be >= 1, --repeat >= 3, --plan-repeat >= 5")
    return balance.BalanceOptions(batches=args.batches, distributions=args.distributions,
                                  total_tokens=args.total_tokens, page_size=args.page_size, repeat=args.repeat,
                                  plan_repeat=args.plan_repeat, timing=timing_method(args.timing), seed=args.seed)


def jit_plan(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> jit.JitPlan:
    try:
        variants = tuple(v.name for v in jit_variants.select(args.variants))
    except ValueError as exc:
        parser.error(f"--variants: {exc}")
    diff_pair = tuple(n.strip() for n in args.diff.split(","))
    if len(diff_pair) != 2 or any(n not in jit_variants.VARIANTS for n in diff_pair):
        parser.error(f"--diff needs two variant names, got {args.diff!r}")
    if args.repeat < 0 or args.timeout_s < 1 or (args.jobs is not None and args.jobs < 1):
        parser.error("--repeat must be >= 0, --timeout-s >= 1, --jobs >= 1")
    shape = stage.read_shape(args.model_dir or Path(cfg.model_dir))
    return jit.JitPlan(variants=variants, out_dir=out_dir(args, cfg), cache_base=Path(cfg.flashinfer_workspace_base),
                       allow_warm=args.allow_warm, repeat=args.repeat, timeout_s=args.timeout_s,
                       shape=dataclasses.asdict(shape), diff_pair=diff_pair,  # type: ignore[arg-type]
                       python=sys.executable, jobs=args.jobs or jit.default_jobs(os.cpu_count()))


def timing_method(choice: str) -> timing.Method:
    return timing.precise_method() if choice == "auto" else choice  # type: ignore[return-value]


def out_dir(args: argparse.Namespace, cfg: config.Config) -> Path:
    return args.out_dir if args.out_dir else cfg.results_path / "fi"


def model_dir(args: argparse.Namespace, cfg: config.Config) -> Path:
    return args.model_dir or Path(cfg.model_dir)


# ------------------------------------------------------------------------------ subcommands: (parser, args, cfg) -> int
def cmd_sparse(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    return stage.run_kernels("sparse", sparse_options(parser, args), model_dir(args, cfg), out_dir(args, cfg))


def cmd_balance(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    return stage.run_kernels("balance", balance_options(parser, args), model_dir(args, cfg), out_dir(args, cfg))


def cmd_jit(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    if args.list:
        jit.list_variants()
        return 0
    return stage.run_jit(jit_plan(parser, args, cfg))


def cmd_report(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    return stage.run_report(out_dir(args, cfg))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config.load()
        return args.run(args.subparser, args, cfg)
    except (stage.EnvProblem, config.ConfigError) as exc:
        print(f"fi_bench.py {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
