"""Stand-in for `python -m sglang.launch_server` (SGLang 0.5.17), for CPU tests: same argv, routes, bodies, logs.

    PYTHONPATH=tests/standin python -m sglang.launch_server --model-path /any --port 30000 \
        --served-model-name qwen3-4b --enable-metrics --enable-cache-report [--api-key K | --config f.yaml]

Accepts exactly the options of the captured --help (unknown -> "unrecognized arguments", exit 2). Nothing is loaded:
the model path is only echoed. Knobs (environment variables):
  STANDIN_STARTUP_S             seconds from launch to ready (default 0). The port is bound after 80% of it (the real
                                server loads weights and captures CUDA graphs before uvicorn binds); /health answers
                                503 for the rest, then 200 after the warm-up request and "fired up" log line.
  STANDIN_HEALTH_S              seconds /health and /health_generate take once ready (SGLang 0.5.17: a second, it
                                sleeps 1 s before looking at its test generation; default 0 keeps tests fast).
  STANDIN_CRASH_AFTER_S         exit 1 after N seconds with a scheduler traceback in the log (crash tests).
  STANDIN_TTFT_MS               fixed prefill cost per request (default 5).
  STANDIN_PREFILL_US_PER_TOKEN  added per UNCACHED prompt token (default 20), so prefix-cache hits are faster.
  STANDIN_ITL_MS                time between output tokens (default 2); a list (1,3) cycles, one step per cache
                                flush, so successive benchmark points (each flushes) differ like noisy repeats.
  STANDIN_ITL_MS_PER_RUNNING    added to every gap per request running beside it (default 0): a decode step
                                of a larger batch reads more KV and takes longer, as on the GPU, so capping the
                                batch with --max-running-requests trades ITL for queueing (TTFT).
  STANDIN_MAX_RUNNING           concurrent requests; more wait in the queue (num_queue_reqs). Default
                                --max-running-requests, else 4096.
  STANDIN_NO_TOOL_CALLS=1       a named tool_choice returns no call (to test a missing tool call).
  STANDIN_TOOL_ARGUMENTS        arguments of a named (forced) call: what random weights write (default "{}").
  STANDIN_NATURAL_TOOL_ARGUMENTS  behave like real weights: tool_choice auto calls the first tool with these.
  STANDIN_FWD_OCCUPANCY         percent the `fwd occupancy` suffix of the Decode batch line says (default 85).
The scheduler's `Decode batch` line is logged every --decode-log-interval (default 40) decode steps while requests run,
in SGLang's format, with the estimate suffix under --enable-mfu-metrics (and --enable-metrics) and the occupancy
suffix when SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 (_standin/decode_log.py).
The prefix cache is off with --disable-radix-cache, like the real flag. General plugins (entry point group
sglang.srt.plugins) are loaded and called as SGLang does, in the launcher and the scheduler (_standin/plugins.py).
With --tokenizer-worker-num > 1 the HTTP server runs in a child process, as in SGLang 0.5.17 (its tokenizer workers
serve uvicorn): killed -9, the launcher leaves that child accepting requests that never finish (the scheduler died
with it), so /health cannot tell a dead server; only the launcher's PID can.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import traceback

from sglang._standin import args as args_mod
from sglang._standin import engine, server
from sglang._standin.plugins import load_plugins
from sglang._standin.args import CAPTURES
from sglang._standin.profiler import Profiler
from sglang._standin.decode_log import DecodeLog

H200_MAX_TOTAL_TOKENS = 859665  # KV slots of Qwen3-4B on an H200 at mem_fraction 0.903 (server.log capture)
QWEN3_CONTEXT_LEN = 40960


def _captured_json(name: str) -> dict:
    return json.loads((CAPTURES / name).read_bytes().decode().split("\r\n\r\n", 1)[1])


def _typed(value: object, like: object) -> object:
    """A command-line string converted to the type of the captured default (int/float/bool/str)."""
    if not isinstance(value, str) or like is None or isinstance(like, str):
        return value
    for kind in (bool, int, float):
        if isinstance(like, kind):
            if kind is bool:
                return value.lower() in ("1", "true", "yes")
            try:
                return kind(value)
            except ValueError:
                return value
    return value


def settings_from(parsed: dict) -> tuple[dict, dict]:
    """(settings the stand-in uses, server_args as the real /server_info shows them)."""
    info = _captured_json("GET_server_info.txt")
    given = {k: v for k, v in parsed.items() if v is not None and k in info}
    for key, value in given.items():
        if value is not False or info[key] is None or isinstance(info[key], bool):
            info[key] = _typed(value, info[key])
    info["load_format"] = parsed.get("load_format") or "auto"  # the capture ran dummy; the flag's default is auto
    info["tokenizer_path"] = parsed.get("tokenizer_path") or parsed["model_path"]
    info["served_model_name"] = parsed.get("served_model_name") or parsed["model_path"]
    max_total = int(parsed.get("max_total_tokens") or H200_MAX_TOTAL_TOKENS)
    info["max_total_num_tokens"] = max_total
    s = {
        "host": info["host"], "port": int(info["port"]), "api_key": parsed.get("api_key"),
        "served_model_name": info["served_model_name"],
        "context_len": int(parsed.get("context_length") or QWEN3_CONTEXT_LEN),
        "enable_metrics": bool(parsed.get("enable_metrics")),
        "enable_cache_report": bool(parsed.get("enable_cache_report")),
        "default_include_usage": bool(parsed.get("stream_response_default_include_usage")),
        "radix": not parsed.get("disable_radix_cache"), "max_total_tokens": max_total,
        "max_running": int(os.environ.get("STANDIN_MAX_RUNNING") or parsed.get("max_running_requests") or 4096),
        "decode_log_interval": int(parsed.get("decode_log_interval") or 40),
        "enable_mfu_metrics": bool(parsed.get("enable_mfu_metrics")) and bool(parsed.get("enable_metrics")),
    }
    return s, info


def _server_args_repr(info: dict) -> str:
    fields = list(info)[: list(info).index("status")]
    return "ServerArgs(" + ", ".join(f"{k}={info[k]!r}" for k in fields) + ")"


def _graphs(parsed: dict) -> tuple[bool, bool]:
    """(prefill graphs captured, decode graphs captured) under SGLang 0.5.17's spellings of turning them off."""
    off = bool(parsed.get("disable_cuda_graph"))
    prefill = not (off or parsed.get("disable_piecewise_cuda_graph") or parsed.get("disable_prefill_cuda_graph")
                   or parsed.get("cuda_graph_backend_prefill") == "disabled")
    decode = not (off or parsed.get("disable_decode_cuda_graph")
                  or parsed.get("cuda_graph_backend_decode") == "disabled")
    return prefill, decode


def _ints(*values: object) -> list[int] | None:
    """The first given list or number among `values` (argparse strings), as ints."""
    for value in values:
        if value:
            return [int(v) for v in value] if isinstance(value, list) else [int(value)]
    return None


def graph_sizes(parsed: dict) -> tuple[list[int], list[int]]:
    """(prefill token counts, decode batch sizes) SGLang 0.5.17 captures on an H200 (ServerArgs'
    _generate_prefill/decode_cuda_graph_batch_sizes): the explicit lists, else its ladders up to the max."""
    prefill = _ints(parsed.get("cuda_graph_bs_prefill"), parsed.get("piecewise_cuda_graph_tokens"))
    if prefill is None:
        top = (_ints(parsed.get("cuda_graph_max_bs_prefill"), parsed.get("piecewise_cuda_graph_max_tokens"),
                     parsed.get("chunked_prefill_size")) or [8192])[0]
        ladder = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
                  *range(1280, 4097, 256), *range(4608, top + 1, 512)]
        prefill = [t for t in ladder if t <= top]
    decode = _ints(parsed.get("cuda_graph_bs_decode"), parsed.get("cuda_graph_bs"))
    if decode is None:
        top = (_ints(parsed.get("cuda_graph_max_bs_decode"), parsed.get("cuda_graph_max_bs")) or [256])[0]
        decode = [b for b in [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, top + 1, 32)]
                  if b <= top]
        decode += [] if top in decode else [top]
    return sorted(set(prefill)), sorted(set(decode))


def _scheduler_start(log, parsed: dict, max_total: int, seconds: float) -> None:
    """The scheduler's start-up lines as the captured server.log has them (what `serve.sh start` splits into
    phases), spread over `seconds`: weights a tenth, KV pool a tenth, SGLang's own 58 prefill graphs half and its 36
    decode graphs three tenths; other lists in proportion to their sizes, as on the H200 (~0.14 s a prefill size,
    ~0.09 s a decode size). A graph kind turned off is neither logged nor waited for."""
    prefill, decode = _graphs(parsed)
    prefill_sizes, decode_sizes = graph_sizes(parsed)
    log("Init torch distributed begin.")
    log("Init torch distributed ends. elapsed=0.05 s, mem usage=0.09 GB")
    log("Load weight begin. avail mem=139.13 GB")
    time.sleep(seconds * 0.1)
    log("Load weight end. elapsed=0.21 s, type=Qwen3ForCausalLM, avail mem=131.56 GB, mem usage=7.56 GB.")
    time.sleep(seconds * 0.1)
    log(f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {max_total}, K size: 59.03 GB, V size: 59.03 GB")
    log("Memory pool end. avail mem=12.79 GB")
    if prefill:
        log(f"Capture target prefill CUDA graph begin. backend=breakable, num_tokens={prefill_sizes}, "
            "avail mem=11.69 GB")
        took = seconds * 0.5 * len(prefill_sizes) / 58
        time.sleep(took)
        log(f"Capture target prefill CUDA graph end. elapsed={took:.2f} s, mem usage=1.43 GB, avail mem=10.69 GB.")
    if decode:
        log(f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs={decode_sizes}, "
            "avail mem=10.46 GB")
        took = seconds * 0.3 * len(decode_sizes) / 36
        time.sleep(took)
        log(f"Capture target decode CUDA graph end. elapsed={took:.2f} s, mem usage=0.61 GB, avail mem=10.08 GB.")


def _crash_later(seconds: float) -> None:
    def crash() -> None:
        stack = "".join(traceback.format_stack(limit=3))
        server.log(f"Scheduler hit an exception: Traceback (most recent call last):\n{stack}"
                   "RuntimeError: CUDA error: an illegal memory access was encountered (stand-in crash)")
        server.log("Received sigquit from a child process. It usually means the child failed.")
        os._exit(1)

    timer = threading.Timer(seconds, crash)
    timer.daemon = True
    timer.start()


def _timing(s: dict) -> engine.Timing:
    env = os.environ
    return engine.Timing(ttft_ms=float(env.get("STANDIN_TTFT_MS", 5)),
                         prefill_us_per_token=float(env.get("STANDIN_PREFILL_US_PER_TOKEN", 20)),
                         itl_cycle_ms=tuple(float(x) for x in env.get("STANDIN_ITL_MS", "2").split(",")),
                         max_running=s["max_running"],
                         itl_ms_per_running=float(env.get("STANDIN_ITL_MS_PER_RUNNING", 0)))


def _http_in_a_child() -> None:
    """Fork: the parent (launcher + scheduler) waits for the child; the child serves HTTP and, once its parent is
    gone, hangs every generation step (nothing schedules them any more). Called before any thread starts."""
    launcher = os.getpid()
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status))

    def orphaned() -> None:
        while os.getppid() == launcher:
            time.sleep(0.2)
        engine.SCHEDULER_GONE.set()

    threading.Thread(target=orphaned, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    print(f"{os.path.abspath(__file__)}:56: UserWarning: 'python -m sglang.launch_server' is still supported, but "
          "'sglang serve' is the recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]\n"
          "  warnings.warn(", file=sys.stderr, flush=True)
    parsed = args_mod.parse(sys.argv[1:] if argv is None else argv)  # exits 2 on bad argv, like argparse
    s, info = settings_from(parsed)
    if int(parsed.get("tokenizer_worker_num") or 1) > 1:
        _http_in_a_child()
    startup_s = float(os.environ.get("STANDIN_STARTUP_S", 0))
    if os.environ.get("STANDIN_CRASH_AFTER_S"):
        _crash_later(float(os.environ["STANDIN_CRASH_AFTER_S"]))
    server.log(f"server_args={_server_args_repr(info)}")  # the real server logs --api-key here too
    load_plugins(server.log)  # SGLang's engine loads them, then each scheduler
    eng = engine.Engine(_timing(s), s["max_total_tokens"], s["radix"])
    ranks = server.scheduler_ranks(int(info.get("tp_size") or 1), int(info.get("dp_size") or 1))
    eng.log = sched_log = functools.partial(server.log, ranks=ranks)  # what the scheduler process logs
    timer_on = os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "").lower() in ("true", "1", "yes", "y")
    eng.decode_log = DecodeLog(s["decode_log_interval"], s["enable_mfu_metrics"],
                               float(os.environ.get("STANDIN_FWD_OCCUPANCY", 85)) if timer_on else None, sched_log,
                               s["max_total_tokens"])
    eng.profiler = Profiler(sched_log)
    model_info = _captured_json("GET_model_info.txt")
    model_info.update(model_path=info["model_path"], tokenizer_path=info["tokenizer_path"])
    state = server.State(s, eng, info, model_info)
    load_plugins(sched_log)
    _scheduler_start(sched_log, parsed, s["max_total_tokens"], startup_s * 0.8)
    sched_log(f"max_total_num_tokens={s['max_total_tokens']}, chunked_prefill_size={info['chunked_prefill_size']}, "
               f"max_prefill_tokens=16384, max_running_requests={s['max_running']}, context_len={s['context_len']}, "
               "available_gpu_mem=10.08 GB")
    try:
        httpd = server.make_server(state)
    except OSError as exc:
        server.log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                   f"('{s['host']}', {s['port']}): {exc.strerror.lower() if exc.strerror else exc}")
        return 1
    workers = int(parsed.get("tokenizer_worker_num") or 1)
    if workers > 1:  # uvicorn's supervisor first, then each tokenizer process as SGLang 0.5.17 logs it
        server.log(f"INFO:     Uvicorn running on http://{s['host']}:{s['port']} (Press CTRL+C to quit)")
        server.log(f"INFO:     Started parent process [{os.getppid()}]")
        for i in range(workers):
            ipc = f"ipc:///tmp/standin-tokenizer-{os.getpid()}-{i}"
            server.log(f"INFO:     Started server process [{os.getpid()}]")
            server.log("INFO:     Waiting for application startup.")
            server.log(f"INFO:     Start multi-tokenizer worker process {os.getpid()}, ipc_name={ipc}")
            server.log(f"Router registered worker IPC: {ipc} (total: {i + 1})")
            server.log("INFO:     Application startup complete.")
    else:
        server.log(f"INFO:     Started server process [{os.getpid()}]")
        server.log("INFO:     Waiting for application startup.")
        server.log("INFO:     Application startup complete.")
        server.log(f"INFO:     Uvicorn running on http://{s['host']}:{s['port']} (Press CTRL+C to quit)")
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    time.sleep(startup_s * 0.2)
    list(eng.run(engine.Request(api_warmup_id(), engine.tokenize("The capital city of France is"), 1, 0, False)))
    state.ready.set()
    server.log("The server is fired up and ready to roll!")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.log("INFO:     Shutting down")
    return 0


def api_warmup_id() -> str:
    return "warmup_" + os.urandom(8).hex()


if __name__ == "__main__":
    raise SystemExit(main())
