"""Ready needs all three: our group alive, the port held by our group, and /health_generate 200; a server of ours
that answers 503 is still starting, and a foreign listener must be seen on two polls before it is believed."""
from __future__ import annotations

import dataclasses
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
    def do_GET(self):
        self.send_response(int(sys.argv[2]) if self.path == "/health_generate" else 200)
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture
def our_server(free_port):
    """start(status) -> pgid of a server in its own process group, listening on free_port."""
    children: list[subprocess.Popen] = []

    def start(status: int) -> int:
        child = subprocess.Popen([sys.executable, "-c", SERVER, str(free_port), str(status)], start_new_session=True)
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
    assert readiness.readiness(cfg_on(free_port), pgid) == ("starting", "/health_generate -> 503")
