"""Stand-in for `python -m sglang.benchmark.serving` (SGLang 0.5.17's load generator), for CPU tests.

The real one needs torch, transformers, a tokenizer and ~16 s of imports per run on a CI core; this keeps the parts
the toolkit drives, with the same names: the CLI subset below (each option exists in tests/captures/
bench_serving_help.txt; anything else is "unrecognized arguments", exit 2), the module layout a wrapper can hook
(`RequestFuncInput`, `RequestFuncOutput` with perf_counter `start_time`, `ASYNC_REQUEST_FUNCS`, `cli_main`), real
concurrent streaming HTTP (/generate and /v1/chat/completions), Poisson arrivals, --max-concurrency, warm-up,
--flush-cache, and the --output-file JSONL with the real field names (+ per-request lists with --output-details).
Datasets are made without a tokenizer: random-ids sends seeded random input_ids; generated-shared-prefix sends
seeded word prompts (groups x prompts-per-group, shared system prompt per group).

    PYTHONPATH=tests/standin python -m sglang.benchmark.serving --backend sglang --dataset-name random-ids \
        --num-prompts 8 --base-url http://127.0.0.1:30000 --output-file out.jsonl --output-details
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import http.client
import json
import math
import os
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
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0


@dataclass
class DatasetRow:
    prompt: object
    prompt_len: int
    output_len: int


def _headers() -> dict:
    key = os.environ.get("OPENAI_API_KEY") or os.environ.get("API_KEY")
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}


def _stream(api_url: str, payload: dict, on_event) -> None:  # noqa: ANN001 - blocking SSE reader (a thread)
    url = urllib.parse.urlsplit(api_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    try:
        conn.request("POST", url.path, body=json.dumps(payload), headers=_headers())
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{resp.reason}: {resp.read().decode(errors='replace')}")
        for raw in resp:
            line = raw.strip()
            if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                on_event(json.loads(line[6:]))
    finally:
        conn.close()


async def _run(request_func_input: RequestFuncInput, payload: dict, count_tokens) -> RequestFuncOutput:  # noqa: ANN001
    output = RequestFuncOutput(prompt_len=request_func_input.prompt_len)
    state = {"last": 0.0, "tokens": 0}
    st = time.perf_counter()
    output.start_time = st

    def on_event(data: dict) -> None:
        now, new = time.perf_counter(), count_tokens(data, state)
        if new <= 0:
            return
        if output.ttft == 0.0:
            output.ttft = now - st
        else:
            output.itl.extend([(now - state["last"]) / new] * new)
        state["last"] = now

    try:
        await asyncio.get_running_loop().run_in_executor(_POOL, _stream, request_func_input.api_url, payload, on_event)
        output.latency = time.perf_counter() - st
        output.output_len = state["tokens"]
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

    def count(data: dict, state: dict) -> int:
        done = data.get("meta_info", {}).get("completion_tokens", 0) if data.get("text") else state["tokens"]
        new, state["tokens"] = done - state["tokens"], max(done, state["tokens"])
        return new

    return await _run(request_func_input, payload, count)


async def async_request_openai_chat_completions(request_func_input: RequestFuncInput, pbar=None) -> RequestFuncOutput:  # noqa: ANN001
    payload = {"model": request_func_input.model, "messages": [{"role": "user", "content": request_func_input.prompt}],
               "max_completion_tokens": request_func_input.output_len, "stream": True, "temperature": 0.0,
               "ignore_eos": not args.disable_ignore_eos, **request_func_input.extra_request_body}

    def count(data: dict, state: dict) -> int:
        delta = (data.get("choices") or [{}])[0].get("delta") or {}
        new = int(bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")))
        state["tokens"] += new
        return new

    return await _run(request_func_input, payload, count)


ASYNC_REQUEST_FUNCS = {"sglang": async_request_sglang_generate, "sglang-native": async_request_sglang_generate,
                       "sglang-oai-chat": async_request_openai_chat_completions}
_API_PATHS = {"sglang": "/generate", "sglang-native": "/generate", "sglang-oai-chat": "/v1/chat/completions"}
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2048)


def sample_requests(a: argparse.Namespace) -> list[DatasetRow]:
    rng = random.Random(a.seed)
    if a.dataset_name == "random-ids":
        return [DatasetRow([rng.randrange(100, 150_000) for _ in range(a.random_input_len)], a.random_input_len,
                           a.random_output_len) for _ in range(a.num_prompts)]
    words = lambda n: " ".join(f"w{rng.randrange(10_000)}" for _ in range(n))  # noqa: E731
    rows = []
    for _ in range(a.gsp_num_groups):
        system = words(a.gsp_system_prompt_len)
        rows += [DatasetRow(system + "\n\n" + words(a.gsp_question_len), a.gsp_system_prompt_len + a.gsp_question_len,
                            a.gsp_output_len) for _ in range(a.gsp_prompts_per_group)]
    return rows


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=_headers()), timeout=10) as resp:
            return resp.status, resp.read()
    except OSError:
        return 0, b""


async def benchmark(base_url: str, rows: list[DatasetRow], a: argparse.Namespace, extra: dict) -> list[RequestFuncOutput]:
    request_func = ASYNC_REQUEST_FUNCS[a.backend]
    api_url = base_url + _API_PATHS[a.backend]
    model = a.served_model_name or a.model
    make = lambda row, out_len: RequestFuncInput(row.prompt, api_url, row.prompt_len, out_len, model, None, None, extra)  # noqa: E731
    print(f"Starting warmup with {a.warmup_requests} sequences...")
    warm = await asyncio.gather(*(request_func(make(rows[0], min(rows[0].output_len, 32))) for _ in range(a.warmup_requests)))
    if a.warmup_requests and not any(o.success for o in warm):
        raise ValueError(f"Warmup failed - Please make sure benchmark arguments are correctly specified. Error: {warm[0].error}")
    if a.flush_cache:
        req = urllib.request.Request(base_url + "/flush_cache", method="POST", headers=_headers())
        urllib.request.urlopen(req, timeout=10).close()  # raises on 400, like raise_for_status()
    semaphore = asyncio.Semaphore(a.max_concurrency) if a.max_concurrency else None

    async def limited(inp: RequestFuncInput) -> RequestFuncOutput:
        if semaphore is None:
            return await request_func(inp)
        async with semaphore:
            return await request_func(inp)

    rng, tasks = random.Random(a.seed), []
    for row in rows:
        tasks.append(asyncio.create_task(limited(make(row, row.output_len))))
        if a.request_rate != float("inf"):
            await asyncio.sleep(rng.expovariate(a.request_rate))
    return await asyncio.gather(*tasks)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))] * 1000 if ordered else 0.0


def result_record(a: argparse.Namespace, outs: list[RequestFuncOutput], duration: float, server_info: dict) -> dict:
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
    if a.output_details:
        rec |= {"input_lens": [o.prompt_len for o in outs], "output_lens": [o.output_len for o in outs],
                "ttfts": [o.ttft for o in outs], "itls": [o.itl for o in outs],
                "generated_texts": [o.generated_text for o in outs], "errors": [o.error for o in outs]}
    return rec


def run_benchmark(args_: argparse.Namespace) -> dict:
    global args
    args = a = args_
    base_url = a.base_url or f"http://{a.host}:{a.port}"
    deadline = time.monotonic() + a.ready_check_timeout_sec
    while a.ready_check_timeout_sec > 0 and _get(base_url + "/v1/models")[0] != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"Server at {base_url} not ready after {a.ready_check_timeout_sec}s")
        time.sleep(0.5)
    rows = sample_requests(a)
    extra = json.loads(a.extra_request_body) if a.extra_request_body else {}
    start = time.perf_counter()
    outs = asyncio.run(benchmark(base_url, rows, a, extra))
    duration = time.perf_counter() - start
    status, body = _get(base_url + "/server_info")
    rec = result_record(a, outs, duration, json.loads(body) if status == 200 else {})
    print(f"Successful requests: {rec['completed']}\nBenchmark duration (s): {duration:.2f}")
    with open(a.output_file or "bench.jsonl", "a") as out:
        out.write(json.dumps(rec) + "\n")
    return rec


def build_parser() -> argparse.ArgumentParser:
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
