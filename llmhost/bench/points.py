"""Benchmark points: the plan (one point = one run of SGLang's load generator), its arguments, and its results.

    plan      build_plan(arms, workloads, quick, repeat, loads) -> [Point]; estimate_s(point) for ETAs and --dry-run;
              Loads (--concurrency, --rates, --duration-s) replace the sweep's loads and sizes
    order     point_seed(base, point): repeat k runs with seed base + k - 1 on every arm (paired comparisons);
              boot_order(points, seed): the points of one server boot in a seeded shuffle
    argv      bench_argv(...) = SGLang's own load generator, validated against the installed --help
    run       llmhost.bench.loadgen_process: one load-generator process per server boot runs every point in-process
    parse     summarize(...) -> PointSummary (llmhost.bench.records) from the module's totals + the request records

Percentile support: a percentile p is estimated from the n*(1-p) samples beyond it; with fewer than 10 it rests on
a handful of requests. So p99 needs >= 1,000 samples and p99.9 >= 10,000 (the long pattern sends 10,000 requests);
unsupported percentiles are listed per point in its summary's low_support (llmhost.stats holds the rule).
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
import subprocess
import typing
from pathlib import Path

from llmhost.bench.arms import Arm
from llmhost.bench.loadgen_process import LoadgenError
from llmhost.bench.records import Pattern, Point, PointSummary, RequestRecord
from llmhost.bench.workloads import AGENT_GROUPS, REGISTRY as WORKLOADS, Workload, actual_prompts

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}  # checked for support in every point
# H200 costs for ETAs and --duration-s sizing until llmhost.bench.costs has this host's own (SGLang 0.5.17, Qwen3-4B
# bf16, FlashInfer, eight tokenizer processes; measured on one H200 host).
# Per point: prefix-cache flush, warm-up request, the module's 1 s pause, re-tokenising the outputs, writing the
# records: chat c=64 took 30.2-30.9 s of wall time for 26.1-27.1 s of load. (An agent point took 10 s more to
# tokenize its generated prompts at 60 prompts/s; the load generator now builds them while the server boots.)
LOADGEN_OVERHEAD_S = 4.5
PREFILL_TOK_S = 60_000.0
# Decode step (TPOT p50) of `batch` sequences of `context` tokens each, least-squares fit (residuals <= 0.11 ms):
#   step = 3.63 ms + 0.0622 ms x batch + 0.00918 ms x batch x context / 1000
# to batch 1 at ~1.15k tokens 3.8 ms (single stream), batch 8 at 1.15k 4.1 ms (chat c=8), batch 64 at 1.15k 8.3 ms
# (chat c=64), batch 64 at 4.6k 10.3 ms (agent c=64): the weights read once a step, per-sequence work, KV reads.
STEP_BASE_S, STEP_PER_SEQ_S, STEP_PER_KV_TOKEN_S = 3.63e-3, 6.22e-5, 9.18e-9
# Closed loop: a request's TTFT is its own prefill plus ~7 ms per other request in flight (it is admitted behind
# their prefill chunks and decode steps): TTFT mean chat c=64 425-488 ms, agent c=64 482-502 ms, chat c=8 96 ms.
ADMIT_S = 0.007
BURST_DECODE_WAVES = 4  # a 2,000-request burst decodes in a few admission waves (unmeasured; 64 is the largest
#                         batch measured)

# A priming pass caches a point's system prompts before it is measured: the sweep's closed and open loops run on
# warm prefixes, so their TTFT-vs-load curve measures the load, not a cold share that changes with it (unprimed, half
# the requests of agent c=1 and c=8 on the H200 were their group's first and prefilled 4.3k tokens); cold behaviour
# is the cold point's own, and the warm point re-asks new questions over primed prompts.
PRIMED_PATTERNS: tuple[str, ...] = ("concurrency", "qps", "warm")


def is_primed(point: Point) -> bool:
    """Whether a priming pass (one 1-token question per system prompt) precedes the measured pass: points of the
    primed patterns whose workload shares prefixes (random ids share none: nothing to prime)."""
    return point.pattern in PRIMED_PATTERNS and WORKLOADS[point.workload].kind != "random-ids"


def make_point(arm: str, workload: str, pattern: Pattern, concurrency: int | None, rate: float | None,
               num_prompts: int, repeat: int) -> Point:
    # Dots separate id fields, so a rate of 0.5 req/s is written r0p5.
    load = f"c{concurrency}" if rate is None and concurrency else (f"r{rate:g}".replace(".", "p") if rate else "inf")
    n = actual_prompts(WORKLOADS[workload], num_prompts)
    return Point(f"{arm}.{workload}.{pattern}.{load}.r{repeat}", arm, workload, pattern, concurrency, rate, n, repeat)


PATTERNS: tuple[str, ...] = typing.get_args(Pattern)  # what --patterns accepts
Row = tuple[str, Pattern, int | None, float | None, int]  # (workload, pattern, concurrency, request_rate, num_prompts)


WARMUP_WAVES = 2  # a closed loop's warm-up is its first 2c - 1 sends (llmhost.bench.window)
# A closed loop's steady window: at least four turnovers of its c slots, two per window half, as the TTFT drift check
# needs (llmhost.bench.window.MIN_HALF_TURNOVERS; with one per half it cannot tell drift from wave-to-wave noise).
MIN_STEADY_WAVES = 4


def default_prompts(workload: str, pattern: Pattern, load: float) -> int:
    """Requests of a sweep point: a closed loop's warm-up waves and MIN_STEADY_WAVES steady ones, 6c (at least 32;
    16 for 8k-token prompts); 15 s of arrivals (at least 64)."""
    if pattern == "qps":
        return max(64, math.ceil(15 * load))  # a rate of 7.5 req/s sends 113, not 15 x 7
    return max(16 if workload == "long" else 32, (WARMUP_WAVES + MIN_STEADY_WAVES) * int(load))


# Per arm (llmhost.bench.budget runs on the other arms only the rows their setting can change).
FULL_SWEEP: tuple[Row, ...] = (
    *(("agent", "concurrency", c, None, default_prompts("agent", "concurrency", c)) for c in (1, 8, 32, 64)),
    *(("agent", "qps", None, r, default_prompts("agent", "qps", r)) for r in (2.0, 8.0, 16.0)),
    ("agent", "cold", 16, None, 128),
    ("agent", "warm", 16, None, 128),
    *(("chat", "concurrency", c, None, default_prompts("chat", "concurrency", c)) for c in (1, 16, 64)),
    *(("chat", "qps", None, r, default_prompts("chat", "qps", r)) for r in (4.0, 16.0, 32.0)),
    *(("long", "concurrency", c, None, default_prompts("long", "concurrency", c)) for c in (1, 8)),
    ("agent-tools", "concurrency", 16, None, default_prompts("agent-tools", "concurrency", 16)),
)
# The baseline's alone: the server's behaviour at its edges, not an arm's one difference.
BASELINE_RUNS: tuple[Row, ...] = (
    ("chat", "burst", None, None, 2000),  # 2,000 requests at once: queueing and admission under a spike
    ("chat", "long", 128, None, 10_000),  # the tail run: 10,000 requests support a p99.9
)
# Quick: c=8 keeps each closed loop checkable (6 waves) at 48 requests; c=16 would need 96.
QUICK_ALL: tuple[Row, ...] = (
    ("agent", "concurrency", 8, None, default_prompts("agent", "concurrency", 8)),
)
QUICK_BASELINE_EXTRA: tuple[Row, ...] = (
    ("agent", "warm", 8, None, default_prompts("agent", "warm", 8)),
    ("chat", "qps", None, 8.0, 32),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Loads:
    """The user's loads: each replaces the sweep's levels of its pattern, per workload that has that pattern."""

    concurrency: tuple[int, ...] | None = None  # --concurrency 1,16,64
    rates: tuple[float, ...] | None = None  # --rates 2,8,16 (req/s)
    duration_s: float | None = None  # --duration-s: size concurrency and qps points to last about this long
    patterns: tuple[str, ...] | None = None  # --patterns concurrency,qps: only these kinds of point


def with_loads(rows: tuple[Row, ...], loads: Loads) -> list[Row]:
    """The rows with the user's loads: a workload's concurrency (qps) rows become one row per given level, at the
    place of its first such row; --duration-s then resizes every concurrency and qps row; --patterns keeps only
    its kinds of point."""
    out: list[Row] = []
    for row in rows:
        if loads.patterns is not None and row[1] not in loads.patterns:
            continue
        workload, pattern = row[0], row[1]
        levels = loads.concurrency if pattern == "concurrency" else loads.rates if pattern == "qps" else None
        if levels is None:
            out.append(row)
        elif not any(r[0] == workload and r[1] == pattern for r in out):
            out += [(workload, pattern, int(x), None, default_prompts(workload, pattern, x)) if pattern == "concurrency"
                    else (workload, pattern, None, float(x), default_prompts(workload, pattern, x)) for x in levels]
    return [sized(r, loads.duration_s) if loads.duration_s and r[1] in ("concurrency", "qps") else r for r in out]


def sized(row: Row, duration_s: float) -> Row:
    """A concurrency or qps row whose *steady window* lasts about duration_s by the estimate model: a closed loop
    sends its warm-up waves first, then duration_s worth of waves (at least MIN_STEADY_WAVES); a Poisson row's
    arrivals also cover its warm-up, one request's latency (llmhost.bench.window)."""
    workload, pattern, conc, rate, _ = row
    w = WORKLOADS[workload]
    if pattern == "qps":
        return workload, pattern, conc, rate, max(8, math.ceil((rate or 1.0) * (duration_s + request_s(w))))
    c = conc or 1
    waves = max(MIN_STEADY_WAVES, round(duration_s / request_s(w, c)))
    return workload, pattern, conc, rate, c * (WARMUP_WAVES + waves)


def build_plan(arms: list[Arm], workloads: list[str], quick: bool, repeat: int,
               loads: Loads = Loads()) -> list[Point]:
    """Every point: arm by arm, then repeat, then the sweep order (the runner shuffles within a server boot)."""
    plan: list[Point] = []
    for arm in arms:
        rows = with_loads((QUICK_ALL + (QUICK_BASELINE_EXTRA if arm.is_baseline else ())) if quick
                          else FULL_SWEEP + (BASELINE_RUNS if arm.is_baseline else ()), loads)
        for rep in range(1, repeat + 1):
            plan += [make_point(arm.name, w, p, c, r, n, rep) for w, p, c, r, n in rows if w in workloads]
    return plan


def point_seed(base_seed: int, point: Point) -> int:
    """Dataset and arrival seed of a point: base + repeat index, so repeats differ and arms share them (paired)."""
    return base_seed + point.repeat - 1


def boot_order(todo: list[Point], seed: int) -> list[Point]:
    """The points of one server boot in a seeded shuffle (the same order on --resume), so drift in server state
    over a boot does not line up with the sweep order. Each point's place comes from the seed and its id alone, so
    the points a --resume has left keep the order they had in the full boot."""
    return sorted(todo, key=lambda p: (random.Random(f"{seed}:{p.point_id}").random(), p.point_id))


def decode_step_s(batch: int, context_tokens: float) -> float:
    """One decode step of `batch` sequences holding `context_tokens` each (the fit above)."""
    return STEP_BASE_S + batch * (STEP_PER_SEQ_S + context_tokens * STEP_PER_KV_TOKEN_S)


def request_s(w: Workload, in_flight: int = 1) -> float:
    """One request among `in_flight` (itself included): its TTFT, then its decode steps in a batch that size
    (context: the prompt plus half the answer, on average over the answer)."""
    ttft_s = w.input_len / PREFILL_TOK_S + (in_flight - 1) * ADMIT_S
    return ttft_s + (w.output_len - 1) * decode_step_s(in_flight, w.input_len + w.output_len / 2)


def estimate_s(point: Point, primed: bool | None = None) -> float:
    """Seconds one point should take on an H200 (for ETAs; the arithmetic is in the constants above), with its
    priming pass if `primed` (default: is_primed; a recorded attempt says whether it was). A closed
    loop runs ceil(n / c) waves of c requests in flight: agent c=64, 576 prompts, 9 x 3.10 s = 27.9 s of load
    (measured 28.6-28.7 s); chat c=64, 640 prompts, 10 x 2.57 s = 25.7 s (26.1-27.1 s)."""
    w = WORKLOADS[point.workload]
    if point.request_rate:
        load_s = point.num_prompts / point.request_rate + request_s(w)
    elif point.concurrency:
        in_flight = min(point.concurrency, point.num_prompts)
        load_s = math.ceil(point.num_prompts / point.concurrency) * request_s(w, in_flight)
    else:  # burst: prefill of everything, then its decode at the largest batch measured
        load_s = point.num_prompts * w.input_len / PREFILL_TOK_S \
            + BURST_DECODE_WAVES * w.output_len * decode_step_s(64, w.input_len + w.output_len / 2)
    primed = is_primed(point) if primed is None else primed
    return LOADGEN_OVERHEAD_S + load_s + (priming_s(point) if primed else 0.0)


def priming_s(point: Point) -> float:
    """A priming pass: the per-pass overhead and one short request per system prompt, each prefilling it."""
    return LOADGEN_OVERHEAD_S + AGENT_GROUPS * WORKLOADS[point.workload].input_len / PREFILL_TOK_S


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
               seed: int, output_file: Path, prime: bool = False) -> list[str]:
    """bench_serving arguments for one point (`prime=True`: its priming pass, see is_primed)."""
    argv = workload.dataset_args(point.num_prompts, prime=prime)
    # --tokenizer explicitly: otherwise bench_serving asks the server's /model_info for a path on the server side.
    # --cache-report: each request's cached prompt tokens (sglext on the OpenAI path, meta_info on /generate).
    argv += ["--base-url", base_url, "--model", model_dir, "--tokenizer", model_dir,
             "--served-model-name", served_model_name,
             "--seed", str(seed), "--output-file", str(output_file), "--disable-tqdm",
             "--ready-check-timeout-sec", "30", "--output-details", "--cache-report"]
    argv += ["--request-rate", f"{point.request_rate:g}" if point.request_rate else "inf"]
    if point.concurrency:
        argv += ["--max-concurrency", str(point.concurrency)]
    if is_primed(point) and not prime:
        argv += ["--warmup-requests", "0"]  # measured on the prefixes the priming pass left: no warm-up, no flush
    else:
        # One warm-up request absorbs first-request costs; --flush-cache then drops the prefix it left behind.
        argv += ["--warmup-requests", "1", "--flush-cache"]
    return argv


LOADGEN_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")  # new name first (0.5.17 deprecates the old)


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
        # the new name's reason: the old name fails the same way wherever sglang is missing
        why = why or (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
    raise LoadgenError(f"no SGLang load generator in SGLANG_PYTHON={python} (python -m {LOADGEN_MODULES[0]} "
                       f"--help: {why}) — run ./setup_host.sh or point SGLANG_PYTHON at the Python that has sglang")


# --- results -----------------------------------------------------------------------------------------------------

def low_support(counts: dict[str, int]) -> list[str]:
    """Percentiles with too few samples beyond them to trust (llmhost.stats' rule), e.g. 'ttft_ms.p99.9'."""
    from llmhost import stats  # numpy: imported once a point is summarised, after run_bench.py checked it is there

    return [f"{metric}.{name}" for metric, n in counts.items() for name, pct in PERCENTILES.items()
            if not stats.is_sufficient(n, pct)]


def summarize(details: dict[str, float], rows: list[RequestRecord], request_rate: float | None) -> PointSummary:
    """The module's totals of the point (its duration, completed count, throughputs), plus the achieved rate,
    sample counts and unsupported percentiles from the request records."""
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
