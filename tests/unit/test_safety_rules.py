"""The safety rules a green suite must vouch for, each with the deliberate bug it was written against (mutation
testing found these surviving the older suite): a busy /flush_cache is not a flush, the API key is redacted every
time it appears, only our own process group is ours, config.local.env counts, tool calls are scored by substring
and an HTTP error is never a pass, and resume carries the attempt counter on."""
from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from llmhost import config
from llmhost.bench import arms, points, runner, store, toolcalls
from llmhost.bench.records import PointRecord
from llmhost.serve import process, serverlog
from llmhost.serve.endpoints import ServerClient


class FlushServer:
    """127.0.0.1 server whose /flush_cache answers 400 ("busy", as SGLang 0.5.17 does while requests run) for the
    first `busy` calls, then 200."""

    def __init__(self, busy: int):
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                outer.calls += 1
                status = 400 if outer.calls <= busy else 200
                body = b"Flush cache failed.\n" if status == 400 else b"Cache flushed.\n"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def flush_server():
    servers: list[FlushServer] = []

    def make(busy: int) -> FlushServer:
        servers.append(FlushServer(busy))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


# --- flush: a busy server is not flushed ----------------------------------------------------------------------------

def test_a_busy_flush_is_retried_until_the_server_empties_its_cache(flush_server):
    server = flush_server(busy=2)
    assert ServerClient(server.url).flush_cache(wait_s=10) is True
    assert server.calls == 3  # two 400s, retried every 0.5 s, then the 200


def test_a_flush_refused_for_the_whole_wait_is_reported_as_not_flushed(flush_server):
    server = flush_server(busy=10_000)
    start = time.monotonic()
    assert ServerClient(server.url).flush_cache(wait_s=1.0) is False
    assert 1.0 <= time.monotonic() - start < 5.0 and server.calls >= 2


def test_the_runner_measures_nothing_after_a_failed_flush(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "server_client", lambda cfg: SimpleNamespace(flush_cache=lambda wait_s: False))
    loadgen_calls = []
    monkeypatch.setattr(points, "run_loadgen", lambda *a, **k: loadgen_calls.append(a) or (0, ""))
    cfg = SimpleNamespace(base_url="http://127.0.0.1:9", model_dir="/m", served_model_name="m", sglang_python="py")
    bench = SimpleNamespace(cfg=cfg, store=store.RunStore.create(tmp_path / "run"), module="m", seed=0, env={},
                            sampler=SimpleNamespace(point_id=None))
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    record = runner.attempt_point(bench, point, 1)
    assert record.status == "failed" and "flush failed" in (record.error or "")
    assert record.cache_flushed is False and loadgen_calls == []


# --- the API key never reaches the log --------------------------------------------------------------------------

def test_every_occurrence_of_the_key_in_a_line_is_redacted():
    secrets = [b"sk-123"]
    assert serverlog.redact(b"api_key='sk-123' again sk-123 and sk-123\n", secrets) == \
        b"api_key='***' again *** and ***\n"
    chunks = iter([b"a sk-123 b sk-", b"123 c sk-123\n", b""])
    out: list[bytes] = []
    serverlog.copy_output(lambda n: next(chunks), [out.append], secrets)
    assert b"".join(out) == b"a *** b *** c ***\n"


# --- only our own process group is ours -----------------------------------------------------------------------------

def test_a_live_group_is_ours_only_when_the_recorded_server_is_in_it(tmp_path):
    our_group = os.getpgid(0)  # alive, but its leader is not `llmhost.serve _run STATE`
    (tmp_path / "pgid").write_text(f"{our_group}\n")
    (tmp_path / "pid").write_text("1\n")  # init: alive, in its own group, so the number is someone else's now
    assert process.recorded_group(tmp_path) is None
    (tmp_path / "pid").write_text(f"{os.getpid()}\n")
    assert process.recorded_group(tmp_path) == our_group


# --- config.local.env counts, the environment still wins ------------------------------------------------------------

def test_config_local_env_overrides_config_env_and_the_environment_overrides_both(tmp_path, monkeypatch):
    local = tmp_path / "config.local.env"
    local.write_text("PORT=31234\nHOST=127.0.0.3\n")
    monkeypatch.setattr(config, "LOCAL_FILE", local)
    cfg = config.load({"HOME": os.environ["HOME"], "HOST": "127.0.0.2"})
    assert cfg.port == 31234 and cfg.host == "127.0.0.2"
    assert config.load_entries({"HOME": os.environ["HOME"]})["PORT"][1].endswith("config.local.env:1")


# --- tool calls: substring scoring, an error is never a pass -----------------------------------------------------

def test_tool_arguments_match_by_case_insensitive_substring_and_the_tool_must_match():
    case = next(c for c in toolcalls.CASES if c.case_id == "weather-0")  # Paris, celsius
    assert toolcalls.score(case, "get_weather", '{"city": "Paris, France", "unit": "Celsius"}') == (True, True)
    assert toolcalls.score(case, "get_weather", '{"city": "Lyon", "unit": "celsius"}') == (False, False)
    assert toolcalls.score(case, "search_docs", '{"city": "Paris", "unit": "celsius"}') == (True, False)
    assert toolcalls.score(case, "get_weather", "not json") == (False, False)


def test_an_http_error_is_scored_as_a_failure_even_where_no_tool_was_expected():
    def refuse(**kwargs):
        raise ConnectionError("server answered 500")
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=refuse)))
    no_tool = next(c for c in toolcalls.CASES if c.expected_tool is None)
    row = toolcalls.run_case(client, "m", no_tool, "baseline")
    assert row.ok is False and row.error.startswith("ConnectionError: server answered 500")


# --- resume carries the attempt counter on ---------------------------------------------------------------------

def test_resume_continues_a_failed_point_at_its_retry_and_leaves_a_failed_retry_alone(tmp_path, monkeypatch):
    run = store.RunStore.create(tmp_path / "run")
    first, retried = (points.make_point("baseline", "chat", "concurrency", c, None, 4, 1) for c in (4, 8))
    for p, attempt in ((first, 1), (retried, 2)):
        run.append_point(PointRecord.of(p, attempt=attempt, status="failed", error="x", started_at=1.0, ended_at=2.0,
                                        cache_flushed=True, summary=None, requests_file="requests/x.jsonl"))
    started: list[tuple[str, int]] = []
    monkeypatch.setattr(runner, "restart_server", lambda b, arm: "")
    monkeypatch.setattr(runner, "check_tools", lambda b, arm: None)
    monkeypatch.setattr(runner, "run_point", lambda b, arm, p, first_attempt: started.append((p.point_id,
                                                                                                first_attempt)))
    bench = SimpleNamespace(store=run, progress=lambda text: None, est_left_s=0.0)
    baseline = arms.REGISTRY["baseline"]
    runner.run_arms(bench, [baseline], [first, retried], quick=True)
    assert started == [(first.point_id, 2)]

