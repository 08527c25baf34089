"""Benchmark points: the plan (one point = one bench_serving subprocess), its arguments, and its results.

    plan      build_plan(arms, workloads, quick, repeat) -> [Point]; estimate_s(point) for ETAs and --dry-run
    argv      bench_argv(...) = SGLang's own load generator, validated against the installed --help
    run       run_loadgen(...) runs `python -m llmhost.bench.points MODULE STARTS_FILE -- <bench args>`: bench_serving
              itself, with its request functions wrapped to record each request's wall-clock start and latency
              (its --output-details JSONL has neither)
    parse     request_rows(...) -> [RequestRecord]; summarize(...) -> PointSummary (llmhost.bench.records)

Percentile support: a percentile p is estimated from the n*(1-p) samples beyond it; with fewer than 10 it rests on
a handful of requests. So p99 needs >= 1,000 samples and p99.9 >= 10,000 (the long pattern sends 10,000 requests);
unsupported percentiles are listed per point in its summary's low_support (llmhost.stats holds the rule).
"""
from __future__ import annotations

import importlib
import itertools
import json
import math
import os
import re
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from llmhost import files
from llmhost.bench.arms import Arm
from llmhost.bench.records import Pattern, Point, PointSummary, RequestRecord
from llmhost.bench.workloads import REGISTRY as WORKLOADS, Workload, actual_prompts

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}  # checked for support in every point
# Rough H200 costs for ETAs only (Qwen3-4B, measured: single-stream ITL 3.6 ms; batched decode is slower per step).
LOADGEN_OVERHEAD_S = 12.0  # python start, import, tokenizer, ready check, warm-up request
PREFILL_TOK_S = 60_000.0
DECODE_STEP_S = 0.006


def make_point(arm: str, workload: str, pattern: Pattern, concurrency: int | None, rate: float | None,
               num_prompts: int, repeat: int) -> Point:
    # Dots separate id fields, so a rate of 0.5 req/s is written r0p5.
    load = f"c{concurrency}" if rate is None and concurrency else (f"r{rate:g}".replace(".", "p") if rate else "inf")
    n = actual_prompts(WORKLOADS[workload], num_prompts)
    return Point(f"{arm}.{workload}.{pattern}.{load}.r{repeat}", arm, workload, pattern, concurrency, rate, n, repeat)


# (workload, pattern, concurrency, request_rate, num_prompts) per arm; quick keeps the article's headline point.
FULL_SWEEP: tuple[tuple[str, Pattern, int | None, float | None, int], ...] = (
    *(("agent", "concurrency", c, None, max(32, 4 * c)) for c in (1, 8, 32, 64)),
    *(("agent", "qps", None, r, max(64, 15 * int(r))) for r in (2.0, 8.0, 16.0)),
    ("agent", "cold", 16, None, 128),
    ("agent", "warm", 16, None, 128),
    *(("chat", "concurrency", c, None, max(32, 4 * c)) for c in (1, 16, 64)),
    *(("chat", "qps", None, r, max(64, 15 * int(r))) for r in (4.0, 16.0, 32.0)),
    ("chat", "burst", None, None, 1000),
    ("chat", "long", 128, None, 10_000),
    *(("long", "concurrency", c, None, max(16, 4 * c)) for c in (1, 8)),
    ("agent-tools", "concurrency", 16, None, 64),
)
QUICK_ALL: tuple[tuple[str, Pattern, int | None, float | None, int], ...] = (
    ("agent", "concurrency", 16, None, 48),
)
QUICK_BASELINE_EXTRA: tuple[tuple[str, Pattern, int | None, float | None, int], ...] = (
    ("agent", "warm", 16, None, 48),
    ("chat", "qps", None, 8.0, 32),
)


def build_plan(arms: list[Arm], workloads: list[str], quick: bool, repeat: int) -> list[Point]:
    """Every point in run order: arm by arm (one server restart each), then repeat, then the sweep order."""
    plan: list[Point] = []
    for arm in arms:
        rows = (QUICK_ALL + (QUICK_BASELINE_EXTRA if arm.is_baseline else ())) if quick else FULL_SWEEP
        for rep in range(1, repeat + 1):
            plan += [make_point(arm.name, w, p, c, r, n, rep) for w, p, c, r, n in rows if w in workloads]
    return plan


def estimate_s(point: Point) -> float:
    """Seconds one point should take on an H200 (for ETAs; the arithmetic is in the constants above)."""
    w = WORKLOADS[point.workload]
    per_request_s = w.input_len / PREFILL_TOK_S + w.output_len * DECODE_STEP_S
    if point.request_rate:
        load_s = point.num_prompts / point.request_rate + per_request_s
    elif point.concurrency:
        load_s = math.ceil(point.num_prompts / point.concurrency) * per_request_s
    else:  # burst: prefill of everything, then one long decode
        load_s = point.num_prompts * w.input_len / PREFILL_TOK_S + w.output_len * DECODE_STEP_S * 4
    warm_pass_s = load_s if point.pattern == "warm" else 0.0
    return LOADGEN_OVERHEAD_S + load_s + warm_pass_s


def timeout_s(point: Point) -> float:
    """Per-point wall-clock limit: generous (5x the estimate + 2 min) so only a hung run trips it."""
    return 5 * estimate_s(point) + 120


# --- the bench_serving command line ------------------------------------------------------------------------------

def help_flags(help_text: str) -> set[str]:
    """Every --option named in a --help text."""
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text))


def unknown_flags(argv: list[str], help_text: str) -> list[str]:
    """Options in argv that the installed load generator does not have."""
    known = help_flags(help_text)
    return [a for a in argv if a.startswith("--") and a not in known]


def bench_argv(point: Point, workload: Workload, *, base_url: str, model_dir: str, served_model_name: str,
               seed: int, output_file: Path, measured: bool = True) -> list[str]:
    """bench_serving arguments for one point (`measured=False`: the warm pass of a warm point)."""
    argv = workload.dataset_args(point.num_prompts)
    # --tokenizer explicitly: otherwise bench_serving asks the server's /model_info for a path on the server side.
    argv += ["--base-url", base_url, "--model", model_dir, "--tokenizer", model_dir,
             "--served-model-name", served_model_name,
             "--seed", str(seed), "--output-file", str(output_file), "--disable-tqdm",
             "--ready-check-timeout-sec", "30"]
    argv += ["--request-rate", f"{point.request_rate:g}" if point.request_rate else "inf"]
    if point.concurrency:
        argv += ["--max-concurrency", str(point.concurrency)]
    if measured:
        argv += ["--output-details"]
    if point.pattern == "warm" and measured:
        argv += ["--warmup-requests", "0"]  # the warm pass already ran these very prompts
    else:
        # One warm-up request absorbs first-request costs; --flush-cache then drops the prefix it left behind.
        argv += ["--warmup-requests", "1", "--flush-cache"]
    return argv


LOADGEN_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")  # new name first (0.5.17 deprecates the old)


class LoadgenError(Exception):
    """No usable load generator; the message is one line naming the fix."""


def find_loadgen(python: str, env: dict[str, str]) -> tuple[str, str]:
    """(module, --help text) of the installed load generator; the help validates every point's flags."""
    why = ""
    for module in LOADGEN_MODULES:
        try:
            proc = subprocess.run([python, "-m", module, "--help"], capture_output=True, text=True, env=env,
                                  timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LoadgenError(f"cannot run SGLANG_PYTHON={python} ({exc}) — run ./setup_host.sh or set "
                               "SGLANG_PYTHON") from None
        if proc.returncode == 0 and "--dataset-name" in proc.stdout:
            return module, proc.stdout
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
    raise LoadgenError(f"no SGLang load generator in SGLANG_PYTHON={python} (python -m {LOADGEN_MODULES[0]} "
                       f"--help: {why}) — run ./setup_host.sh or point SGLANG_PYTHON at the Python that has sglang")


TIMED_OUT = 124  # run_loadgen's exit code for a load generator killed at its time limit (timeout(1)'s)


def run_loadgen(python: str, module: str, argv: list[str], *, starts_file: Path, log_file: Path,
                env: dict[str, str], limit_s: float) -> tuple[int, str]:
    """Run one bench_serving subprocess (its own process group) -> (exit code, one-line error or '')."""
    repo = str(Path(__file__).resolve().parents[2])
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p),
           PARENT_ENV: str(os.getpid())}
    cmd = [python, "-m", "llmhost.bench.points", module, str(starts_file), "--", *argv]
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=repo,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group we started: bench_serving and nothing else
            proc.wait()
            return TIMED_OUT, f"load generator exceeded {limit_s:.0f}s"
        except BaseException:
            # Ctrl-C reaches only our own session: without this the load generator kept loading the server after
            # run_bench.py exited (and into the first point of a --resume).
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    if code != 0:
        return code, f"load generator exited {code}: {last_line(log_file)}"
    return 0, ""


def last_line(path: Path) -> str:
    """Last non-empty line of a log (the error bench_serving printed), trimmed to 300 characters."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no output"


# --- results -----------------------------------------------------------------------------------------------------

def read_details(output_file: Path) -> dict[str, object]:
    """The last complete JSON line bench_serving appended to --output-file."""
    rows = files.read_jsonl(output_file).rows
    if not rows:
        raise ValueError(f"{output_file} holds no complete result line")
    return rows[-1]


def request_rows(details: dict[str, object], starts: list[list[float]],
                 fallback_start_s: float) -> list[RequestRecord]:
    """Per-request records from --output-details lists + recorded [seq, start_s, latency_s]."""
    ttfts, itls = details["ttfts"], details["itls"]
    errors, ins, outs = details["errors"], details["input_lens"], details["output_lens"]
    n = len(ttfts)  # type: ignore[arg-type]
    timed = sorted(starts)[-n:] if len(starts) >= n else []  # warm-up requests come first; keep the last n
    rows = []
    for i in range(n):
        error = errors[i] or ""  # type: ignore[index]
        ok = not error
        # a stream that broke keeps the gaps it saw: they must not enter ITL percentiles (bench_serving drops them)
        itl_ms = [x * 1000.0 for x in (itls[i] or [])] if ok else []  # type: ignore[index]
        # a reply streaming only tool-call deltas has no text token: bench_serving leaves ttft 0 (unknown, not fast)
        ttft_ms = ttfts[i] * 1000.0 if ok and (ttfts[i] or not outs[i]) else None  # type: ignore[index]
        if timed:
            start_s, e2e_ms = timed[i][1], timed[i][2] * 1000.0
        else:
            start_s, e2e_ms = fallback_start_s, (ttft_ms or 0.0) + sum(itl_ms)
        tokens_in, tokens_out = int(ins[i] or 0), int(outs[i] or 0)  # type: ignore[index]
        rows.append(RequestRecord(start_s=float(start_s), ok=ok, error=str(error), prompt_tokens=tokens_in,
                                  output_tokens=tokens_out, ttft_ms=ttft_ms, itl_ms=tuple(itl_ms), e2e_ms=float(e2e_ms)))
    return rows


def low_support(counts: dict[str, int]) -> list[str]:
    """Percentiles with too few samples beyond them to trust (llmhost.stats' rule), e.g. 'ttft_ms.p99.9'."""
    from llmhost import stats  # numpy: imported once a point is summarised, after run_bench.py checked it is there

    return [f"{metric}.{name}" for metric, n in counts.items() for name, pct in PERCENTILES.items()
            if not stats.is_sufficient(n, pct)]


def summarize(details: dict[str, object], rows: list[RequestRecord], request_rate: float | None) -> PointSummary:
    """bench_serving's totals of the point, plus the achieved rate, sample counts and unsupported percentiles."""
    ok_rows = [r for r in rows if r.ok]
    starts = sorted(r.start_s for r in rows)
    span_s = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    duration_s = float(details.get("duration") or 0.0)  # type: ignore[arg-type]
    achieved = (len(starts) - 1) / span_s if span_s > 0 else (len(rows) / duration_s if duration_s else 0.0)
    client_bound = False
    if request_rate:
        # Poisson inter-arrival means wander by ~1/sqrt(n): only a shortfall beyond 5% and 3 sigma is the client's.
        slack = max(0.05, 3 / math.sqrt(max(1, len(starts) - 1)))
        client_bound = achieved < request_rate * (1 - slack)
    counts = {"ttft_ms": len(ok_rows), "itl_ms": sum(len(r.itl_ms) for r in ok_rows), "e2e_ms": len(ok_rows)}
    return PointSummary(
        duration_s=duration_s, completed=int(details.get("completed") or 0),  # type: ignore[arg-type]
        failed=len(rows) - len(ok_rows),
        **{k: float(details.get(k) or 0.0) for k in  # type: ignore[arg-type]
           ("request_throughput", "input_throughput", "output_throughput", "total_throughput")},
        offered_rate=request_rate, achieved_rate=achieved, client_bound=client_bound,
        samples=counts, low_support=tuple(low_support(counts)))


# --- inside the load generator's own Python: record start times, then run bench_serving unchanged -------------

PARENT_ENV = "LLMHOST_LOADGEN_PARENT"  # run_bench's PID, set by run_loadgen


def die_with_parent() -> None:
    """Have Linux SIGKILL this process when run_bench.py dies, by SIGKILL too (prctl PR_SET_PDEATHSIG): in its
    own session nothing else would stop it loading the server, into the first point of a --resume."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != int(parent):  # the parent died before the request took effect
        os._exit(1)

def completed_file(starts_file: Path) -> Path:
    """Where the wrapper appends each request as it finishes (llmhost.bench.salvage reads it after a kill)."""
    return starts_file.with_suffix(".completed.jsonl")


def completed_row(record: list[float], out: object) -> dict[str, object]:
    """One finished request: its [seq, start_s, latency_s] and bench_serving's RequestFuncOutput fields."""
    return {"seq": record[0], "start_s": record[1], "latency_s": record[2], "ok": bool(getattr(out, "success", 0)),
            "error": str(getattr(out, "error", "") or ""), "ttft_s": float(getattr(out, "ttft", 0.0) or 0.0),
            "itl_s": [float(x) for x in getattr(out, "itl", []) or []],
            "prompt_len": int(getattr(out, "prompt_len", 0) or 0),
            "output_len": int(getattr(out, "output_len", 0) or 0)}


def loadgen_main(argv: list[str]) -> int:
    """`python -m llmhost.bench.points MODULE STARTS_FILE -- ARGS`: run MODULE's CLI recording [seq, start_s, latency_s]."""
    if len(argv) < 3 or argv[2] != "--":
        print("usage: python -m llmhost.bench.points MODULE STARTS_FILE -- BENCH_ARGS", file=sys.stderr)
        return 2
    die_with_parent()
    module_name, starts_file, _, *bench_args = argv
    sys.argv = [module_name, *bench_args]
    mod = importlib.import_module(module_name)
    if not all(hasattr(mod, name) for name in ("cli_main", "RequestFuncInput", "ASYNC_REQUEST_FUNCS")):
        # An SGLang without these hooks: run it unchanged; rows then fall back to the point's start time.
        files.write_json_atomic(Path(starts_file), [])
        runpy.run_module(module_name, run_name="__main__", alter_sys=True)
        return 0
    mod = sys.modules[mod.cli_main.__module__]  # the deprecated path re-exports: patch where the code lives
    offset_s = time.time() - time.perf_counter()  # one clock: bench_serving stamps perf_counter, we store unix s
    seq = itertools.count()
    records: list[list[float]] = []
    done: list[TextIO] = []

    class NumberedInput(mod.RequestFuncInput):  # type: ignore[name-defined,misc]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.llmhost_seq = next(seq)  # creation order = the order of the output lists

    def timed(func):  # noqa: ANN001, ANN202 - wraps bench_serving's async request functions
        async def wrapper(request_func_input, *args, **kwargs):  # noqa: ANN001, ANN202
            out = await func(request_func_input, *args, **kwargs)
            records.append([getattr(request_func_input, "llmhost_seq", -1), out.start_time + offset_s, out.latency])
            for sink in done:  # line by line as requests finish: a point killed at its limit keeps them
                sink.write(json.dumps(completed_row(records[-1], out)) + "\n")
                sink.flush()
            return out
        return wrapper

    mod.RequestFuncInput = NumberedInput
    for name, func in list(mod.ASYNC_REQUEST_FUNCS.items()):
        mod.ASYNC_REQUEST_FUNCS[name] = timed(func)
    try:
        with open(completed_file(Path(starts_file)), "a", encoding="utf-8") as completed:
            done.append(completed)
            mod.cli_main()
    finally:
        files.write_json_atomic(Path(starts_file), records)
    return 0


if __name__ == "__main__":
    raise SystemExit(loadgen_main(sys.argv[1:]))
