"""`run_bench.py --single-stream N`: where one stream's time per output token goes, arm by arm.

    ./run_bench.py --single-stream 3 --arm nooverlap="--disable-overlap-schedule"

Every arm (baseline = our defaults, plus the --arm / --arms ones) restarts the server once through
llmhost.serve.lifecycle with its flags PLUS SGLang's own instruments, on for this run only: --enable-mfu-metrics
(est. read BW in the Decode log line) and SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 after SERVER_ENV (fwd occupancy:
GPU time of the forwards). Then one warm-up request, a wait until the server is idle, and N sequential streamed chat
requests (short prompt, thinking off, MAX_TOKENS tokens with ignore_eos) through the toolkit's openai client.
Measured per arm: the client's gaps between content chunks (pooled p50/p90), SGLang's Decode lines written during
the N requests (steady ones at one running request on a CUDA graph: step = 1000 / gen throughput, GPU forward =
step x occupancy), the ITL histogram of /metrics over the same window, and the weight-read floor of the model at
the GPU's datasheet bandwidth. The breakdown is llmhost.bench.stream_breakdown's. Then, outside that window, one more
request with SGLang's profiler on for 100 forward passes: GPU kernel time per pass by category (GEMM, attention,
norm, ...) and the idle between kernels (llmhost.bench.kernel_profile).

Writes $RESULTS_DIR/bench/<run_id>-single-stream/ (manifest.json with single_stream_requests, stream_requests.jsonl,
stream_arms.jsonl and stream_kernels.jsonl appended as they happen, raw/serve-<arm>.log, raw/profile-<arm>/ with
SGLang's trace). The server is left running with the last arm's
flags and the instruments on, as --startup leaves it: ./serve.sh restart returns it to your defaults.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time

from llmhost import config
from llmhost.bench import arms as arms_mod
from llmhost.bench import decode_log, floor as floor_mod, kernel_profile, restart_runs, runner, store, stream_breakdown
from llmhost.bench import liveness, traffic
from llmhost.bench.eta import fmt_s
from llmhost.bench.stream_records import StreamArmRecord, StreamKernelRecord, StreamRequestRecord
from llmhost.fi import gpu_specs
from llmhost.serve import metrics, serverlog
from llmhost.serve.console import ServeError
from llmhost.serve.endpoints import ServerClient

DEFAULT_REQUESTS = 3
MAX_TOKENS = 1024  # ~40 s of Decode lines at 25 per request (one per 40 steps): enough for stable medians
LOAD = traffic.ChatLoad(concurrency=1, prefixes=1, prefix_words=16, max_tokens=MAX_TOKENS)  # a short prompt
INSTRUMENT_FLAGS = ("--enable-mfu-metrics",)
INSTRUMENT_ENV = "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1"
IDLE_WAIT_S = 60.0
ITL_HISTOGRAM = "sglang:inter_token_latency_seconds"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--single-stream", type=int, nargs="?", const=DEFAULT_REQUESTS, metavar="N",
                        help="measure one stream only: per arm (baseline + --arm ones, or --arms) restart with "
                        "SGLang's instruments on, then N sequential streamed requests of "
                        f"{MAX_TOKENS} tokens (default N: {DEFAULT_REQUESTS}); prints per arm where the time per "
                        "output token goes (floor, GPU, CPU gap, streaming); leaves the server on the last arm")


def problem(args: argparse.Namespace) -> str | None:
    """Why --single-stream cannot work with the other options given, as one line; None when it can."""
    return restart_runs.mode_problem(args, "single_stream", "request per arm", "one stream only")


# --- one arm --------------------------------------------------------------------------------------------------

def scrape(server: ServerClient) -> list[metrics.Sample]:
    """/metrics now ([] when it does not answer: the histogram figure is then not measured)."""
    reply = server.metrics()
    try:
        return metrics.parse(reply.text) if reply.status == 200 else []
    except metrics.MetricsError:
        return []


def wait_idle(server: ServerClient, timeout_s: float = IDLE_WAIT_S) -> bool:
    """Until /metrics counts no request running or waiting, so the window starts with ours alone; False at the
    timeout. A scrape that says nothing counts as idle: lines of a batch larger than one are left out anyway."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        samples = scrape(server)
        if not any((metrics.total(samples, name) or 0) > 0
                   for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs")):
            return True
        time.sleep(0.5)
    return False


def tokenizer_itl_ms(before: list[metrics.Sample], after: list[metrics.Sample]) -> float | None:
    """Mean ITL the tokenizer manager observed over the window: delta of the histogram's sum / count."""
    total_s = metrics.delta(before, after, f"{ITL_HISTOGRAM}_sum")
    count = metrics.delta(before, after, f"{ITL_HISTOGRAM}_count")
    return total_s / count * 1000 if total_s is not None and count else None


def request_record(arm: str, number: int, row: dict) -> StreamRequestRecord:
    """traffic.one_request's result as the stored record."""
    if not row["ok"]:
        return StreamRequestRecord(arm, number, False, row["error"], 0, None, ())
    ttft = row["ttft_s"]
    return StreamRequestRecord(arm, number, True, "", row["completion_tokens"],
                               None if ttft is None else ttft * 1000, tuple(g * 1000 for g in row["gaps_s"]))


def quantization_of(server: ServerClient) -> str | None:
    """The --quantization the running server reports in its server info (None: none, or no answer)."""
    reply = server.server_info()
    try:
        info = reply.json() if reply.ok else None
    except ValueError:
        info = None
    value = info.get("quantization") if isinstance(info, dict) else None
    return str(value) if value else None


def measure_arm(cfg: config.Config, run: store.RunStore, arm: arms_mod.Arm, requests: int, since: float,
                gpu_name: str | None) -> StreamArmRecord:
    """Restart with the instruments, warm up, then the N measured requests; their records appended as they end.
    The floor is the arm's own: weights the server quantized on load are read at their own size."""
    floor, floor_note = weight_floor(cfg, gpu_name)

    def failed(error: str) -> StreamArmRecord:
        return stream_breakdown.summarize_arm(arm.name, [], [], None, floor, floor_note, error)

    try:
        restart_runs.restart(cfg, run, arm, since, INSTRUMENT_FLAGS, INSTRUMENT_ENV)
    except ServeError as exc:
        return failed(f"restart failed: {str(exc).splitlines()[0][:300]}")
    from llmhost.client import Endpoint, make_client

    client = make_client(Endpoint(f"{cfg.base_url}/v1", cfg.served_model_name, cfg.api_key()), timeout_s=300)
    server = ServerClient.for_config(cfg, cfg.api_key())
    quantization = quantization_of(liveness.info_client(cfg))
    if quantization:
        floor, floor_note = weight_floor(cfg, gpu_name, quantization)
    numbers = itertools.count()
    traffic.one_request(client, cfg.served_model_name, LOAD, next(numbers))  # warm-up: not measured
    if not wait_idle(server):
        return failed(f"the server did not go idle within {IDLE_WAIT_S:.0f} s after the warm-up (another client?)")
    log = cfg.state_dir / "server.log"
    offset, before = serverlog.size(log), scrape(server)
    rows = []
    for number in range(1, requests + 1):
        rec = request_record(arm.name, number, traffic.one_request(client, cfg.served_model_name, LOAD, next(numbers)))
        run.append_stream(rec)
        rows.append(rec)
        print(f"[bench single-stream] arm {arm.name}, request {number}/{requests}: " + (
            f"{rec.output_tokens} tokens, median chunk gap {statistics.median(rec.itl_ms or (0,)):.2f} ms"
            if rec.ok else f"failed: {rec.error}"), flush=True)
    time.sleep(1.0)  # the pane copies the server's output to server.log: let the last Decode lines land
    lines = decode_log.single_stream(decode_log.read_from(log, offset))
    summary = stream_breakdown.summarize_arm(arm.name, rows, lines, tokenizer_itl_ms(before, scrape(server)), floor,
                                             floor_note)
    # after the measured window, so the profiler's own cost is in none of its figures
    run.append_stream(profile_kernels(server, lambda: traffic.one_request(client, cfg.served_model_name, LOAD,
                                                                          next(numbers)), run, arm.name))
    return summary


def profile_kernels(server: ServerClient, one_request, run: store.RunStore, arm: str) -> StreamKernelRecord:
    """One more streamed request with SGLang's profiler on for its first PROFILE_STEPS forward passes; a failure is
    recorded as the reason, never fails the arm."""
    out_dir = run.raw_dir() / f"profile-{arm}"
    if not wait_idle(server):
        return kernel_profile.failed(arm, "the server did not go idle for the profiled request")
    error = kernel_profile.start(server, out_dir, kernel_profile.PROFILE_STEPS)
    if error:
        return kernel_profile.failed(arm, error)
    row = one_request()
    if not row["ok"]:
        return kernel_profile.failed(arm, f"the profiled request failed: {row['error']}")
    path = kernel_profile.wait_trace(out_dir)
    if path is None:
        return kernel_profile.failed(arm, f"SGLang wrote no trace into {out_dir} within "
                                          f"{kernel_profile.TRACE_WAIT_S:.0f} s")
    try:
        rec = kernel_profile.summarize(arm, kernel_profile.read_kernels(path), kernel_profile.PROFILE_STEPS,
                                       path.name)
    except kernel_profile.TraceError as exc:
        return kernel_profile.failed(arm, str(exc))
    print(f"[bench single-stream] arm {arm}: kernel profile of {kernel_profile.PROFILE_STEPS} forward passes "
          f"in raw/profile-{arm}/{path.name}", flush=True)
    return rec


# --- the run --------------------------------------------------------------------------------------------------

def weight_floor(cfg: config.Config, gpu_name: str | None,
                 quantization: str | None = None) -> tuple[floor_mod.Floor | None, str]:
    """The model's weight-read floor on this GPU, its linear layers quantized as the server said (--quantization;
    None: not), and why a part of it is not stated ("" when all is)."""
    try:
        weight_bytes = floor_mod.weight_bytes_of_dir(cfg.model_dir, quantization)
    except floor_mod.ShapeError as exc:
        return None, str(exc)
    spec = gpu_specs.lookup(gpu_name)
    note = "" if spec else f"GPU {gpu_name or '(none found)'} has no datasheet bandwidth in llmhost/fi/gpu_specs.py"
    return floor_mod.Floor(weight_bytes, spec.peak_gb_s if spec else None, gpu_name), note


def print_summary(run: store.RunStore, requests: int) -> list[StreamArmRecord]:
    """The table and notes from stream_arms.jsonl as recorded, then the closing JSON line; the records."""
    loaded = run.read_stream_arms()
    for warning in loaded.warnings:
        print(f"[bench] warning: {warning}", file=sys.stderr)
    recs = loaded.records
    print("[bench] ms per output token, medians ('-' = not measured):")
    for line in stream_breakdown.table_lines([stream_breakdown.breakdown(r) for r in recs]):
        print(f"[bench] {line}")
    for rec in recs:
        for note in stream_breakdown.missing_notes(rec):
            print(f"[bench] {rec.arm}: {note}")
    floors = {b.arm: b.floor_ms for b in map(stream_breakdown.breakdown, recs)}
    kernels = run.read_stream_kernels().records
    for kern in kernels:
        for line in kernel_profile.lines(kern, floors.get(kern.arm)):
            print(f"[bench] {line}")
    closing = stream_breakdown.closing(str(run.root), run.run_id, requests, recs)
    closing["kernels"] = {k.arm: {"kernel_ms": k.kernel_ms, "span_ms": k.span_ms, "by_category_ms": k.by_category,
                                  **({"error": k.error} if k.error else {})} for k in kernels}
    print(json.dumps(closing))
    return recs


def measure_all(cfg: config.Config, run: store.RunStore, arms: list[arms_mod.Arm], requests: int) -> int:
    """Every arm in turn, each recorded as it finishes (from the second on, with the ETA of the rest: the median arm
    so far); the summary; the exit code."""
    gpu_name = run.read_manifest().provenance.gpu.name
    since = time.time()
    runner.interrupt_on_sigterm()
    took: list[float] = []
    try:
        for done, arm in enumerate(arms):
            eta = f"  ETA {fmt_s(statistics.median(took) * (len(arms) - done))}" if took else ""
            print(f"[bench single-stream {done}/{len(arms)}] arm {arm.name}: restarting with "
                  f"{' '.join(INSTRUMENT_FLAGS)} and {INSTRUMENT_ENV} "
                  f"(progress in {run.root}/raw/serve-{arm.name}.log){eta}", flush=True)
            began = time.monotonic()
            run.append_stream(measure_arm(cfg, run, arm, requests, since, gpu_name))
            took.append(time.monotonic() - began)
    except (KeyboardInterrupt, runner.UserStopped, OSError) as exc:
        return restart_runs.cut_short(exc, run, f"a new --single-stream run (the arms so far are in {run.root}/"
                                         "stream_arms.jsonl)")
    recs = print_summary(run, requests)
    return 0 if recs and all(r.status == "ok" for r in recs) else 1


def main(cfg: config.Config, requests: int, arm_names: list[str] | None, user_arms: list[str], tag: str,
         dry_run: bool, argv: list[str]) -> int:
    """`run_bench.py --single-stream`: pick the arms, then the dry run (the plan, nothing started) or the run under
    the bench lock."""
    try:
        arms = restart_runs.pick_arms(cfg, arm_names, user_arms)
    except arms_mod.ArmError as exc:
        print(f"[bench] error: {exc} — see ./run_bench.py --help", file=sys.stderr)
        return 2
    print(f"[bench] single-stream plan: {len(arms)} arm(s) x (1 restart + 1 warm-up + {requests} requests of "
          f"{MAX_TOKENS} tokens); instruments on for this run only: {' '.join(INSTRUMENT_FLAGS)}, {INSTRUMENT_ENV}")
    for arm in arms:
        print(f"  {arm.name:<20} {' '.join(arm.flags) or '(our defaults)'}")
    if dry_run:
        print(json.dumps({"dry_run": True, "single_stream_requests": requests, "arms": [a.name for a in arms]}))
        return 0

    def measure(run: store.RunStore) -> int:
        print(f"[bench] run directory {run.root}", flush=True)
        return measure_all(cfg, run, arms, requests)

    return restart_runs.run_locked(cfg, argv, lambda: restart_runs.new_run(
        cfg, arms, "single-stream", tag, argv, single_stream_requests=requests), measure)
