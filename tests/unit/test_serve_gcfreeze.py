"""FREEZE_GC: once ready, each server the start launched gets one POST /freeze_gc; a refusal is a one-line warning."""
from __future__ import annotations

import dataclasses
import http.server
import io
import threading

import pytest

from llmhost import config
from llmhost.serve import gcfreeze
from llmhost.serve.console import Console


@pytest.fixture
def server():
    """A server that answers every request with `status` (settable) and records (method, path)."""
    seen: list[tuple[str, str]] = []
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server API)
            seen.append((self.command, self.path))
            self.send_response(state["status"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], seen, state
    httpd.shutdown()
    httpd.server_close()


def captured() -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out, err), out, err


def test_the_server_is_frozen_once_and_the_start_says_so(server):
    port, seen, _ = server
    console, out, err = captured()
    assert gcfreeze.freeze(dataclasses.replace(config.load({}), port=port, freeze_gc="on"), console)
    assert seen == [("POST", "/freeze_gc")]
    assert out.getvalue() == "[serve] garbage collector frozen after start-up (FREEZE_GC=on, 1 server)\n"
    assert err.getvalue() == ""


def test_freeze_gc_off_sends_nothing(server):
    port, seen, _ = server
    console, out, err = captured()
    assert not gcfreeze.freeze(dataclasses.replace(config.load({}), port=port, freeze_gc="off"), console)
    assert seen == [] and out.getvalue() == err.getvalue() == ""


def test_a_server_without_the_endpoint_is_a_one_line_warning_not_a_failure(server):
    port, seen, state = server
    state["status"] = 404
    console, out, err = captured()
    assert not gcfreeze.freeze(dataclasses.replace(config.load({}), port=port, freeze_gc="on"), console)
    assert seen == [("POST", "/freeze_gc")] and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith(f"[serve] warning: FREEZE_GC=on but /freeze_gc failed (http://127.0.0.1:{port}: "
                                     "404)")


def test_behind_the_router_the_local_workers_are_frozen_and_remote_ones_never():
    cfg = dataclasses.replace(config.load({}), port=30000, router="on", dp_size=2, worker_urls="")
    assert gcfreeze.targets(cfg) == ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
    remote = dataclasses.replace(cfg, worker_urls="http://10.0.0.2:30000 http://10.0.0.3:30000")
    assert gcfreeze.targets(remote) == []
    assert gcfreeze.targets(dataclasses.replace(cfg, router="off")) == ["http://127.0.0.1:30000"]
