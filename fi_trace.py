#!/usr/bin/env python3
"""Watch FlashInfer's paged-KV page tables inside the live SGLang server: batch sizes, prefix-cache page sharing,
physical-page fragmentation, over time, for CUDA-graph and eager steps alike — and what watching costs.

    ./fi_trace.py capture                      # restart the server with the tracer, drive shared-prefix chat
                                               # traffic (openai SDK, streamed), analyze, restore the server
    ./fi_trace.py capture --duration-s 60 --concurrency 32 --prefixes 4
    ./fi_trace.py analyze --trace-dir ~/llmhost/fi-trace/20260101T120000Z --out-dir results/fi

capture: restarts the server (llmhost.serve.lifecycle, what ./serve.sh restart runs) with SERVER_ENV +=
PYTHONPATH=llmhost/fi/trace/sitehook:... LLMHOST_FI_TRACE_DIR=<dir> (the hook is inert without that variable),
waits until every scheduler process reports the patch, warms the prefix cache, then sends --duration-s of traffic
in four phases with the tracer off, on, on, off (same server boot) to measure its cost, creates <trace dir>/STOP,
then restarts the server without the hook (or stops it, if it was not running before). Writes <trace dir>/
{shard-*.npz, stats-*.json, traffic.json, env.json} and <out-dir>/trace.json
(default out-dir: $RESULTS_DIR/fi). The last stdout line is one JSON document. Exit: 0 ok, 1 failed, 2 usage,
130 interrupted (the server is restored first).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import signal
import sys
from pathlib import Path

from llmhost import config
from llmhost.fi.cli import OneLineParser
from llmhost.fi.trace import capture
from llmhost.fi.trace.analysis import TraceFormatError
from llmhost.fi.trace.traffic import CaptureOptions


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fi_trace.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    cap = sub.add_parser("capture", help="trace the live server under shared-prefix traffic, then analyze",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cap.add_argument("--trace-dir", type=Path, help="raw trace directory, must not exist "
                     "(default: $WORK_DIR/fi-trace/<UTC timestamp>)")
    cap.add_argument("--duration-s", type=float, default=40.0, help="seconds of measured traffic, split over 4 "
                     "phases (tracer off, on, on, off) after a 5 s warm-up (default 40)")
    cap.add_argument("--concurrency", type=int, default=32, help="concurrent chat clients (default 32)")
    cap.add_argument("--prefixes", type=int, default=4, help="distinct shared system prompts (default 4)")
    cap.add_argument("--prefix-words", type=int, default=1500, help="words per system prompt (default 1500, "
                     "~2,000 tokens)")
    cap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per request (default 128)")
    cap.add_argument("--every", type=int, default=8, help="sample every Nth step per mode (default 8: ~12 decode "
                     "samples/s at ~100 steps/s)")
    cap.add_argument("--hook-timeout-s", type=float, default=60.0, help="seconds to wait, after the server is "
                     "ready, for the tracer to report that it patched SGLang (default 60)")
    cap.set_defaults(run=cmd_capture)
    ana = sub.add_parser("analyze", help="trace.json from a trace directory",
                         description="Turn a trace directory (shard-*.npz, stats-*.json) into trace.json.")
    ana.add_argument("--trace-dir", type=Path, required=True, help="directory written by the tracer")
    ana.add_argument("--windows", type=int, default=12, help="time windows for the evolution (default 12)")
    ana.set_defaults(run=cmd_analyze)
    for p in (cap, ana):
        p.add_argument("--out-dir", type=Path, help="where trace.json goes (default: $RESULTS_DIR/fi)")
        p.set_defaults(subparser=p)
    return parser


def capture_options(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> CaptureOptions:
    if min(args.duration_s, args.concurrency, args.prefixes, args.prefix_words, args.max_tokens, args.every) <= 0:
        parser.error("--duration-s, --concurrency, --prefixes, --prefix-words, --max-tokens, --every must be > 0")
    for flag, seconds in (("--duration-s", args.duration_s), ("--hook-timeout-s", args.hook_timeout_s)):
        if not (math.isfinite(seconds) and seconds > 0):  # nan passes `<= 0`; either would restart the server for good
            parser.error(f"{flag} must be a finite number of seconds > 0 (got {seconds:g})")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    trace_dir = args.trace_dir or Path(cfg.work_dir) / "fi-trace" / stamp
    if trace_dir.exists():
        parser.error(f"--trace-dir {trace_dir} exists (a capture needs a fresh directory)")
    return CaptureOptions(trace_dir=trace_dir, out_dir=args.out_dir or cfg.results_path / "fi",
                          duration_s=args.duration_s, concurrency=args.concurrency, prefixes=args.prefixes,
                          prefix_words=args.prefix_words, max_tokens=args.max_tokens, every=args.every,
                          hook_timeout_s=args.hook_timeout_s)


def cmd_capture(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    opts = capture_options(parser, args, cfg)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: unwind, so the server is restored
        signal.signal(sig, _interrupt)
    try:
        capture.capture(cfg, opts)
    except capture.CaptureError as exc:
        capture.say(f"fi_trace.py capture: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        capture.say("fi_trace.py capture: interrupted (the restore line above says how the server was left)",
                    err=True)
        return 130
    return analyze(opts.trace_dir, opts.out_dir, 12)


def cmd_analyze(parser: argparse.ArgumentParser, args: argparse.Namespace, cfg: config.Config) -> int:
    if args.windows < 1:
        parser.error("--windows must be >= 1")
    return analyze(args.trace_dir, args.out_dir or cfg.results_path / "fi", args.windows)


def analyze(trace_dir: Path, out_dir: Path, windows: int) -> int:
    """trace.json from the trace directory; prints the headline and one JSON line last."""
    try:
        target, doc = capture.analyze_dir(trace_dir, out_dir, windows)
    except TraceFormatError as exc:
        print(f"fi_trace.py: {exc}", file=sys.stderr)
        return 1
    proof, decode = doc["graph_proof"], doc["summary"]["decode"]
    cost = ((doc.get("traffic") or {}).get("overhead") or {}).get("output_tok_s") or {}
    print(f"[trace] {doc['samples']} sampled batches; decode steps seen: {proof['decode_steps_graph']} CUDA-graph, "
          f"{proof['decode_steps_eager']} eager; decode sharing {decode.get('sharing_ratio', 0):.2f}, "
          f"mean run {decode.get('mean_run_len', 0):.1f} pages", flush=True)
    if cost:
        print(f"[trace] tracer cost: throughput {cost['change_pct']:+.1f}% with the tracer on "
              f"(phases of one arm differ by {cost['noise_pct']:.1f}%: {cost['verdict']})", flush=True)
    overhead = (doc.get("traffic") or {}).get("overhead")
    print(json.dumps({"trace_json": str(target), "samples": doc["samples"], **proof, "overhead": overhead}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config.load()
    except config.ConfigError as exc:
        print(f"fi_trace.py: {exc}", file=sys.stderr)
        return 1
    return args.run(args.subparser, args, cfg)


def _interrupt(signum: int, frame: object) -> None:
    # a hangup comes twice (shell, then kernel): the second must not cut the server restore short
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    raise SystemExit(main())
