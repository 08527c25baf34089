#!/usr/bin/env python3
"""FlashInfer opened up: decode over paged KV, split-KV balance, JIT cost, and one HTML report.

Runs on the GPU host with the server's Python (torch + flashinfer); `report` needs plotly (the toolkit venv):

    python3 fi_bench.py sparse            # page size x placement x batch x KV dtype x decode path (< 3 min, H200)
    python3 fi_bench.py sparse --quick    # page sizes 1,16, one batch shape, fewer repeats (~30 s)
    python3 fi_bench.py balance           # split-KV on/off x length distribution x batch size, plan() cost (~1 min)
    python3 fi_bench.py jit               # JIT compile / cached-load cost per attention variant
    .venv/bin/python fi_bench.py report   # fi_report.html + fi_summary.json from whatever results exist

Writes sparse.json / balance.json / jit.json into --out-dir (default $RESULTS_DIR/fi); `report` reads them (and
trace.json from fi_trace.py) and writes fi_report.html and fi_summary.json beside them. The last stdout line of every
subcommand is one JSON document.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

from llmhost import config
from llmhost.fi import kv_layout, lengths, shapes
from llmhost.fi.balance import BalanceOptions
from llmhost.fi.sparse import KV_DTYPES, PATHS, SparseOptions, parse_batches

QUICK = {"page_sizes": "1,16", "batches": "64x4096", "repeat": 10}


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes end in one stderr line (what was wrong, where to look) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class EnvProblem(RuntimeError):
    """The host cannot run this subcommand; the message is one line with the next command to try."""


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers")
    return values


def choice_list(allowed: dict) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{','.join(bad) or text!r} not in {','.join(allowed)}")
        return values
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fi_bench.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{sparse,balance,jit,report}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out-dir", type=Path, help="results directory (default: $RESULTS_DIR/fi)")
    common.add_argument("--model-dir", type=Path, help="model directory with config.json, for the attention shape "
                        "(default: MODEL_DIR from config.env)")
    common.add_argument("--seed", type=int, default=0, help="seed for page placement, lengths and data (default 0)")

    sp = sub.add_parser("sparse", parents=[common], help="paged-KV decode: page size, placement, dtype, path",
                        description="Decode attention over paged KV: page size x placement x batch shape (equal "
                        "total tokens) x KV dtype x decode path. Checks outputs, then times with a cold L2.")
    sp.add_argument("--page-sizes", type=int_list, default=(1, 4, 16, 64), help="tokens per page (default 1,4,16,64)")
    sp.add_argument("--batches", default="64x4096,16x16384,256x1024",
                    help="REQUESTSxTOKENS shapes (default 64x4096,16x16384,256x1024: 256K tokens each)")
    sp.add_argument("--dtypes", type=choice_list(KV_DTYPES), default=tuple(KV_DTYPES),
                    help="KV cache dtypes (default bf16,fp8; fp8 = e5m2)")
    sp.add_argument("--paths", type=choice_list(PATHS), default=tuple(PATHS),
                    help="decode kernels: cuda-core, tensor-core (default both)")
    sp.add_argument("--placements", type=choice_list(kv_layout.PLACEMENTS), default=tuple(kv_layout.PLACEMENTS),
                    help="page placements (default contiguous,random,churned)")
    sp.add_argument("--repeat", type=int, default=30, help="timed iterations per case (default 30)")
    sp.add_argument("--quick", action="store_true", help="page sizes 1,16, batch 64x4096, repeat 10")
    sp.set_defaults(func=cmd_sparse, own_parser=sp)

    bp = sub.add_parser("balance", parents=[common], help="split-KV on/off by length distribution, plan() cost",
                        description="Split-KV on vs off across length distributions at equal total tokens, and "
                        "plan() CPU cost next to the kernel time it schedules.")
    bp.add_argument("--batches", type=int_list, default=(4, 16, 64, 128), help="batch sizes (default 4,16,64,128)")
    bp.add_argument("--distributions", type=choice_list(lengths.DISTRIBUTIONS), default=tuple(lengths.DISTRIBUTIONS),
                    help=f"length distributions (default {','.join(lengths.DISTRIBUTIONS)})")
    bp.add_argument("--total-tokens", type=int, default=65536, help="KV tokens per batch (default 65536)")
    bp.add_argument("--page-size", type=int, default=1, help="tokens per page (default 1, as SGLang plans decode)")
    bp.add_argument("--repeat", type=int, default=30, help="timed kernel iterations per case (default 30)")
    bp.add_argument("--plan-repeat", type=int, default=50, help="timed plan() calls per case (default 50)")
    bp.set_defaults(func=cmd_balance, own_parser=bp)

    if importlib.util.find_spec("llmhost.fi.jit") is not None:
        from llmhost.fi import jit

        jit.register(sub)

    rp = sub.add_parser("report", help="fi_report.html + fi_summary.json from the results in --out-dir",
                        description="Build the offline FlashInfer report from sparse/balance/jit/trace JSON "
                        "(any may be missing). Needs plotly (the toolkit venv).")
    rp.add_argument("--out-dir", type=Path, help="results directory (default: $RESULTS_DIR/fi)")
    rp.set_defaults(func=cmd_report)
    return parser


def validate_sparse(parser: argparse.ArgumentParser, args: argparse.Namespace) -> SparseOptions:
    page_sizes, batches, repeat = args.page_sizes, args.batches, args.repeat
    if args.quick:
        page_sizes, batches, repeat = int_list(QUICK["page_sizes"]), QUICK["batches"], QUICK["repeat"]
    try:
        shapes_ = parse_batches(batches)
    except ValueError as exc:
        parser.error(f"--batches: {exc}")
    if repeat < 3:
        parser.error("--repeat must be >= 3 (p10/p90 need samples)")
    return SparseOptions(page_sizes=page_sizes, batches=shapes_, dtypes=args.dtypes, paths=args.paths,
                         placements=args.placements, repeat=repeat, seed=args.seed)


def validate_balance(parser: argparse.ArgumentParser, args: argparse.Namespace) -> BalanceOptions:
    if args.total_tokens < max(args.batches):
        parser.error(f"--total-tokens {args.total_tokens} is less than one token per request")
    if args.page_size < 1 or args.repeat < 3 or args.plan_repeat < 5:
        parser.error("--page-size must be >= 1, --repeat >= 3, --plan-repeat >= 5")
    return BalanceOptions(batches=args.batches, distributions=args.distributions, total_tokens=args.total_tokens,
                          page_size=args.page_size, repeat=args.repeat, plan_repeat=args.plan_repeat, seed=args.seed)


def out_dir(args: argparse.Namespace) -> Path:
    return args.out_dir if args.out_dir else config.load().results_path / "fi"


def gpu_setup(args: argparse.Namespace) -> tuple[shapes.AttentionShape, dict]:
    """Model shape, then torch/flashinfer/CUDA presence, then the bandwidth ceilings (peak + measured copy)."""
    try:
        shape = shapes.from_model_dir(args.model_dir or config.load().model_dir)
    except shapes.ShapeError as exc:
        raise EnvProblem(str(exc)) from None
    for module in ("torch", "flashinfer"):
        if importlib.util.find_spec(module) is None:
            raise EnvProblem(f"{module} is not importable by {sys.executable}: run this with the server's Python "
                             "(SGLANG_PYTHON), e.g. ~/llmhost/venv/bin/python fi_bench.py ...")
    import torch

    if not torch.cuda.is_available():
        raise EnvProblem("no CUDA GPU visible to torch: run this on the GPU host (check nvidia-smi)")
    from llmhost.fi import gpu_specs

    name = torch.cuda.get_device_name(0)
    spec = gpu_specs.lookup(name)
    copy = gpu_specs.measure_copy_gb_s()
    ceilings = {"gpu": name, "peak_gb_s": spec.peak_gb_s if spec else None, "peak_source": spec.name if spec else
                "unknown GPU: no datasheet peak, % of copy only", "copy_gb_s": copy["copy_gb_s"], "copy": copy}
    print(f"[fi] {name}: peak {ceilings['peak_gb_s'] or '?'} GB/s, measured copy {copy['copy_gb_s']:.0f} GB/s; "
          f"{shape.model}: {shape.num_qo_heads} q / {shape.num_kv_heads} kv heads, head_dim {shape.head_dim}, "
          f"{shape.num_layers} layers", flush=True)
    return shape, ceilings


def progress(line: str) -> None:
    print(line, flush=True)


def cmd_sparse(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from llmhost.fi import env, sparse

    opts = validate_sparse(parser, args)
    target = out_dir(args) / "sparse.json"
    shape, ceilings = gpu_setup(args)
    data = sparse.run(opts, shape, ceilings, progress)
    doc = env.document({"stage": "sparse", "options": dataclasses.asdict(opts), "shape": dataclasses.asdict(shape),
                        "ceilings": ceilings, **data})
    env.write_json_atomic(target, doc)
    failed = [c for c in data["checks"] if not c["ok"]]
    print(json.dumps({"sparse_json": str(target), "cases": len(data["cases"]), "checks_failed": len(failed),
                      "errors": data["errors"], **sparse.headline(doc)}))
    return 1 if failed or data["errors"] else 0


def cmd_balance(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from llmhost.fi import balance, env

    opts = validate_balance(parser, args)
    target = out_dir(args) / "balance.json"
    shape, ceilings = gpu_setup(args)
    data = balance.run(opts, shape, progress)
    doc = env.document({"stage": "balance", "options": dataclasses.asdict(opts), "shape": dataclasses.asdict(shape),
                        "ceilings": ceilings, **data})
    env.write_json_atomic(target, doc)
    failed = [c for c in data["checks"] if not c["ok"]]
    print(json.dumps({"balance_json": str(target), "cases": len(data["cases"]), "checks_failed": len(failed),
                      **balance.headline(doc)}))
    return 1 if failed else 0


def cmd_report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from llmhost.fi import report

    try:
        written = report.build(out_dir(args))
    except report.ReportError as exc:
        raise EnvProblem(str(exc)) from None
    print(json.dumps({k: str(v) for k, v in written.items()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.func.__module__ == __name__:
            return args.func(getattr(args, "own_parser", parser), args)
        return args.func(args)  # subcommands registered by other modules (jit) take args only
    except (EnvProblem, config.ConfigError) as exc:
        print(f"fi_bench.py {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
