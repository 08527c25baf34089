"""What one request of SGLang's load generator becomes in requests/<point>.jsonl (loadgen.request_row), exactly:
seconds on the module's perf_counter clock to milliseconds and Unix seconds, a failed request's error kept and its
timings left out of every percentile, a tool-call delta's text, which route's headers are timed, and the API check
that names what a newer benchmark module changed (a point run in process: test_loadgen.py)."""
from __future__ import annotations

import dataclasses
import types

import pytest

from llmhost.bench import loadgen
from llmhost.bench.records import RequestRecord


@dataclasses.dataclass
class Output:  # the fields of sglang.benchmark.serving.RequestFuncOutput (0.5.17) that request_row reads
    success: bool = True
    error: str = ""
    start_time: float = 10.0
    latency: float = 2.5
    ttft: float = 0.125
    itl: list = dataclasses.field(default_factory=lambda: [0.004, 0.0055])
    prompt_len: int = 4321
    output_len: int = 3
    cached_tokens: int = 4096


def test_a_finished_request_in_unix_seconds_and_milliseconds():
    out = Output()
    out.headers_time = 10.0625
    row = loadgen.request_row(out, 1_700_000_000.0)
    assert row == {"start_s": 1_700_000_010.0, "end_s": 1_700_000_012.5, "ok": True, "error": "",
                   "prompt_tokens": 4321, "output_tokens": 3, "ttft_ms": 125.0, "itl_ms": [4.0, 5.5],
                   "e2e_ms": 2500.0, "cached_tokens": 4096, "headers_ms": 62.5}
    assert RequestRecord.from_dict(row).ttft_ms == 125.0  # what the reader accepts


def test_a_failed_request_keeps_its_error_and_prompt_but_no_timing_enters_a_percentile():
    out = Output(success=False, error="x" * 1990 + "Connection reset by peer", output_len=7, cached_tokens=9)
    out.headers_time = 10.5
    row = loadgen.request_row(out, 100.0)
    assert row["ok"] is False and row["start_s"] == 110.0 and row["end_s"] is None
    assert row["error"] == ("x" * 1990 + "Connection reset by peer")[-2000:] and len(row["error"]) == 2000
    assert row["error"].endswith("Connection reset by peer")  # the end of a long error is the cause
    assert row["prompt_tokens"] == 4321 and row["output_tokens"] == 0
    assert row["ttft_ms"] is None and row["itl_ms"] == [] and row["e2e_ms"] == 0.0  # the gaps it saw stay out
    assert row["cached_tokens"] is None and row["headers_ms"] is None
    RequestRecord.from_dict(row)


def test_no_first_token_is_no_ttft_and_missing_counts_are_zero():
    out = Output(ttft=0.0, error=None, prompt_len=None, output_len=None, cached_tokens=None)
    row = loadgen.request_row(out, 0.0)
    assert row["ttft_ms"] is None and row["error"] == ""
    assert row["prompt_tokens"] == 0 and row["output_tokens"] == 0 and row["cached_tokens"] == 0
    assert row["headers_ms"] is None  # an output the wrapper never saw has no headers time
    RequestRecord.from_dict(row)


def test_a_tool_call_delta_is_text_and_an_empty_one_still_counts_as_a_token():
    assert loadgen.call_text({"function": {"name": "get_weather", "arguments": '{"city"'}}) == 'get_weather{"city"'
    assert loadgen.call_text({"function": {"arguments": ': "Oslo"}'}}) == ': "Oslo"}'
    assert loadgen.call_text({"function": {"name": None, "arguments": None}}) == "\x00"
    assert loadgen.call_text({"index": 0}) == "\x00" and loadgen.call_text("junk") == "\x00"
    text = loadgen.any_token_text(lambda m: m.get("content") or "")
    assert text({"content": "Hi"}) == "Hi"
    assert text({"content": "", "tool_calls": [{"function": {"name": "f"}}, {"function": {"arguments": "{}"}}]}) \
        == "f{}"


@pytest.mark.parametrize(("url", "first"), [("http://127.0.0.1:30000/generate", True),
                                            ("http://h:1/generate/", True),
                                            ("http://127.0.0.1:30000/v1/chat/completions", False),
                                            ("http://h:1/generate_stream", False)])
def test_only_the_native_route_sends_headers_before_its_first_token(url, first):
    assert loadgen.headers_first(url) is first


MISSING = object()


def _module(**changes):
    """A module with the verified API (each function taking the verified parameters), then `changes`."""
    mod = types.SimpleNamespace()
    for name, params in loadgen.API.items():
        args = ", ".join((*params, "*rest")) if params else "*rest"
        scope: dict = {}
        exec(f"def {name}({args}): pass", scope)
        setattr(mod, name, scope[name])
    mod.RequestFuncOutput = Output
    mod.ASYNC_REQUEST_FUNCS = {"sglang": None, "sglang-oai-chat": None}  # exactly the two it wraps
    for key, value in changes.items():
        if value is MISSING:
            delattr(mod, key)
        else:
            setattr(mod, key, value)
    return mod


def test_the_verified_api_has_no_problem():
    assert loadgen.api_problem(_module()) == ""


def test_each_api_change_is_named():
    assert loadgen.api_problem(_module(get_dataset=None)) == "no get_dataset()"
    assert loadgen.api_problem(_module(cli_main=MISSING)) == "no cli_main()"
    assert loadgen.api_problem(_module(run_benchmark=lambda args: None)) \
        == "run_benchmark(args) instead of run_benchmark(args_)"
    assert loadgen.api_problem(_module(get_dataset=lambda args, tokenizer: None)) \
        == "get_dataset(args, tokenizer) instead of get_dataset(args, tokenizer, model_id)"

    @dataclasses.dataclass
    class Older:
        success: bool = True
        latency: float = 0.0

    problem = loadgen.api_problem(_module(RequestFuncOutput=Older))
    assert problem == "RequestFuncOutput lacks error, start_time, ttft, itl, prompt_len, output_len, cached_tokens"
    assert loadgen.api_problem(_module(RequestFuncOutput=dict)).startswith("RequestFuncOutput lacks success, ")
    assert loadgen.api_problem(_module(RequestFuncOutput=MISSING)).startswith("RequestFuncOutput lacks success, ")
    assert loadgen.api_problem(_module(ASYNC_REQUEST_FUNCS=MISSING)) \
        == "ASYNC_REQUEST_FUNCS lacks the sglang and sglang-oai-chat backends"
    assert loadgen.api_problem(_module(ASYNC_REQUEST_FUNCS={"sglang": None})) \
        == "ASYNC_REQUEST_FUNCS lacks the sglang and sglang-oai-chat backends"
    assert loadgen.api_problem(_module(ASYNC_REQUEST_FUNCS=["sglang", "sglang-oai-chat"])) \
        == "ASYNC_REQUEST_FUNCS lacks the sglang and sglang-oai-chat backends"
