#!/usr/bin/env python3
"""Watch FlashInfer's paged-KV page tables inside the live SGLang server: batch sizes, prefix-cache page sharing,
physical-page fragmentation, over time, for CUDA-graph and eager steps alike.

    ./fi_trace.py capture                      # restart the server with the tracer, drive shared-prefix chat
                                               # traffic (openai SDK), stop tracing, analyze, restore the server
    ./fi_trace.py capture --duration-s 60 --concurrency 32 --prefixes 4
    ./fi_trace.py analyze --trace-dir ~/llmhost/fi-trace/20260101T120000Z --out-dir results/fi

capture: `./serve.sh restart` with SERVER_ENV += PYTHONPATH=llmhost/fi/hook:... LLMHOST_FI_TRACE_DIR=<trace dir>
(the hook is inert without that variable), waits until every scheduler process reports the patch, sends traffic,
creates <trace dir>/STOP, then restarts the server without the hook (or stops it, if it was not running before).
Writes <trace dir>/{shard-*.npz, stats-*.json, traffic.json, env.json} and <out-dir>/trace.json
(default out-dir: $RESULTS_DIR/fi). The last stdout line is one JSON document.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmhost import config

REPO = Path(__file__).resolve().parent
HOOK_DIR = REPO / "llmhost" / "fi" / "hook"
WORDS = ("cache kernel page prefix decode tensor memory request batch token latency throughput scheduler graph "
         "attention head layer model server queue radix tree block chunk prefill stream warp shared").split()


@dataclasses.dataclass(frozen=True, slots=True)
class CaptureOptions:
    trace_dir: Path
    out_dir: Path
    duration_s: float
    concurrency: int
    prefixes: int
    prefix_words: int
    max_tokens: int
    every: int
    hook_timeout_s: float


class CaptureError(RuntimeError):
    """A step of the capture failed; one line naming the next command."""


# ----------------------------------------------------------------------------------------------- server control
def hook_server_env(server_env: str, pythonpath: str, trace_dir: Path, every: int) -> str:
    """SERVER_ENV with the hook first on PYTHONPATH (kept, not replaced: the server may need it to find sglang)."""
    pairs = [item.partition("=") for item in shlex.split(server_env)]
    own = {k: v for k, _, v in pairs}
    path = [str(HOOK_DIR), own.get("PYTHONPATH", pythonpath)]
    kept = [f"{k}={v}" for k, _, v in pairs if k != "PYTHONPATH" and not k.startswith("LLMHOST_FI_TRACE")]
    extra = [f"PYTHONPATH={os.pathsep.join(p for p in path if p)}", f"LLMHOST_FI_TRACE_DIR={trace_dir}",
             f"LLMHOST_FI_TRACE_EVERY={every}"]
    return shlex.join(kept + extra)


SERVE_LOCK_BUSY = 75  # serve.sh: another start/stop/restart holds the lock
LOCK_WAIT_S = 900.0  # a start waits up to READY_TIMEOUT_S (900 s by default) for readiness
_OUTPUT_OK = True  # False once stdout broke (the terminal's tee died with Ctrl-C): say nothing, still restore


def say(text: str, err: bool = False) -> None:
    """Print, and never fail: a broken pipe must not skip the server restore that follows."""
    global _OUTPUT_OK
    try:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)
    except OSError:
        _OUTPUT_OK = False


def serve(action: str, server_env: str | None = None) -> int:
    """Run ./serve.sh ACTION (output shown), optionally with another SERVER_ENV."""
    env = dict(os.environ)
    if server_env is not None:
        env["SERVER_ENV"] = server_env
    say(f"[trace] ./serve.sh {action}")
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        sink = None if _OUTPUT_OK else subprocess.DEVNULL  # serve.sh would die of SIGPIPE at its first line
        code = subprocess.run([str(REPO / "serve.sh"), action], env=env, check=False, stdout=sink,
                              stderr=sink).returncode
        if code != SERVE_LOCK_BUSY or time.monotonic() > deadline:
            return code
        time.sleep(2)  # another serve.sh call (a restart we were interrupted in) still holds the lock


def server_running() -> bool:
    """A server serve.sh started is alive, ready or still starting (status would call a starting one down)."""
    return subprocess.run([str(REPO / "serve.sh"), "running"], capture_output=True, check=False).returncode == 0


def wait_hook_loaded(trace_dir: Path, timeout_s: float) -> list[dict[str, Any]]:
    """Stats files of processes that patched SGLang's updaters (written right after the patch)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = [json.loads(p.read_text()) for p in trace_dir.glob("stats-*.json")]
        patched = [s for s in stats if s.get("patched")]
        if patched or time.monotonic() > deadline:
            return patched
        time.sleep(1)


def stop_tracing(trace_dir: Path, timeout_s: float = 15.0) -> bool:
    """Create STOP and wait until every tracing process has flushed and reported stopped."""
    (trace_dir / "STOP").touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = [json.loads(p.read_text()) for p in trace_dir.glob("stats-*.json")]
        if stats and all(s.get("stopped") for s in stats):
            return True
        time.sleep(0.5)
    return False


# ----------------------------------------------------------------------------------------------- traffic
def prefix_text(group: int, words: int) -> str:
    """A deterministic system prompt; requests of the same group share it, so their KV prefix is cached."""
    body = " ".join(WORDS[(group * 7919 + i * 31 + i // 7) % len(WORDS)] for i in range(words))
    return f"Reference document {group}. {body}"


def one_request(client: Any, cfg: config.Config, opts: CaptureOptions, number: int) -> dict[str, Any]:
    """One chat request through the openai SDK; failure is recorded as data."""
    group = number % opts.prefixes
    start = time.monotonic()
    try:
        reply = client.chat.completions.create(
            model=cfg.served_model_name, max_tokens=opts.max_tokens, temperature=0.0,
            messages=[{"role": "system", "content": prefix_text(group, opts.prefix_words)},
                      {"role": "user", "content": f"Question {number}: summarise part {number % 97}."}],
            # fixed-length answers (random weights stop anywhere); no <think> block to parse
            extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
    except Exception as exc:  # the SDK raises many types; all are a failed request here
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200], "latency_s": time.monotonic() - start}
    usage = reply.usage
    details = getattr(usage, "prompt_tokens_details", None)
    return {"ok": True, "latency_s": time.monotonic() - start, "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": getattr(details, "cached_tokens", None) or 0}


def drive_traffic(cfg: config.Config, opts: CaptureOptions) -> dict[str, Any]:
    """`concurrency` closed-loop clients for duration_s; progress every ~5 s; a summary of what was sent."""
    import openai

    client = openai.OpenAI(base_url=f"{cfg.base_url}/v1", api_key=cfg.api_key() or "none", timeout=120,
                           max_retries=0)
    deadline = time.monotonic() + opts.duration_s
    results: list[dict[str, Any]] = []
    counter = iter(range(10**9))

    def loop() -> None:
        while time.monotonic() < deadline:
            results.append(one_request(client, cfg, opts, next(counter)))

    with concurrent.futures.ThreadPoolExecutor(opts.concurrency) as pool:
        futures = [pool.submit(loop) for _ in range(opts.concurrency)]
        while not all(f.done() for f in futures):
            time.sleep(5)
            left = max(0.0, deadline - time.monotonic())
            ok = sum(r["ok"] for r in results)
            print(f"[trace] traffic: {ok} ok, {len(results) - ok} failed, ~{left:.0f}s left", flush=True)
    ok = [r for r in results if r["ok"]]
    prompt = sum(r["prompt_tokens"] for r in ok)
    return {"requests": len(results), "ok": len(ok), "failed": len(results) - len(ok),
            "errors": sorted({r["error"] for r in results if not r["ok"]})[:5],
            "prompt_tokens": prompt, "cached_tokens": sum(r["cached_tokens"] for r in ok),
            "cache_hit_ratio": sum(r["cached_tokens"] for r in ok) / prompt if prompt else None,
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(opts).items()}}


# ----------------------------------------------------------------------------------------------- stages
def analyze_dir(trace_dir: Path, out_dir: Path, n_windows: int = 12) -> tuple[Path, dict[str, Any]]:
    """trace.json from a trace directory (the capture host's env.json when present, else this machine's)."""
    from llmhost.fi import env, trace_analysis

    samples, stats = trace_analysis.load_trace(trace_dir)
    result = trace_analysis.analyze(samples, stats, n_windows)
    traffic = trace_dir / "traffic.json"
    doc = env.document({"stage": "trace", "trace_dir": str(trace_dir),
                        "traffic": json.loads(traffic.read_text()) if traffic.exists() else None, **result})
    captured_env = trace_dir / "env.json"
    if captured_env.exists():
        doc["env"] = json.loads(captured_env.read_text())
    target = out_dir / "trace.json"
    env.write_json_atomic(target, doc)
    return target, doc


def capture(cfg: config.Config, opts: CaptureOptions) -> dict[str, Any]:
    """Restart with the hook, check it loaded, drive traffic, stop tracing; always restore the server after."""
    opts.trace_dir.mkdir(parents=True, exist_ok=False)
    # in a child process: a CUDA context held by this client would shrink the KV pool of the server it starts
    described = subprocess.run([sys.executable, "-m", "llmhost.fi.env"], capture_output=True, text=True, cwd=REPO,
                               check=False)
    if described.returncode == 0:
        (opts.trace_dir / "env.json").write_text(described.stdout)
    was_running = server_running()
    hooked = hook_server_env(cfg.server_env, os.environ.get("PYTHONPATH", ""), opts.trace_dir, opts.every)
    try:
        if serve("restart", hooked) != 0:
            raise CaptureError("the server did not start with the tracer — see ./serve.sh logs")
        patched = wait_hook_loaded(opts.trace_dir, opts.hook_timeout_s)
        if not patched:
            raise CaptureError(f"the tracer did not load in the server (no stats file in {opts.trace_dir}) — "
                               "look for [fi-trace] in ./serve.sh logs")
        print(f"[trace] tracer active in {len(patched)} process(es); driving traffic for {opts.duration_s:.0f}s",
              flush=True)
        traffic = drive_traffic(cfg, opts)
        (opts.trace_dir / "traffic.json").write_text(json.dumps(traffic, indent=1))
        if not stop_tracing(opts.trace_dir):
            print("[trace] warning: not every process confirmed the stop; analyzing what was flushed",
                  file=sys.stderr)
    finally:
        action = "restart" if was_running else "stop"
        say(f"[trace] restoring the server without the tracer ({action})")
        restored = serve(action) == 0
        if not restored:
            say(f"[trace] warning: ./serve.sh {action} failed — run it by hand", err=True)
    if not restored:  # the traced server may still run, sampling into the trace directory
        raise CaptureError(f"./serve.sh {action} failed after the capture — the server may still run with the "
                           "tracer: ./serve.sh restart")
    if not traffic["ok"]:
        raise CaptureError(f"no request succeeded ({'; '.join(traffic['errors']) or 'no reply'}) — "
                           "check ./serve.sh status")
    return traffic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="trace the live server under shared-prefix traffic, then analyze",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cap.add_argument("--trace-dir", type=Path, help="raw trace directory, must not exist "
                     "(default: $WORK_DIR/fi-trace/<UTC timestamp>)")
    cap.add_argument("--duration-s", type=float, default=30.0, help="seconds of traffic (default 30)")
    cap.add_argument("--concurrency", type=int, default=32, help="concurrent chat clients (default 32)")
    cap.add_argument("--prefixes", type=int, default=4, help="distinct shared system prompts (default 4)")
    cap.add_argument("--prefix-words", type=int, default=1500, help="words per system prompt (default 1500, "
                     "~2,000 tokens)")
    cap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per request (default 128)")
    cap.add_argument("--every", type=int, default=8, help="sample every Nth step per mode (default 8: ~12 decode "
                     "samples/s at ~100 steps/s)")
    cap.add_argument("--hook-timeout-s", type=float, default=60.0, help="seconds to wait, after the server is "
                     "ready, for the tracer to report that it patched SGLang (default 60)")
    ana = sub.add_parser("analyze", help="trace.json from a trace directory",
                         description="Turn a trace directory (shard-*.npz, stats-*.json) into trace.json.")
    ana.add_argument("--trace-dir", type=Path, required=True, help="directory written by the tracer")
    ana.add_argument("--windows", type=int, default=12, help="time windows for the evolution (default 12)")
    for p in (cap, ana):
        p.add_argument("--out-dir", type=Path, help="where trace.json goes (default: $RESULTS_DIR/fi)")
    args = parser.parse_args(argv)
    try:
        cfg = config.load()
    except config.ConfigError as exc:
        print(f"fi_trace.py: {exc}", file=sys.stderr)
        return 1
    out_dir = args.out_dir or cfg.results_path / "fi"
    if args.command == "capture":
        if min(args.duration_s, args.concurrency, args.prefixes, args.prefix_words, args.max_tokens,
               args.every) <= 0:
            parser.error("--duration-s, --concurrency, --prefixes, --prefix-words, --max-tokens, --every must be > 0")
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        trace_dir = args.trace_dir or Path(cfg.work_dir) / "fi-trace" / stamp
        if trace_dir.exists():
            parser.error(f"--trace-dir {trace_dir} exists (a capture needs a fresh directory)")
        opts = CaptureOptions(trace_dir=trace_dir, out_dir=out_dir, duration_s=args.duration_s,
                              concurrency=args.concurrency, prefixes=args.prefixes, prefix_words=args.prefix_words,
                              max_tokens=args.max_tokens, every=args.every, hook_timeout_s=args.hook_timeout_s)
        for sig in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: unwind, so the server is restored
            signal.signal(sig, _interrupt)
        try:
            capture(cfg, opts)
        except CaptureError as exc:
            say(f"fi_trace.py capture: {exc}", err=True)
            return 1
        except KeyboardInterrupt:
            say("fi_trace.py capture: interrupted (the restore line above says how the server was left)", err=True)
            return 130
        args.trace_dir = trace_dir
    from llmhost.fi.trace_analysis import TraceFormatError

    try:
        target, doc = analyze_dir(args.trace_dir, out_dir, getattr(args, "windows", 12))
    except TraceFormatError as exc:
        print(f"fi_trace.py: {exc}", file=sys.stderr)
        return 1
    proof, decode = doc["graph_proof"], doc["summary"]["decode"]
    print(f"[trace] {doc['samples']} sampled batches; decode steps seen: {proof['decode_steps_graph']} CUDA-graph, "
          f"{proof['decode_steps_eager']} eager; decode sharing {decode.get('sharing_ratio', 0):.2f}, "
          f"mean run {decode.get('mean_run_len', 0):.1f} pages", flush=True)
    print(json.dumps({"trace_json": str(target), "samples": doc["samples"], **proof}))
    return 0


def _interrupt(signum: int, frame: object) -> None:
    # a hangup comes twice (shell, then kernel): the second must not cut the server restore short
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    raise SystemExit(main())
