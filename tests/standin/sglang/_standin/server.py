"""HTTP layer of the stand-in: routes, API-key auth, JSON and SSE (chunked) responses, access log lines.

Routes and bodies follow tests/captures/ (SGLang 0.5.17 behind uvicorn). Auth mirrors sglang/srt/utils/auth.py:
with --api-key every route except /health* and /metrics* needs `Authorization: Bearer <key>`, else 401
{"error": "Unauthorized"}. /metrics exists only with --enable-metrics; usage.prompt_tokens_details only with
--enable-cache-report (both as in the real server).
"""
from __future__ import annotations

import json
import os
import random
import secrets
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from . import api, engine, metrics


def log(msg: str, ranks: str = "") -> None:
    """SGLang's log line; `ranks`: a scheduler's rank tags inside the stamp (" TP0", " DP0 TP0"), as its logger has."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{ranks}] {msg}", file=sys.stderr, flush=True)


def scheduler_ranks(tp_size: int, dp_size: int) -> str:
    """Rank 0's tags in SGLang 0.5.17's scheduler log lines: DP when a data-parallel controller launched it, TP when
    there are several tensor-parallel ranks (sglang/srt/managers/scheduler.py, run_scheduler_process)."""
    return (" DP0" if dp_size > 1 else "") + (" TP0" if tp_size > 1 else "")


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class State:
    """Everything the handler threads share."""

    def __init__(self, settings: dict, eng: engine.Engine, server_info: dict, model_info: dict):
        self.s = settings
        self.engine = eng
        self.server_info = server_info
        self.model_info = model_info
        self.ready = threading.Event()
        self.template = metrics.Template() if settings["enable_metrics"] else None
        self.lock = threading.Lock()
        self.http: Counter = Counter()
        self.http_status: Counter = Counter()
        self.active: Counter = Counter()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    state: State  # set on the subclass made by make_server

    def version_string(self) -> str:
        return "uvicorn"
    # --- plumbing -------------------------------------------------------------------------------------------
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    def log_request(self, code: object = "-", size: object = "-") -> None:
        code = int(code) if str(code).isdigit() else 0
        phrase = self.responses.get(code, ("",))[0]
        host, port = self.client_address[:2]
        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] INFO:     {host}:{port} - \"{self.command} {self.path} "
              f"HTTP/1.1\" {code} {phrase}", flush=True)
        key = (self.path.split("?")[0], self.command)
        with self.state.lock:
            self.state.http[key] += 1
            self.state.http_status[key + (str(code),)] += 1

    def send_body(self, code: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("vary", "Origin")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, obj: object) -> None:
        self.send_body(code, dumps(obj))

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("vary", "Origin")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_event(self, payload: object) -> None:
        """One `data: ...\\n\\n` event as one HTTP chunk; raises OSError when the client went away."""
        data = b"data: " + (payload if isinstance(payload, bytes) else dumps(payload)) + b"\n\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.write_event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def read_json(self) -> object:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except ValueError:
            raise api.BadRequest(f"1 validation error:\n  {{'type': 'json_invalid', 'loc': ('body', 0), "
                                 f"'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': 'Expecting value'}}}}")

    # --- dispatch ---------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self.dispatch()

    def do_POST(self) -> None:
        self.dispatch()

    def do_PUT(self) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        path = self.path.split("?")[0]
        methods = ROUTES.get(path)
        if methods is None:
            return self.send_json(404, {"detail": "Not Found"})
        if self.command not in methods:
            return self.send_json(405, {"detail": "Method Not Allowed"})
        key = self.state.s["api_key"]
        if key and not path.startswith(("/health", "/metrics")) and not self.authorized(key):
            return self.send_json(401, {"error": "Unauthorized"})
        with self.state.lock:
            self.state.active[(path, self.command)] += 1
        try:
            methods[self.command](self)
        except api.BadRequest as exc:
            self.send_json(400, api.error_body(str(exc)))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with self.state.lock:
                self.state.active[(path, self.command)] -= 1

    def authorized(self, key: str) -> bool:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, key)

    # --- native routes ----------------------------------------------------------------------------------------
    def health(self) -> None:
        if not self.state.ready.is_set():
            return self.send_body(503, b"", None)
        if self.path.startswith("/health_generate"):
            time.sleep(self.state.engine.timing.ttft_ms / 1000)  # why: the real one runs a 1-token generation
        # why: SGLang 0.5.17 answers both after `await asyncio.sleep(1)`, then looks at its test generation
        time.sleep(float(os.environ.get("STANDIN_HEALTH_S") or 0))
        self.send_body(200, b"", None)

    def models(self) -> None:
        name = self.state.s["served_model_name"]
        self.send_json(200, {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
            "parent": None, "max_model_len": self.state.s["context_len"]}]})

    def server_info(self) -> None:
        if self.path.startswith("/get_server_info"):
            log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                "Please use '/server_info' instead.")
        self.send_json(200, self.state.server_info)

    def model_info(self) -> None:
        self.send_json(200, self.state.model_info)

    def metrics(self) -> None:
        st = self.state
        if st.template is None:
            return self.send_json(404, {"detail": "Not Found"})
        with st.lock:
            http, status, active = Counter(st.http), Counter(st.http_status), Counter(st.active)
        text = metrics.render(st.template, st.s["served_model_name"], st.engine, http, status, active)
        self.send_body(200, text.encode(), metrics.CONTENT_TYPE)

    def flush_cache(self) -> None:
        eng = self.state.engine
        if eng.flush():
            eng.log("Cache flushed successfully!")
            return self.send_body(200, b"Cache flushed.\nPlease check backend logs for more details. (When there "
                                       b"are running or waiting requests, the operation will not be performed.)\n",
                                  None)
        with eng.lock:
            eng.log(f"Cache not flushed because there are pending requests. #queue-req: {eng.queued}, "
                    f"#running-req: {len(eng.running)}")
        self.send_body(400, b"Flush cache failed.\n", None)

    def freeze_gc(self) -> None:
        # why: SGLang's /freeze_gc has the scheduler, detokenizer and this process call gc.freeze(), each logging it
        for process, say in (("Scheduler", self.state.engine.log), ("Detokenizer Manager", log),
                             ("Tokenizer Manager", log)):
            say(f"Freezing GC in {process} process. gen0: 412->0, gen1: 1830->0, gen2: 1204518->0")
        self.send_body(200, b"Garbage collection frozen.\n", None)

    def start_profile(self) -> None:
        body = self.read_json() if self.command == "POST" else None
        self.state.engine.profiler.start(body if isinstance(body, dict) else {})
        self.send_body(200, b"Start profiling.\n", None)

    # --- generation routes ------------------------------------------------------------------------------------
    def new_request(self, prompt: list[int], max_tokens: int, body: dict, stream: bool) -> engine.Request:
        seed = body.get("seed") if isinstance(body.get("seed"), int) else random.getrandbits(32)
        return engine.Request(api.new_id(), prompt, max_tokens, seed, stream)

    def run_stream(self, req: engine.Request, emit: Callable[[int, str], None]) -> bool:
        """Drive the engine, calling emit(i, piece); False when the client disconnected (request aborted)."""
        cancelled = threading.Event()
        gen = self.state.engine.run(req, cancelled)
        try:
            for i, piece in enumerate(gen):
                emit(i, piece)
        except OSError:
            cancelled.set()
            gen.close()
            self.close_connection = True
            return False
        return True

    def chat(self) -> None:
        body = self.read_json()
        plan = api.plan_chat(body, self.state.s["context_len"])
        model = body.get("model", "default")  # SGLang's DEFAULT_MODEL_NAME when the field is absent
        req = self.new_request(plan.prompt, plan.max_tokens, body, bool(body.get("stream")))
        report = self.state.s["enable_cache_report"]
        if not body.get("stream"):
            pieces = list(self.state.engine.run(req))
            message, reasoning = api.chat_message(plan, pieces)
            use = api.usage(len(req.prompt), len(pieces), req.cached_tokens, reasoning, report)
            return self.send_json(200, api.chat_response(req.rid, model, message, use))

        def emit(i: int, piece: str) -> None:
            if i == 0:  # SGLang 0.5.17's chat route sends its headers with the first chunk, the role chunk after the
                self.start_stream()  # first token (serving_chat awaits its generator before the StreamingResponse)
                self.write_event(api.chat_chunk(req.rid, model, {"reasoning_content": None, "role": "assistant",
                                                                 "content": ""}))
            for delta, tool_mode in api.chat_stream_deltas(plan, piece, i):
                self.write_event(api.chat_chunk(req.rid, model, delta, tool_mode=tool_mode))

        if not self.run_stream(req, emit):
            return
        if not req.output:  # no token at all: the headers have not gone yet
            self.start_stream()
        self.write_event(api.chat_chunk(req.rid, model, {"reasoning_content": None}, finish="length"))
        if body.get("return_cached_tokens_details") and req.cached_tokens > 0:  # SGLang's sglext chunk
            self.write_event({"id": req.rid, "object": "chat.completion.chunk", "created": int(time.time()),
                              "model": model, "choices": [],
                              "sglext": {"cached_tokens_details": api.cached_details(req.cached_tokens)}})
        if plan.include_usage or self.state.s["default_include_usage"]:
            reasoning = len(req.output) if plan.thinking and not plan.tool_call and not plan.required else 0
            use = api.usage(len(req.prompt), len(req.output), req.cached_tokens, reasoning, report)
            self.write_event({"id": req.rid, "object": "chat.completion.chunk", "created": int(time.time()),
                              "model": model, "choices": [], "usage": use})
        self.end_stream()

    def completions(self) -> None:
        body = self.read_json()
        prompt, max_tokens = api.completion_prompt(body, self.state.s["context_len"])
        model = body.get("model", "default")  # SGLang's DEFAULT_MODEL_NAME when the field is absent
        req = self.new_request(prompt, max_tokens, body, bool(body.get("stream")))
        report = self.state.s["enable_cache_report"]
        if not body.get("stream"):
            text = "".join(self.state.engine.run(req))
            use = api.usage(len(prompt), len(req.output), req.cached_tokens, 0, report)
            return self.send_json(200, api.completion_response(req.rid, model, text, use))
        self.start_stream()
        if not self.run_stream(req, lambda i, p: self.write_event(api.completion_chunk(req.rid, model, p, None))):
            return
        self.write_event(api.completion_chunk(req.rid, model, "", "length"))
        if (body.get("stream_options") or {}).get("include_usage") or self.state.s["default_include_usage"]:
            use = api.usage(len(prompt), len(req.output), req.cached_tokens, 0, report)
            self.write_event({"id": req.rid, "object": "text_completion", "created": int(time.time()),
                              "model": model, "choices": [], "usage": use})
        self.end_stream()

    def generate(self) -> None:
        body = self.read_json()
        prompt, max_new = api.generate_prompt(body, self.state.s["context_len"])
        req = self.new_request(prompt, max_new, body, bool(body.get("stream")))
        if not body.get("stream"):
            text = "".join(self.state.engine.run(req))
            return self.send_json(200, {"text": text, "output_ids": [engine.piece_id(p) for p in req.output],
                                        "meta_info": api.generate_meta(req, True)})
        self.start_stream()

        def emit(i: int, piece: str) -> None:
            finished = len(req.output) == req.max_new_tokens
            self.write_event({"text": "".join(req.output), "output_ids": [engine.piece_id(p) for p in req.output],
                              "meta_info": api.generate_meta(req, finished)})

        if self.run_stream(req, emit):
            self.end_stream()


ROUTES: dict[str, dict[str, Callable[[Handler], None]]] = {
    "/health": {"GET": Handler.health},
    "/health_generate": {"GET": Handler.health},
    "/v1/models": {"GET": Handler.models},
    "/server_info": {"GET": Handler.server_info},
    "/get_server_info": {"GET": Handler.server_info},
    "/model_info": {"GET": Handler.model_info},
    "/get_model_info": {"GET": Handler.model_info},
    "/metrics": {"GET": Handler.metrics},
    "/flush_cache": {"GET": Handler.flush_cache, "POST": Handler.flush_cache},
    "/freeze_gc": {"GET": Handler.freeze_gc, "POST": Handler.freeze_gc},
    "/start_profile": {"GET": Handler.start_profile, "POST": Handler.start_profile},
    "/v1/chat/completions": {"POST": Handler.chat},
    "/v1/completions": {"POST": Handler.completions},
    "/generate": {"POST": Handler.generate, "PUT": Handler.generate},
}


def make_server(state: State) -> ThreadingHTTPServer:
    """Bind host:port (raises OSError like uvicorn's bind failure); handler threads are daemons."""
    handler = type("StandinHandler", (Handler,), {"state": state})
    # why: socketserver's listen backlog is 5; a load generator opening 64 connections at once would see resets
    # that uvicorn (backlog 2048) never gives
    server_cls = type("StandinHTTPServer", (ThreadingHTTPServer,), {"request_queue_size": 2048})
    server = server_cls((state.s["host"], state.s["port"]), handler)
    server.daemon_threads = True
    return server
