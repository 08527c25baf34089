"""The load generator of one server boot: SGLang's own benchmark module, imported once, runs every point in-process.

    python -m llmhost.bench.loadgen sglang.benchmark.serving     # started by llmhost.bench.loadgen_process

It runs inside SGLANG_PYTHON (the module needs torch-free sglang, transformers, aiohttp). The import and the tokenizer
load (~12 s on the H200) happen once per boot instead of once per point. Protocol, one JSON document a line:

    stdout, first   {"ready": true, "version": "0.5.17", "event_loop": "uvloop"} or {"ready": false, "error": "..."}
    stdin, a point  {"argv": [<bench_serving arguments>], "requests_file": "<path>"}
    stdout, answer  {"ok": true, "summary": {duration, completed, *_throughput}} or {"ok": false, "error": "..."}
    stdin, prepare  {"prepare": [[<bench_serving arguments>], ...]}  (sent while the server boots)
    stdout, answer  {"ok": true, "prepared": <datasets built>, "seconds": <s>} or {"ok": false, "error": "..."}

Each point is parsed by the module's own argument parser and run by its own `run_benchmark(args)`, so its request
functions, dataset generators and metric definitions stay the source of truth. What this adds, without forking:
  - the tokenizer and the chat-template probe are loaded once (memoised `get_tokenizer`, `check_chat_template`);
  - every request function is wrapped to keep its RequestFuncOutput, so each request is written with its wall-clock
    start and end (time.time(), the telemetry clock), TTFT, ITLs, output and cached tokens (`--cache-report`: the
    `sglext` chunk on the OpenAI path, `meta_info.cached_tokens` on /generate);
  - each measured request is also appended to <requests file>.completed.jsonl the moment it finishes, so a point
    killed at its time limit keeps the requests that finished before the kill (llmhost.bench.salvage); the file is
    removed once the point's requests file is written;
  - the chat content reader also counts a tool-call delta, so TTFT is the first token of ANY kind (content,
    reasoning or tool call); unchanged for replies without tool calls.
  - before each point the garbage collector collects, then freezes what is alive, so that it does not pause the
    streams of a point to walk the module's imports (settle_garbage_collector);
  - the module's session factory (`_create_bench_client_session`, one session per request) is wrapped so that each
    /generate request also notes when its response headers came back (`headers_ms`, from the same start as its
    TTFT). On /generate SGLang sends them before its tokenizer manager sees the request, so they time the request's
    way in (connection, body, the server's HTTP parse), which SGLang's own TTFT does not count
    (llmhost.report.client_overhead). On /v1/chat/completions 0.5.17 holds them until the first chunk is ready
    (serving_chat kick-starts its generator first), so they say nothing there and are not recorded.
  - `prepare` builds the boot's generated-shared-prefix datasets ahead, while the server boots, through the module's
    own get_dataset seeded as its run_benchmark seeds it: the module caches that dataset on disk (keyed by seed and
    sizes) and each point then loads it instead of tokenizing ~4.4k-token prompts one by one (10 s per 576-prompt
    point on the H200 host, 60 prompts/s). Loading also leaves numpy's RNG as the seed set it, where generating
    advances it, so a Poisson point's arrival times no longer depend on whether the cache existed (an arm run after
    another used to get other arrivals than the first for the same seed).
Everything the module prints goes to stderr (the caller's log); stdout carries only the protocol.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import gc
import importlib
import inspect
import io
import json
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from llmhost import files

VERIFIED_VERSION = "0.5.17"  # the SGLang whose benchmark module this file was read against
# Names this file calls or wraps, with the parameters they take in the verified version.
API: dict[str, tuple[str, ...]] = {
    "cli_main": (),
    "run_benchmark": ("args_",),
    "get_tokenizer": ("pretrained_model_name_or_path",),
    "check_chat_template": ("model_path",),
    "get_dataset": ("args", "tokenizer", "model_id"),
    "_combine_openai_chat_content": ("message",),
    "async_request_sglang_generate": ("request_func_input", "pbar"),
    "async_request_openai_chat_completions": ("request_func_input", "pbar"),
}
OUTPUT_FIELDS = ("success", "error", "start_time", "latency", "ttft", "itl", "prompt_len", "output_len",
                 "cached_tokens")
SUMMARY_KEYS = ("duration", "completed", "request_throughput", "input_throughput", "output_throughput",
                "total_throughput")
PARENT_ENV = "LLMHOST_LOADGEN_PARENT"  # run_bench's PID, set by loadgen_process
DISK_CACHED_DATASETS = ("generated-shared-prefix",)  # the module pickles these under ~/.cache/sglang/benchmark


class LoadgenError(Exception):
    """A point (or the module) that cannot run; the message is one line."""


def installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return str(getattr(sys.modules.get("sglang"), "__version__", "unknown"))


def api_problem(mod: Any) -> str:
    """'' when the module has every function and field this file uses, with the verified parameters; else what
    differs, as one phrase."""
    for name, params in API.items():
        func = getattr(mod, name, None)
        if not callable(func):
            return f"no {name}()"
        found = tuple(inspect.signature(func).parameters)
        if found[:len(params)] != params:
            return f"{name}({', '.join(found)}) instead of {name}({', '.join(params)})"
    fields = {f.name for f in dataclasses.fields(getattr(mod, "RequestFuncOutput", object))} \
        if dataclasses.is_dataclass(getattr(mod, "RequestFuncOutput", None)) else set()
    missing = [f for f in OUTPUT_FIELDS if f not in fields]
    if missing:
        return f"RequestFuncOutput lacks {', '.join(missing)}"
    funcs = getattr(mod, "ASYNC_REQUEST_FUNCS", None)
    if not isinstance(funcs, dict) or not {"sglang", "sglang-oai-chat"} <= set(funcs):
        return "ASYNC_REQUEST_FUNCS lacks the sglang and sglang-oai-chat backends"
    return ""


def any_token_text(combine: Callable[[dict], str]) -> Callable[[dict], str]:
    """The chat reader's text of a delta, plus the tool calls it carries: a tool-call-only reply then has a TTFT
    and its deltas are ITL gaps, instead of no TTFT and one whole-call gap. Unchanged for deltas without calls."""
    @functools.wraps(combine)
    def text(message: dict) -> str:
        return combine(message) + "".join(map(call_text, message.get("tool_calls") or []))
    return text


def call_text(call: object) -> str:
    """A tool-call delta's name and argument text; "\x00" when it has neither (it is still a streamed token)."""
    function = (call.get("function") if isinstance(call, dict) else None) or {}
    return f"{function.get('name') or ''}{function.get('arguments') or ''}" or "\x00"


# The running request's own times (its task's context): the session wrapper writes, the request wrapper reads
REQUEST_TIMES: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("request_times", default=None)


def headers_first(api_url: str) -> bool:
    """Whether SGLang 0.5.17 sends this route's response headers before the request reaches its tokenizer manager."""
    return str(api_url).rstrip("/").endswith("/generate")


def header_timed(create_session: Callable[[], Any]) -> Callable[[], Any]:
    """The module's session factory, its sessions' post() noting when the response headers arrived."""
    @functools.wraps(create_session)
    def create() -> HeaderTimedSession:
        return HeaderTimedSession(create_session())
    return create


class HeaderTimedSession:
    """A session as the request functions use it (`async with session`, `async with session.post(...)`), whose
    post() writes perf_counter() at the response headers into the running request's REQUEST_TIMES."""

    def __init__(self, session: Any):
        self._session = session

    async def __aenter__(self) -> "HeaderTimedSession":
        await self._session.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._session.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def post(self, *args: Any, **kwargs: Any) -> "HeaderTimedPost":
        return HeaderTimedPost(self._session.post(*args, **kwargs))


class HeaderTimedPost:
    """`session.post(...)`'s context manager; entering it returns the response once its headers are in, and notes
    that moment for the running request."""

    def __init__(self, request: Any):
        self._request = request

    async def __aenter__(self) -> Any:
        response = await self._request.__aenter__()  # returns once the status line and headers are in
        times = REQUEST_TIMES.get()
        if times is not None:
            times["headers"] = time.perf_counter()
        return response

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._request.__aexit__(*exc)

    def __await__(self) -> Any:  # `response = await session.post(...)`, as aiohttp also allows
        return self.__aenter__().__await__()


def completed_file(requests_file: Path) -> Path:
    """Where each measured request of a point is appended as it finishes (read back by llmhost.bench.salvage)."""
    return requests_file.with_suffix(".completed.jsonl")


class Generator:
    """The imported module with its hooks: the outputs of the running point's requests, in completion order."""

    def __init__(self, mod: Any):
        self.mod = mod
        self.outputs: list[Any] = []
        self.warmups = 0  # the running point's warm-up requests: the first outputs, never measured
        self.clock_s = 0.0  # unix seconds minus perf_counter seconds, fixed per point
        self.completed: TextIO | None = None  # the running point's completed-requests file
        mod.get_tokenizer = functools.cache(mod.get_tokenizer)  # one tokenizer load per boot, not per point
        mod.check_chat_template = functools.cache(mod.check_chat_template)
        mod._combine_openai_chat_content = any_token_text(mod._combine_openai_chat_content)
        if callable(getattr(mod, "_create_bench_client_session", None)):  # else headers_ms stays unmeasured
            mod._create_bench_client_session = header_timed(mod._create_bench_client_session)
        for backend, func in list(mod.ASYNC_REQUEST_FUNCS.items()):
            mod.ASYNC_REQUEST_FUNCS[backend] = self._kept(func)

    def _kept(self, func: Callable) -> Callable:
        async def request(request_func_input: Any, pbar: Any = None) -> Any:
            times: dict[str, float] = {}
            token = REQUEST_TIMES.set(times)  # this request's task only: concurrent requests run in their own
            try:
                output = await func(request_func_input=request_func_input, pbar=pbar)
            finally:
                REQUEST_TIMES.reset(token)
            # perf_counter s, like its start_time; None: not seen, or the chat path (its headers wait for a token)
            output.headers_time = times.get("headers") if headers_first(request_func_input.api_url) else None
            self.outputs.append(output)
            if self.completed is not None and len(self.outputs) > self.warmups:  # line by line: a kill keeps them
                self.completed.write(json.dumps(request_row(output, self.clock_s)) + "\n")
                self.completed.flush()
            return output
        return request

    def parse(self, argv: list[str]) -> Any:
        """The Namespace the module's own parser makes of argv (its cli_main builds the parser and hands the
        result to run_benchmark, which is swapped for a catcher while it parses)."""
        caught: list[Any] = []
        real, self.mod.run_benchmark = self.mod.run_benchmark, caught.append
        saved_argv, errors = sys.argv, io.StringIO()
        sys.argv = [self.mod.__name__, *argv]
        try:
            with contextlib.redirect_stderr(errors):
                self.mod.cli_main()
        except SystemExit:
            raise LoadgenError("bad benchmark arguments: "
                               + (errors.getvalue().strip().splitlines() or ["no message"])[-1]) from None
        finally:
            self.mod.run_benchmark, sys.argv = real, saved_argv
        if len(caught) != 1:
            raise LoadgenError("the benchmark module's cli_main did not call run_benchmark once")
        return caught[0]

    def prepare(self, argvs: list[list[str]]) -> int:
        """Build the disk-cached datasets of these points as their run_benchmark would (same seeding, same
        get_dataset), so that each point loads its dataset; returns how many were built or found."""
        import numpy as np

        count = 0
        for argv in argvs:
            args = self.parse(argv)
            if args.dataset_name not in DISK_CACHED_DATASETS:
                continue
            random.seed(args.seed)
            np.random.seed(args.seed)
            self.mod.get_dataset(args, self.mod.get_tokenizer(args.tokenizer or args.model),
                                 args.served_model_name or args.model)
            count += 1
        return count

    def run_point(self, argv: list[str], requests_file: Path) -> dict[str, float]:
        """Run one point; write its per-request rows to requests_file; return the module's totals."""
        args = self.parse(argv)
        self.outputs, self.warmups = [], args.warmup_requests
        settle_garbage_collector()
        self.clock_s = time.time() - time.perf_counter()  # the module stamps perf_counter; records carry unix s
        try:
            with open(completed_file(requests_file), "w", encoding="utf-8") as self.completed:
                result = self.mod.run_benchmark(args)
        except SystemExit as exc:  # it exits when the server is not ready
            raise LoadgenError(f"the benchmark exited ({exc.code}) — server not ready?") from None
        finally:
            self.completed = None
        measured = self.outputs[args.warmup_requests:]  # the warm-up requests all finish before the first measured
        if len(measured) != len(result["ttfts"]):
            raise LoadgenError(f"{len(measured)} request outputs kept but the benchmark reports "
                               f"{len(result['ttfts'])}")
        measured.sort(key=lambda o: o.start_time)  # by start: the order of a request log
        files.write_jsonl_atomic(requests_file, [request_row(o, self.clock_s) for o in measured])
        completed_file(requests_file).unlink()  # the requests file holds them all now
        return {key: float(result.get(key) or 0.0) for key in SUMMARY_KEYS}


def settle_garbage_collector() -> None:
    """Collect, then freeze what is alive (the module's imports, tokenizer and datasets: ~1 million objects on the
    H200 host), so that a full collection during the point walks only the point's own objects. Unfrozen, this
    process paused up to ~0.5 s at a time, once inside a measured agent c=128 point: every stream in flight then
    read its next chunk that much later, and the pause was counted as the server's TTFT and ITL."""
    gc.collect()
    gc.freeze()


def request_row(output: Any, clock_s: float) -> dict[str, Any]:
    """One request as a RequestRecord dict (llmhost.bench.records); failed requests keep their error as data."""
    ok = bool(output.success)
    start_s = output.start_time + clock_s
    headers = getattr(output, "headers_time", None)
    return {"start_s": start_s, "end_s": start_s + output.latency if ok else None, "ok": ok,
            "error": str(output.error or "")[-2000:], "prompt_tokens": int(output.prompt_len or 0),
            "output_tokens": int(output.output_len or 0) if ok else 0,
            # a stream that broke keeps the gaps it saw: they must not enter ITL percentiles (the module drops them)
            "ttft_ms": output.ttft * 1000.0 if ok and output.ttft > 0 else None,
            "itl_ms": [x * 1000.0 for x in output.itl] if ok else [],
            "e2e_ms": output.latency * 1000.0 if ok else 0.0,
            "cached_tokens": int(output.cached_tokens or 0) if ok else None,
            "headers_ms": (headers - output.start_time) * 1000.0 if ok and headers is not None else None}


# --- the process ------------------------------------------------------------------------------------------------

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


def load(module_name: str) -> Generator:
    """Import the module (the deprecated path re-exports: hook where the code lives) and check its API."""
    mod = importlib.import_module(module_name)
    mod = sys.modules[getattr(getattr(mod, "cli_main", None), "__module__", module_name)]
    problem = api_problem(mod)
    if problem:
        raise LoadgenError(f"SGLang {installed_version()} has a benchmark API this toolkit does not drive "
                           f"({module_name}: {problem}); it was verified with SGLang {VERIFIED_VERSION} — "
                           f"install that (./setup_host.sh) or point SGLANG_PYTHON at it")
    return Generator(mod)


def serve(gen: Generator, commands: io.TextIOBase, answer: Callable[[dict], None]) -> None:
    for line in commands:
        try:
            cmd = json.loads(line)
            if "prepare" in cmd:
                started = time.monotonic()
                count = gen.prepare([list(argv) for argv in cmd["prepare"]])
                answer({"ok": True, "prepared": count, "seconds": round(time.monotonic() - started, 1)})
                continue
            answer({"ok": True, "summary": gen.run_point(list(cmd["argv"]), Path(cmd["requests_file"]))})
        except LoadgenError as exc:
            answer({"ok": False, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a point's failure is data; the traceback goes to the log
            traceback.print_exc()
            answer({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})


def fast_event_loop() -> str:
    """Every asyncio.run of the module on uvloop when it is installed (SGLang depends on it), and the loop's name.
    One process streams every request of a point; the default loop's cost per streamed chunk would be counted in
    the TTFT and ITL it measures."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m llmhost.bench.loadgen MODULE  (JSON commands on stdin; --help says more)",
              file=sys.stderr)
        return 2
    die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the module's prints go to the log, not into the protocol
    sys.stdout = sys.stderr

    def answer(doc: dict) -> None:
        protocol.write(json.dumps(doc) + "\n")

    try:
        gen = load(argv[0])
    except (LoadgenError, ImportError) as exc:
        answer({"ready": False, "error": str(exc) if isinstance(exc, LoadgenError)
                else f"cannot import {argv[0]}: {exc}"})
        return 1
    version, loop = installed_version(), fast_event_loop()
    print(f"[loadgen] {argv[0]} {version}: every point in this process, on the {loop} event loop", file=sys.stderr)
    answer({"ready": True, "version": version, "event_loop": loop})
    serve(gen, sys.stdin, answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
