"""Readiness is tied to OUR process group: a foreign listener on the port or a dead group is never "ready"."""
from __future__ import annotations

import dataclasses
import http.server
import subprocess
import sys
import threading

import pytest

from llmhost import config
from llmhost.serve import readiness as server


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def our_group():
    """A stand-in for our server's process group that holds no socket."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield child.pid
    child.kill()
    child.wait()


def cfg_on(port: int) -> config.Config:
    return dataclasses.replace(config.load({}), port=port)


def test_a_healthy_foreign_server_on_the_port_is_foreign_not_ready(our_group):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        state, detail = server.readiness(cfg_on(httpd.server_port), our_group)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert state == "foreign" and "not by our server" in detail


def test_nothing_listening_yet_is_starting(our_group, free_port):
    assert server.readiness(cfg_on(free_port), our_group) == ("starting", "not listening yet")


def test_a_dead_group_is_dead(free_port):
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    child.wait()
    state, _ = server.readiness(cfg_on(free_port), child.pid)
    assert state == "dead"


def test_wait_ready_gives_up_at_the_timeout_with_a_progress_line(our_group, free_port, tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text("Load weight begin.\nCapturing CUDA graphs 3/36\n")
    ok, detail = server.wait_ready(cfg_on(free_port), our_group, log, timeout_s=1.5, every_s=5)
    assert not ok and "READY_TIMEOUT_S" in detail
    assert "Capturing CUDA graphs 3/36" in capsys.readouterr().out


def test_wait_ready_needs_a_stranger_seen_twice(monkeypatch, tmp_path):
    """/proc changes while it is read: one 'foreign' reading among 'starting' ones must not end the start."""
    seen = iter([("starting", "not listening yet"), ("foreign", "port held by pid 1"), ("starting", "x"),
                 ("ready", "a generation succeeded")])
    monkeypatch.setattr(server, "readiness", lambda cfg, pgid, client=None: next(seen))
    monkeypatch.setattr(server.time, "sleep", lambda s: None)
    assert server.wait_ready(cfg_on(1), 1, tmp_path / "log", timeout_s=60)[0]

    persistent = iter([("starting", "x"), ("foreign", "port held by pid 1"), ("foreign", "port held by pid 1")])
    monkeypatch.setattr(server, "readiness", lambda cfg, pgid, client=None: next(persistent))
    assert server.wait_ready(cfg_on(1), 1, tmp_path / "log", timeout_s=60) == (False, "port held by pid 1")
