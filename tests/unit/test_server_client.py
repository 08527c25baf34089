"""llmhost.serve.endpoints.ServerClient through both transports (requests, and the stdlib fallback serve.sh uses
before any venv exists) against a recording server on 127.0.0.1: routes, methods, bodies, the API key header, and
failures as data (status 0 with the reason), never a raise."""
from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmhost.serve import endpoints
from llmhost.serve.endpoints import Reply, ServerClient


class Recorder:
    """Answers every request with `status` and a body naming the route; records (method, path, headers, body)."""

    def __init__(self, status: int = 200, delay_s: float = 0.0):
        self.seen: list[tuple[str, str, dict, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((self.command, self.path, dict(self.headers), body))
                time.sleep(delay_s)
                reply = f"{self.command} {self.path}".encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a client that timed out has gone; a traceback here would land in a later test's stderr

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(params=["requests", "urllib"])
def transport(request, monkeypatch):
    if request.param == "urllib":
        monkeypatch.setitem(sys.modules, "requests", None)  # `import requests` raises ImportError
    return request.param


@pytest.fixture
def recorder():
    servers: list[Recorder] = []

    def make(**kwargs) -> Recorder:
        servers.append(Recorder(**kwargs))
        return servers[-1]
    yield make
    for s in servers:
        s.httpd.shutdown()
        s.httpd.server_close()


def test_each_endpoint_is_its_route_and_method(transport, recorder):
    server = recorder()
    client = ServerClient(server.url + "/")  # a trailing slash is dropped
    calls = {"health": ("GET", "/health"), "health_generate": ("GET", "/health_generate"),
             "metrics": ("GET", "/metrics"), "server_info": ("GET", "/server_info"),
             "model_info": ("GET", "/model_info")}
    for name, (method, path) in calls.items():
        reply = getattr(client, name)()
        assert reply == Reply(200, f"{method} {path}") and reply.ok, name
    assert [(m, p) for m, p, _, _ in server.seen] == list(calls.values())
    assert all("Authorization" not in h for _, _, h, _ in server.seen)  # no key, no header


def test_freeze_gc_posts_with_the_key(transport, recorder):
    server = recorder()
    assert ServerClient(server.url, "k3y").freeze_gc() == Reply(200, "POST /freeze_gc")
    method, path, headers, body = server.seen[-1]
    assert (method, path, headers.get("Authorization"), body) == ("POST", "/freeze_gc", "Bearer k3y", b"")


def test_server_info_behind_the_router_falls_back_to_the_older_route(transport, recorder):
    server = recorder(status=404)
    assert ServerClient(server.url).server_info() == Reply(404, "GET /get_server_info")
    assert [p for _, p, _, _ in server.seen] == ["/server_info", "/get_server_info"]


def test_posts_send_json_or_an_empty_body_with_the_bearer_key(transport, recorder):
    server = recorder()
    client = ServerClient(server.url, api_key="k-1")
    assert client.post("/v1/x", {"a": 1}).text == "POST /v1/x"
    assert client.post("/flush_cache").ok
    assert client.get("/health").ok
    (m1, _, h1, b1), (m2, _, h2, b2), (m3, _, h3, b3) = server.seen
    assert (b1, b2, b3) == (b'{"a": 1}', b"", b"")
    assert h1["Content-Type"] == h2["Content-Type"] == "application/json" and "Content-Type" not in h3
    assert h1["Authorization"] == h2["Authorization"] == h3["Authorization"] == "Bearer k-1"


def test_an_http_error_is_a_reply_with_its_status_and_body(transport, recorder):
    reply = ServerClient(recorder(status=503).url).health()
    assert reply == Reply(503, "GET /health") and not reply.ok and reply.describe() == "503"


def test_no_server_is_status_zero_with_a_one_line_reason(transport, free_port):
    reply = ServerClient(f"http://127.0.0.1:{free_port}").health(timeout=2)
    assert reply.status == 0 and not reply.ok and "\n" not in reply.text
    assert reply.describe() == reply.text and "Connection" in reply.text and len(reply.text) < 260


def test_a_slow_answer_times_out_as_data(transport, recorder):
    reply = ServerClient(recorder(delay_s=2.0).url).metrics(timeout=0.3)
    assert reply.status == 0 and "time" in reply.text.lower()


def test_the_json_body_parses_and_a_bad_one_raises_value_error():
    assert Reply(200, '{"a": [1]}').json() == {"a": [1]}
    with pytest.raises(ValueError):
        Reply(200, "not json").json()


def test_the_reason_is_the_innermost_connection_error_cut_to_one_line():
    try:
        try:
            raise ConnectionRefusedError("[Errno 111] refused\nsecond line")
        except ConnectionRefusedError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        assert endpoints._reason(outer) == "ConnectionRefusedError: [Errno 111] refused"
    assert endpoints._reason(ValueError("x" * 300)) == "ValueError: " + "x" * 200
    assert endpoints._reason(ValueError()) == "ValueError: "
