"""The stand-in router answers its own routes as sglang-router 0.3.2 did on the H200 (tests/captures/router_routes.txt:
two workers behind it, every open route asked once): same status, same content type, same body or JSON keys."""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from standin import harness

# the router's own answers (a worker's, like /get_model_info and /generate, are the stand-in server's business)
OWN = ("/server_info", "/get_server_info", "/health_generate", "/health", "/liveness", "/readiness", "/v1/models",
       "/model_info", "/workers", "/get_loads", "/metrics")


def captured(captures) -> dict[tuple[str, str], tuple[int, str, str]]:
    """(method, path) -> (status, content type, body) from the capture's '=== METHOD path' blocks."""
    out = {}
    for block in captures.joinpath("router_routes.txt").read_text().split("=== ")[1:]:
        head, _, rest = block.partition("\n")
        method, path = head.split()
        headers, _, body = rest.partition("\n\n")
        lines = headers.splitlines()
        kinds = [h.split(": ", 1)[1] for h in lines if h.lower().startswith("content-type:")]
        out[(method, path)] = (int(lines[0].split()[1]), kinds[0] if kinds else "", body.strip())
    return out


def shape(body: str) -> object:
    """A JSON body's keys, recursively (first list element), with values dropped; a text body as it is."""
    def keys(value):
        if isinstance(value, dict):
            return {k: keys(v) for k, v in value.items()}
        if isinstance(value, list):
            return [keys(value[0])] if value else []
        return None
    try:
        return keys(json.loads(body))
    except ValueError:
        return body


def fake_worker(name: str) -> ThreadingHTTPServer:
    """A worker as far as the router looks at one: /health, and the /server_info and /model_info it reads when the
    worker joins (the fields it keeps, as SGLang 0.5.17 answers them)."""
    class Worker(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:
            info = {"/server_info": {"served_model_name": name, "model_path": "/tmp/qwen3-4b", "tp_size": 1,
                                     "dp_size": 1, "disaggregation_mode": "null", "load_balance_method": "round_robin"},
                    "/model_info": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}}.get(self.path)
            body = json.dumps(info).encode() if info else b"ok"
            self.send_response(200 if info or self.path == "/health" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    server = ThreadingHTTPServer(("127.0.0.1", harness.free_port()), Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def ask(port: int, method: str, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", reply.read().decode()
    finally:
        conn.close()


@pytest.fixture
def router_port(repo):
    workers = [fake_worker("qwen3-4b") for _ in range(2)]
    port = harness.free_port()
    urls = [f"http://127.0.0.1:{w.server_address[1]}" for w in workers]
    proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                             str(port), "--worker-urls", *urls, "--worker-startup-check-interval", "1",
                             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(harness.free_port())],
                            env={"PYTHONPATH": str(repo / "tests" / "standin")}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if json.loads(ask(port, "GET", "/readiness")[2]).get("healthy_workers") == 2:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        yield port
    finally:
        proc.kill()
        proc.wait()
        for w in workers:
            w.shutdown()


def test_the_routers_own_answers_match_the_captured_ones(router_port, captures):
    expected = captured(captures)
    assert set(OWN) <= {path for _, path in expected}
    for path in OWN:
        status, kind, body = expected[("GET", path)]
        got = ask(router_port, "GET", path)
        assert (got[0], got[1].split(";")[0]) == (status, kind.split(";")[0]), (path, got)
        assert shape(got[2]) == shape(body), (path, got[2], body)


def test_health_generate_does_not_generate_and_fails_without_a_healthy_worker(repo):
    """sglang-router 0.3.2 answers /health_generate itself: 200 once any worker passed a health check, whatever a
    generation would do — readiness must ask each worker for a token (llmhost/serve/readiness.py)."""
    port = harness.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                             str(port), "--worker-urls", f"http://127.0.0.1:{harness.free_port()}",
                             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(harness.free_port())],
                            env={"PYTHONPATH": str(repo / "tests" / "standin")}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                got = ask(port, "GET", "/health_generate")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert got[:1] == (503,) and got[2] == "No routers with healthy workers available"
        assert ask(port, "GET", "/v1/models")[0] == 503
    finally:
        proc.kill()
        proc.wait()
