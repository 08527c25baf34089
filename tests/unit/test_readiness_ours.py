"""Ready needs all three: our group alive, the port held by our group, and a generation (POST /generate 200, with
the API key); a server of ours that answers 503 is still starting, and a foreign listener must be seen on two polls
before it is believed."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from llmhost import config
from llmhost.serve import readiness

SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):  # /health_generate: open, like SGLang's
        self.send_response(int(sys.argv[2]) if self.path == "/health_generate" else 200)
        self.end_headers()
    def do_POST(self):  # /generate: the status asked for, 401 without the key (argv[3], when given)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        keyed = len(sys.argv) < 4 or self.headers.get("Authorization") == "Bearer " + sys.argv[3]
        one_token = b'"max_new_tokens": 1' in body and b'"log_metrics": false' in body
        self.send_response(404 if self.path != "/generate" else 401 if not keyed else 400 if not one_token
                           else int(sys.argv[2]))
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture
def our_server(free_port):
    """start(status) -> pgid of a server in its own process group, listening on free_port."""
    children: list[subprocess.Popen] = []

    def start(status: int, key: str = "") -> int:
        child = subprocess.Popen([sys.executable, "-c", SERVER, str(free_port), str(status), *([key] if key else [])],
                                 start_new_session=True)
        children.append(child)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{free_port}/health", timeout=1).close()
                return child.pid
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("test server did not listen")
    yield start
    for child in children:
        child.kill()
        child.wait()


def cfg_on(port: int) -> config.Config:
    return dataclasses.replace(config.load({}), port=port)


def test_our_group_holding_the_port_with_a_generation_is_ready(our_server, free_port, tmp_path):
    pgid = our_server(200)
    assert readiness.readiness(cfg_on(free_port), pgid) == ("ready", "a generation succeeded")
    ok, detail = readiness.wait_ready(cfg_on(free_port), pgid, log=tmp_path / "server.log",
                                      timeout_s=5, say=lambda line: None)
    assert ok and detail.startswith("ready after ") and detail.endswith("(a generation succeeded)")


def test_our_server_answering_503_is_starting_and_says_what_it_answered(our_server, free_port):
    pgid = our_server(503)
    assert readiness.readiness(cfg_on(free_port), pgid) == ("starting", "/generate -> 503")


def test_the_generation_carries_the_api_key_and_an_unreadable_key_falls_back_to_the_open_check(
        our_server, free_port, tmp_path):
    pgid = our_server(200, key="sk-ready")
    key_file = tmp_path / "key"
    key_file.write_text("sk-ready\n")
    key_file.chmod(0o600)
    keyed = dataclasses.replace(cfg_on(free_port), api_key_file=str(key_file))
    assert readiness.readiness(keyed, pgid) == ("ready", "a generation succeeded")
    assert readiness.readiness(cfg_on(free_port), pgid) == ("starting", "/generate -> 401")
    key_file.chmod(0o644)  # refused like a loose ssh key: /health_generate needs none
    assert readiness.readiness(keyed, pgid) == ("ready", "a generation succeeded")


def test_ready_does_not_wait_for_the_health_endpoints_second(free_port):
    """SGLang 0.5.17's /health_generate sleeps a second before it looks (the stand-in's STANDIN_HEALTH_S): the
    readiness probe generates one token on /generate instead, and is answered at once."""
    from standin.harness import launch

    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_HEALTH_S": "1.5"}) as srv:
        cfg = cfg_on(free_port)
        began = time.monotonic()
        state = readiness.readiness(cfg, os.getpgid(srv.proc.pid))
        took = time.monotonic() - began
    assert state == ("ready", "a generation succeeded") and took < 0.75


ROUTER = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):  # the router's /readiness with argv[2] healthy workers; workers' open /health_generate
        healthy = int(sys.argv[2])
        body = json.dumps({"status": "ready", "healthy_workers": healthy, "total_workers": healthy}).encode() \\
            if self.path == "/readiness" and healthy else b"{}"
        self.send_response(200 if self.path == "/health_generate" or healthy else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.parametrize(("healthy", "state"), [
    (0, ("starting", "/readiness -> 503")),
    (1, ("starting", "the router routes to 1 of 2 workers (/readiness)")),
    (2, ("ready", "the router routes to all 2 workers, and each generated"))])
def test_behind_the_router_ready_waits_until_it_routes_to_every_worker(free_port, healthy, state):
    """sglang-router 0.3.2 answers /health_generate with 200 once ANY worker is healthy, generating nothing (captured
    on the H200): ready asks its /readiness for every worker, then each worker for a generation."""
    child = subprocess.Popen([sys.executable, "-c", ROUTER, str(free_port), str(healthy)], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{free_port}/health_generate", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "test router did not listen"
                time.sleep(0.05)
        here = f"http://127.0.0.1:{free_port}"
        cfg = dataclasses.replace(cfg_on(free_port), router="on", worker_urls=f"{here} {here}")
        assert readiness.readiness(cfg, child.pid) == state
    finally:
        child.kill()
        child.wait()
