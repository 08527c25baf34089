"""Stand-in for SGLang 0.5.17's `sglang.benchmark.serving` (its load generator), for CPU tests.

The real one needs torch, transformers, a tokenizer and ~16 s of imports per run on a CI core; this keeps the parts
the toolkit drives, with the same names and signatures (read against the real 0.5.17 source):
  - the CLI subset below (each option exists in tests/captures/bench_serving_help.txt; anything else is
    "unrecognized arguments", exit 2); `cli_main()` parses and hands the Namespace to `run_benchmark(args_)`, which
    keeps it as the module global `args`, runs the async `benchmark(...)`, appends the --output-file JSONL line (real
    field names, per-request lists with --output-details, `cached_tokens` with --cache-report) and returns
    `result | result_details`;
  - `RequestFuncInput`, `RequestFuncOutput` (perf_counter `start_time`, `cached_tokens`), `ASYNC_REQUEST_FUNCS`
    called as `request_func(request_func_input=..., pbar=...)`, each opening one `_create_bench_client_session()`
    per request and streaming through `async with session.post(url=..., json=..., headers=...)`, `get_tokenizer`,
    `check_chat_template`, `_combine_openai_chat_content` (the chat reader times only what it returns: content and
    reasoning, not tool calls), `_extract_cache_from_sglext`;
  - the warm-up requests all finish before the measured ones start; --flush-cache after them; the 1 s pause;
    Poisson arrivals; --max-concurrency.
Datasets are made without a tokenizer, from the module-level `random` seeded with --seed like the real one:
random-ids sends random input_ids; generated-shared-prefix draws every group's system prompt first, then the
questions, then shuffles (so the same seed gives the same system prompts whatever the question count), and is
cached on disk like the real one (`get_dataset(args, tokenizer, model_id)`).

    PYTHONPATH=tests/standin python -m sglang.benchmark.serving --backend sglang --dataset-name random-ids \
        --num-prompts 8 --base-url http://127.0.0.1:30000 --output-file out.jsonl --output-details
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import json
import math
import os
import pathlib
import pickle
import random
import statistics
import sys
import time
import traceback
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

args: argparse.Namespace


@dataclass
class RequestFuncInput:
    prompt: object
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    lora_name: str | None
    image_data: list | None
    extra_request_body: dict
    timestamp: float | None = None
    routing_key: str | None = None


@dataclass
class RequestFuncOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list = field(default_factory=list)
    text_chunks: list = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0
    cached_tokens: int = 0
    cached_tokens_details: dict | None = None

    @staticmethod
    def init_new(request_func_input: RequestFuncInput) -> "RequestFuncOutput":
        return RequestFuncOutput(prompt_len=request_func_input.prompt_len)


@dataclass
class DatasetRow:
    prompt: object
    prompt_len: int
    output_len: int
    image_data: list | None = None
    extra_request_body: dict = field(default_factory=dict)
    timestamp: float | None = None
    routing_key: str | None = None


def get_tokenizer(pretrained_model_name_or_path: str) -> object:
    return object()  # the stand-in's datasets need no tokenizer


def check_chat_template(model_path: str) -> bool:
    return True


def _headers() -> dict:
    key = os.environ.get("OPENAI_API_KEY") or os.environ.get("API_KEY")
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}


def _combine_openai_chat_content(message: dict) -> str:
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return reasoning + (message.get("content") or "")


def _extract_cache_from_sglext(data: dict, output: RequestFuncOutput) -> None:
    details = (data.get("sglext") or {}).get("cached_tokens_details")
    if details:
        output.cached_tokens = (details.get("device") or 0) + (details.get("host") or 0) + (details.get("storage") or 0)
        output.cached_tokens_details = details


class _Post:
    """`session.post(...)` as the request functions use it: `async with` returns the response once its headers are
    in (aiohttp's ClientResponse after start()); the body is then read line by line."""

    def __init__(self, url: str, payload: dict, headers: dict):
        self.url, self.payload, self.headers, self.conn = urllib.parse.urlsplit(url), payload, headers, None

    def _open(self) -> http.client.HTTPResponse:  # a thread: http.client blocks
        self.conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=600)
        self.conn.request("POST", self.url.path, body=json.dumps(self.payload), headers=self.headers)
        return self.conn.getresponse()

    async def __aenter__(self) -> http.client.HTTPResponse:
        return await asyncio.get_running_loop().run_in_executor(_POOL, self._open)

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()


class _Session:
    """What `_create_bench_client_session()` returns in 0.5.17 (an aiohttp.ClientSession, one per request), as far as
    the request functions use it."""

    async def __aenter__(self) -> "_Session":
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def post(self, url: str, json: dict, headers: dict | None = None) -> _Post:  # noqa: A002 - aiohttp's name
        return _Post(url, json, headers or {})


def _create_bench_client_session() -> _Session:
    return _Session()


def _read_events(resp: http.client.HTTPResponse, on_event) -> None:  # noqa: ANN001 - blocking SSE reader (a thread)
    if resp.status != 200:
        raise RuntimeError(f"{resp.reason}: {resp.read().decode(errors='replace')}")
    for raw in resp:
        line = raw.strip()
        if line.startswith(b"data: ") and line[6:] != b"[DONE]":
            on_event(json.loads(line[6:]))


async def _run(request_func_input: RequestFuncInput, payload: dict, on_chunk) -> RequestFuncOutput:  # noqa: ANN001
    """Stream payload; on_chunk(data, output, state) does the backend's bookkeeping (as in the real functions)."""
    async with _create_bench_client_session() as session:
        output = RequestFuncOutput.init_new(request_func_input)
        st = time.perf_counter()
        output.start_time = st
        state = {"st": st, "last": st, "tokens": 0, "latency": 0.0}

        def on_event(data: dict) -> None:
            state["latency"] = time.perf_counter() - st
            on_chunk(data, output, state)

        try:
            async with session.post(url=request_func_input.api_url, json=payload, headers=_headers()) as response:
                await asyncio.get_running_loop().run_in_executor(_POOL, _read_events, response, on_event)
            output.latency = state["latency"]
            output.success = True
        except Exception:  # recorded as data, like the real one
            output.error = "".join(traceback.format_exception(*sys.exc_info()))
    return output


async def async_request_sglang_generate(request_func_input: RequestFuncInput, pbar=None) -> RequestFuncOutput:  # noqa: ANN001
    prompt = request_func_input.prompt
    payload = {("text" if isinstance(prompt, str) else "input_ids"): prompt, "stream": True,
               "sampling_params": {"temperature": args.temperature, "max_new_tokens": request_func_input.output_len,
                                   "ignore_eos": not args.disable_ignore_eos},
               **request_func_input.extra_request_body}

    def on_chunk(data: dict, output: RequestFuncOutput, state: dict) -> None:
        meta = data.get("meta_info") or {}
        if args.cache_report:
            output.cached_tokens, output.cached_tokens_details = meta.get("cached_tokens", 0), meta.get(
                "cached_tokens_details")
        if not data.get("text"):
            return
        now, done = time.perf_counter(), meta["completion_tokens"]
        output.generated_text, output.output_len = data["text"], done
        if output.ttft == 0.0:
            output.ttft = now - state["st"]
        else:
            new = done - state["tokens"]
            if new == 0:
                return
            output.itl.extend([(now - state["last"]) / new] * new)
        state["last"], state["tokens"] = now, done

    return await _run(request_func_input, payload, on_chunk)


async def async_request_openai_chat_completions(request_func_input: RequestFuncInput, pbar=None) -> RequestFuncOutput:  # noqa: ANN001
    payload = {"model": request_func_input.model, "messages": [{"role": "user", "content": request_func_input.prompt}],
               "max_completion_tokens": request_func_input.output_len, "stream": True}
    if "temperature" not in request_func_input.extra_request_body:
        payload["temperature"] = 0.0
    if "ignore_eos" not in request_func_input.extra_request_body:
        payload["ignore_eos"] = not args.disable_ignore_eos
    payload.update(request_func_input.extra_request_body)

    def on_chunk(data: dict, output: RequestFuncOutput, state: dict) -> None:
        output.output_len = (data.get("usage") or {}).get("completion_tokens", request_func_input.output_len)
        if args.cache_report:
            _extract_cache_from_sglext(data, output)
        choices = data.get("choices") or []
        if not choices:
            return
        content = _combine_openai_chat_content(choices[0].get("delta") or {})
        if not content:
            return
        now = time.perf_counter()
        if output.ttft == 0.0:
            output.ttft = now - state["st"]
        else:
            output.text_chunks.append(content)
            output.itl.append(now - state["last"])
        state["last"] = now
        output.generated_text += content

    return await _run(request_func_input, payload, on_chunk)


ASYNC_REQUEST_FUNCS = {"sglang": async_request_sglang_generate, "sglang-native": async_request_sglang_generate,
                       "sglang-oai-chat": async_request_openai_chat_completions}
_BACKEND_API_PATHS = {"sglang": "/generate", "sglang-native": "/generate", "sglang-oai-chat": "/v1/chat/completions"}
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2048)


def get_dataset(args: argparse.Namespace, tokenizer: object, model_id: str | None = None) -> list[DatasetRow]:
    a = args
    if a.dataset_name == "random-ids":
        return [DatasetRow([random.randrange(100, 150_000) for _ in range(a.random_input_len)], a.random_input_len,
                           a.random_output_len) for _ in range(a.num_prompts)]
    # Like the real one: generated-shared-prefix datasets are pickled under ~/.cache/sglang/benchmark, keyed by seed
    # and sizes, and loaded from there (without drawing from the RNG) when present.
    cache = (pathlib.Path.home() / ".cache" / "sglang" / "benchmark"
             / f"gen_shared_prefix_{a.seed}_{a.gsp_num_groups}_{a.gsp_prompts_per_group}_{a.gsp_system_prompt_len}_"
               f"{a.gsp_question_len}_{a.gsp_output_len}_StandinTokenizer.pkl")
    if cache.exists():
        print(f"\nLoading cached generated input data from {cache}")
        return pickle.loads(cache.read_bytes())
    words = lambda n: " ".join(f"w{random.randrange(10_000)}" for _ in range(n))  # noqa: E731
    systems = [words(a.gsp_system_prompt_len) for _ in range(a.gsp_num_groups)]
    rows = [DatasetRow(system + "\n\n" + words(a.gsp_question_len), a.gsp_system_prompt_len + a.gsp_question_len,
                       a.gsp_output_len) for system in systems for _ in range(a.gsp_prompts_per_group)]
    random.shuffle(rows)
    cache.parent.mkdir(parents=True, exist_ok=True)
    print(f"Caching generated input data to {cache}")
    cache.write_bytes(pickle.dumps(rows))
    return rows


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=_headers()), timeout=10) as resp:
            return resp.status, resp.read()
    except OSError:
        return 0, b""


def flush_server_cache(base_url: str, backend: str) -> None:
    req = urllib.request.Request(base_url + "/flush_cache", method="POST", headers=_headers())
    urllib.request.urlopen(req, timeout=10).close()  # raises on 400, like raise_for_status()


async def benchmark(backend: str, api_url: str, base_url: str, model_id: str, tokenizer: object,
                    input_requests: list[DatasetRow], request_rate: float, max_concurrency: int | None,
                    disable_tqdm: bool, lora_names: list | None, lora_request_distribution: str | None,
                    lora_zipf_alpha: float | None, extra_request_body: dict, profile: bool,
                    pd_separated: bool = False, flush_cache: bool = False, warmup_requests: int = 1) -> dict:
    request_func = ASYNC_REQUEST_FUNCS[backend]
    semaphore = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def limited_request_func(request_func_input: RequestFuncInput, pbar: object) -> RequestFuncOutput:
        if semaphore is None:
            return await request_func(request_func_input=request_func_input, pbar=pbar)
        async with semaphore:
            return await request_func(request_func_input=request_func_input, pbar=pbar)

    first = input_requests[0]
    test_input = RequestFuncInput(first.prompt, api_url, first.prompt_len, min(first.output_len, 32), model_id, None,
                                  None, extra_request_body)
    print(f"Starting warmup with {warmup_requests} sequences...")
    warm = await asyncio.gather(*(request_func(request_func_input=test_input) for _ in range(warmup_requests)))
    if warmup_requests > 0 and not any(o.success for o in warm):
        raise ValueError(f"Warmup failed - Please make sure benchmark arguments are correctly specified. Error: {warm[0].error}")
    if flush_cache:
        flush_server_cache(base_url, backend)
    time.sleep(1.0)
    start, tasks = time.perf_counter(), []
    for row in input_requests:
        inp = RequestFuncInput(row.prompt, api_url, row.prompt_len, row.output_len, model_id, None, None,
                               {**extra_request_body, **row.extra_request_body})
        tasks.append(asyncio.create_task(limited_request_func(request_func_input=inp, pbar=None)))
        if request_rate != float("inf"):
            await asyncio.sleep(random.expovariate(request_rate))
    outputs = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    status, body = _get(base_url + "/server_info")
    result = result_record(outputs, duration, json.loads(body) if status == 200 else None)
    print(f"Successful requests: {result['completed']}\nBenchmark duration (s): {duration:.2f}")
    details = {"input_lens": [o.prompt_len for o in outputs],
               "output_lens": [o.output_len if o.success else 0 for o in outputs],
               "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
               "generated_texts": [o.generated_text for o in outputs], "errors": [o.error for o in outputs]}
    if args.cache_report:
        details["cached_tokens"] = [o.cached_tokens for o in outputs]
        details["cached_tokens_details"] = [o.cached_tokens_details for o in outputs]
    with open(args.output_file or "bench.jsonl", "a") as out:
        out.write(json.dumps(result | details if args.output_details else result) + "\n")
    return result | details


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))] * 1000 if ordered else 0.0


def result_record(outs: list[RequestFuncOutput], duration: float, server_info: dict | None) -> dict:
    a = args
    ok = [o for o in outs if o.success]
    total_in, total_out = sum(o.prompt_len for o in ok), sum(o.output_len for o in ok)
    rec = {"tag": None, "backend": a.backend, "dataset_name": a.dataset_name, "request_rate": a.request_rate,
           "max_concurrency": a.max_concurrency, "random_input_len": a.random_input_len,
           "random_output_len": a.random_output_len, "server_info": server_info, "duration": duration,
           "completed": len(ok), "total_input_tokens": total_in, "total_output_tokens": total_out,
           "request_throughput": len(ok) / duration, "input_throughput": total_in / duration,
           "output_throughput": total_out / duration, "total_throughput": (total_in + total_out) / duration}
    series = {"e2e_latency": [o.latency for o in ok], "ttft": [o.ttft for o in ok],
              "itl": [x for o in ok for x in o.itl]}
    for name, values in series.items():
        rec[f"mean_{name}_ms"] = statistics.fmean(values) * 1000 if values else 0.0
        rec[f"median_{name}_ms"] = statistics.median(values) * 1000 if values else 0.0
        for q in (90, 95, 99):
            rec[f"p{q}_{name}_ms"] = _pct(values, q)
    rec["concurrency"] = sum(o.latency for o in ok) / duration
    return rec


def run_benchmark(args_: argparse.Namespace) -> dict:
    global args
    args = a = args_
    random.seed(a.seed)
    extra = json.loads(a.extra_request_body) if a.extra_request_body else {}
    if a.cache_report and a.backend == "sglang-oai-chat":
        extra["return_cached_tokens_details"] = True
    base_url = a.base_url or f"http://{a.host}:{a.port}"
    deadline = time.monotonic() + a.ready_check_timeout_sec
    while a.ready_check_timeout_sec > 0 and _get(base_url + "/v1/models")[0] != 200:
        if time.monotonic() > deadline:
            print(f"Server at {base_url}/v1/models is not ready. Exiting.")
            sys.exit(1)
        time.sleep(0.5)
    tokenizer = get_tokenizer(a.tokenizer or a.model)
    check_chat_template(a.model)
    rows = get_dataset(a, tokenizer, a.served_model_name or a.model)
    return asyncio.run(benchmark(
        backend=a.backend, api_url=base_url + _BACKEND_API_PATHS[a.backend], base_url=base_url,
        model_id=a.served_model_name or a.model, tokenizer=tokenizer, input_requests=rows,
        request_rate=a.request_rate, max_concurrency=a.max_concurrency, disable_tqdm=a.disable_tqdm, lora_names=None,
        lora_request_distribution=None, lora_zipf_alpha=None, extra_request_body=extra, profile=False,
        flush_cache=a.flush_cache, warmup_requests=a.warmup_requests))


def build_parser() -> argparse.ArgumentParser:
    """The stand-in's CLI (the real module builds its parser inside cli_main; tests read this one)."""
    p = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    p.add_argument("--backend", choices=list(ASYNC_REQUEST_FUNCS), default="sglang")
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--ready-check-timeout-sec", type=int, default=60)
    p.add_argument("--dataset-name", choices=["random-ids", "generated-shared-prefix"], default="random-ids")
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--tokenize-prompt", action="store_true")  # the stand-in always sends random-ids as ids
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--output-file", default=None)
    p.add_argument("--output-details", action="store_true")
    p.add_argument("--cache-report", action="store_true")
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--disable-ignore-eos", action="store_true")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extra-request-body", default=None)
    p.add_argument("--flush-cache", action="store_true")
    p.add_argument("--warmup-requests", type=int, default=1)
    for name, default in (("num-groups", 64), ("prompts-per-group", 16), ("system-prompt-len", 2048),
                          ("question-len", 128), ("output-len", 256)):
        p.add_argument(f"--gsp-{name}", type=int, default=default)
    return p


def cli_main() -> None:
    run_benchmark(build_parser().parse_args())


if __name__ == "__main__":
    cli_main()
