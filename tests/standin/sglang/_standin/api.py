"""Request parsing and response shapes of SGLang 0.5.17's OpenAI and native routes, copied from tests/captures/.

Behaviour of random weights (what the captures show): the reply never leaves the <think> block, so with thinking on
(default) all text is `reasoning_content` and `content` is ""; with `chat_template_kwargs: {"enable_thinking":
false}` the text is `content`. Tools: `auto` never calls one; `required` returns content "" and no call (as
captured); a named `tool_choice` with thinking off streams a real call (arguments "{}", then free text), as
chat_tool_named_stream.txt shows, while the same request unstreamed returns no call: SGLang parses the whole output
as a JSON array, which random weights cut off at max_tokens (seen on an H200). Generation never hits EOS, so finish_reason is "length".
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import engine

DEFAULT_MAX_TOKENS = 128  # why: the real server would generate up to the context length with random weights
TOOL_CALL_TOKENS = 12  # tokens a `<tool_call>{...}</tool_call>` block costs (Qwen3 tokenizer, measured roughly)
_HTTP_SERVER = str(Path(__file__).resolve().parents[1] / "srt" / "entrypoints" / "http_server.py")


class BadRequest(Exception):
    """A request SGLang rejects with 400 and {"object": "error", ...}."""


def error_body(message: str, code: int = 400, kind: str = "Bad Request") -> dict:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def validation_error(route: str, func: str, err: dict) -> BadRequest:
    """The message text FastAPI/SGLang produce for one pydantic error (see chat_bad_body.txt)."""
    line = repr(err)
    return BadRequest(f"1 validation error:\n  {line}\n\n  File \"{_HTTP_SERVER}\", line 1702, in {func}\n"
                      f"    POST {route} [{line}]")


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class ChatPlan:
    """What one chat request will produce: prompt tokens, budget, and the reply's mode."""
    prompt: list[int]
    max_tokens: int
    thinking: bool
    tool_call: str | None  # function name to call, or None
    required: bool
    include_usage: bool
    tool_args: str = "{}"  # the call's arguments as the model writes them
    natural: bool = False  # tool_choice auto and the model chose the call (STANDIN_NATURAL_TOOL_ARGUMENTS)


def _text(content: object) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def render_chat(messages: list, tools: list | None, thinking: bool) -> str:
    """A Qwen3-style chat template: system (+ tools), turns, then the assistant header."""
    out = []
    system = ""
    if messages and messages[0].get("role") == "system":
        system = _text(messages[0].get("content"))
        messages = messages[1:]
    if tools:
        specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        system = (system + "\n\n" if system else "") + (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{specs}\n</tools>")
    if system:
        out.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for msg in messages:
        role = msg.get("role", "user")
        body = _text(msg.get("content"))
        if role == "tool":
            out.append(f"<|im_start|>user\n<tool_response>\n{body}\n</tool_response><|im_end|>\n")
            continue
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            body += f"\n<tool_call>\n{{\"name\": \"{fn.get('name')}\", \"arguments\": {fn.get('arguments')}}}\n</tool_call>"
        out.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    if not thinking:
        out.append("<think>\n\n</think>\n\n")
    return "".join(out)


def plan_chat(body: object, context_len: int) -> ChatPlan:
    """Validate a /v1/chat/completions body the way SGLang's pydantic model does, and plan the reply."""
    route, func = "/v1/chat/completions", "openai_v1_chat_completions"
    if not isinstance(body, dict):
        raise validation_error(route, func, {"type": "model_attributes_type", "loc": ("body",),
                                             "msg": "Input should be a valid dictionary or object to extract fields from",
                                             "input": body})
    if "messages" not in body:
        raise validation_error(route, func, {"type": "missing", "loc": ("body", "messages"),
                                             "msg": "Field required", "input": body})
    messages = body["messages"]
    if not isinstance(messages, list):
        raise validation_error(route, func, {"type": "list_type", "loc": ("body", "messages"),
                                             "msg": "Input should be a valid list", "input": messages})
    if not messages:
        raise BadRequest("Messages cannot be empty.")
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("enable_thinking", True))
    tools = body.get("tools") or None
    choice = body.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    calls_disabled = os.environ.get("STANDIN_NO_TOOL_CALLS") == "1"
    # STANDIN_NATURAL_TOOL_ARGUMENTS: behave like real weights, which call a fitting tool under tool_choice auto
    natural_args = os.environ.get("STANDIN_NATURAL_TOOL_ARGUMENTS")
    natural = bool(tools and natural_args and choice in (None, "auto") and not calls_disabled)
    if natural:
        named = tools[0].get("function", {}).get("name")
    prompt = engine.tokenize(render_chat(messages, tools, thinking))
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    _check_length(len(prompt), int(max_tokens), context_len)
    stream_options = body.get("stream_options") or {}
    named_call = bool(tools and named and not thinking and not calls_disabled)
    return ChatPlan(prompt=prompt, max_tokens=int(max_tokens), thinking=thinking,
                    tool_call=named if natural or named_call else None,
                    required=bool(tools) and choice == "required",
                    include_usage=bool(stream_options.get("include_usage")),
                    tool_args=natural_args if natural else os.environ.get("STANDIN_TOOL_ARGUMENTS", "{}"),
                    natural=natural)


def _check_length(prompt_len: int, max_tokens: int, context_len: int) -> None:
    if prompt_len >= context_len:
        raise BadRequest(f"The input ({prompt_len} tokens) is longer than the model's context length "
                         f"({context_len} tokens).")
    if max_tokens < 0:
        raise BadRequest("max_tokens must be at least 0")


def usage(prompt: int, completion: int, cached: int, reasoning: int, cache_report: bool) -> dict:
    details = {"cached_tokens": cached} if cache_report and cached > 0 else None
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": details, "reasoning_tokens": reasoning}


def tool_call(name: str, index: int = 0, arguments: str = "{}") -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "index": index, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def chat_message(plan: ChatPlan, pieces: list[str]) -> tuple[dict, int]:
    """(message, reasoning_tokens) of a finished non-stream reply."""
    text = "".join(pieces)
    if plan.required:
        return {"role": "assistant", "content": "", "reasoning_content": None, "tool_calls": None}, 0
    if plan.natural:  # the parser found the model's call in the finished output
        call = tool_call(plan.tool_call or "", arguments=plan.tool_args)
        return {"role": "assistant", "content": None, "reasoning_content": None, "tool_calls": [call]}, 0
    if plan.thinking:
        return {"role": "assistant", "content": "", "reasoning_content": text, "tool_calls": None}, len(pieces)
    return {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}, 0


def chat_response(rid: str, model: str, message: dict, use: dict) -> dict:
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "length",
                         "matched_stop": None}],
            "usage": use, "metadata": {"weight_version": "default"}}


def chat_chunk(rid: str, model: str, delta: dict, finish: str | None = None, tool_mode: bool = False) -> dict:
    """One SSE chunk; tool-call mode chunks carry every delta key and `usage: null` (chat_tool_named_stream.txt)."""
    chunk = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                          "matched_stop": None}]}
    if tool_mode:
        chunk["usage"] = None
    return chunk


def chat_stream_deltas(plan: ChatPlan, piece: str, index: int) -> list[tuple[dict, bool]]:
    """Deltas (and whether they are tool-mode shaped) for output piece number `index`."""
    if plan.required:
        return []
    if plan.tool_call:
        if index == 0:
            call = tool_call(plan.tool_call)
            call["function"]["arguments"] = ""
            return [({"role": None, "content": None, "reasoning_content": None, "tool_calls": [call]}, True)]
        if index == 1:
            # STANDIN_TOOL_ARGUMENTS: what random weights put there ("{}" captured; "-80292" also seen on an H200)
            args = {"id": None, "index": 0, "type": "function",
                    "function": {"name": None, "arguments": plan.tool_args}}
            return [({"role": None, "content": None, "reasoning_content": None, "tool_calls": [args]}, True)]
        if index < TOOL_CALL_TOKENS:
            return []
        return [({"role": None, "content": piece, "reasoning_content": None, "tool_calls": None}, True)]
    if plan.thinking:
        return [({"reasoning_content": piece}, False)]
    return [({"reasoning_content": None, "content": piece}, False)]


def completion_response(rid: str, model: str, text: str, use: dict) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                         "matched_stop": None}],
            "usage": use, "metadata": {"weight_version": "default"}}


def completion_chunk(rid: str, model: str, text: str, finish: str | None) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                         "matched_stop": None}]}


def completion_prompt(body: object, context_len: int) -> tuple[list[int], int]:
    route, func = "/v1/completions", "openai_v1_completions"
    if not isinstance(body, dict) or "prompt" not in body:
        raise validation_error(route, func, {"type": "missing", "loc": ("body", "prompt"),
                                             "msg": "Field required", "input": body})
    prompt = body["prompt"]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        tokens = list(prompt)
    elif isinstance(prompt, list):
        tokens = engine.tokenize("".join(map(str, prompt)))
    else:
        tokens = engine.tokenize(str(prompt))
    max_tokens = int(body.get("max_tokens") or 16)  # OpenAI's completions default
    _check_length(len(tokens), max_tokens, context_len)
    return tokens, max_tokens


def generate_prompt(body: object, context_len: int) -> tuple[list[int], int]:
    """/generate: `text` or `input_ids`, `sampling_params.max_new_tokens` (SGLang's default is 128)."""
    if not isinstance(body, dict) or ("text" not in body and "input_ids" not in body):
        raise BadRequest("Either text or input_ids should be provided.")
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        ids = ids[0]
    tokens = list(ids) if ids is not None else engine.tokenize(str(body["text"]))
    params = body.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", 128))
    _check_length(len(tokens), max_new, context_len)
    return tokens, max_new


def cached_details(cached: int) -> dict | None:
    """SGLang's per-request cache breakdown: all device hits here (no host or storage tier); None without hits."""
    return {"device": cached, "host": 0} if cached > 0 else None


def generate_meta(req: engine.Request, finished: bool) -> dict:
    meta = {"id": req.rid, "finish_reason": {"type": "length", "length": len(req.output)} if finished else None,
            "prompt_tokens": len(req.prompt), "weight_version": "default", "num_retractions": 0,
            "forward_entry_time": req.started_ts, "prefill_finished_time": req.first_token_ts,
            "queue_time": req.started_ts - req.received_ts, "reasoning_tokens": 0,
            "completion_tokens": len(req.output), "cached_tokens": req.cached_tokens,
            "cached_tokens_details": cached_details(req.cached_tokens), "dp_rank": None}
    now = time.time()
    if finished:
        decode_s = max(now - req.first_token_ts, 1e-9)
        meta.update(e2e_latency=now - req.received_ts, request_received_ts=req.received_ts,
                    api_server_dispatch_finish_ts=req.received_ts, response_sent_to_client_ts=now,
                    request_finished_ts=now, decode_throughput=(len(req.output) - 1) / decode_s)
    elif len(req.output) == 1:
        meta["response_sent_to_client_ts"] = now  # only the first chunk carries it (generate_stream.txt)
    return meta
