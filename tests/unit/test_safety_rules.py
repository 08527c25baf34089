"""The safety rules a green suite must vouch for, each with the deliberate bug it was written against (mutation
testing found these surviving the older suite): a busy /flush_cache is not a flush, the API key is redacted every
time it appears, only our own process group is ours, config.local.env counts, tool calls are scored by substring
and an HTTP error is never a pass, and resume carries the attempt counter on."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from llmhost import config
from llmhost.bench import points, runner, store, toolcalls
from llmhost.bench.records import PointRecord
from llmhost.serve import process, serverlog
from llmhost.serve.endpoints import Flush, ServerClient


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
    assert ServerClient(server.url).flush_cache(wait_s=10).state == "flushed"
    assert server.calls == 3  # two 400s, retried every 0.5 s, then the 200


def test_a_flush_refused_for_the_whole_wait_is_reported_as_not_flushed(flush_server):
    server = flush_server(busy=10_000)
    start = time.monotonic()
    flushed = ServerClient(server.url).flush_cache(wait_s=1.0)
    assert flushed.state == "busy" and not flushed and "HTTP 400" in flushed.detail
    assert 1.0 <= time.monotonic() - start < 5.0 and server.calls >= 2


def test_behind_the_router_a_point_flushes_each_worker_directly_and_waits_out_a_busy_one(flush_server):
    """sglang-router answers a flush that a busy worker refused with a partial success (206), not SGLang's 400 that
    says "ask again": each worker is asked itself, and the busy one again until it flushes."""
    from llmhost.bench import liveness

    busy, idle = flush_server(busy=2), flush_server(busy=0)
    cfg = dataclasses.replace(config.load({}), router="on", worker_urls=f"{busy.url} {idle.url}")
    assert liveness.flush_all(cfg, wait_s=10).state == "flushed"
    assert (busy.calls, idle.calls) == (3, 1)
    stuck = flush_server(busy=1000)
    cfg = dataclasses.replace(cfg, worker_urls=f"{idle.url} {stuck.url}")
    flushed = liveness.flush_all(cfg, wait_s=1.0)
    assert flushed.state == "busy" and "HTTP 400" in flushed.detail


def test_the_runner_measures_nothing_after_a_failed_flush(tmp_path, monkeypatch):
    busy = Flush("busy", "server busy: HTTP 400 for 120 s (requests still running)")
    monkeypatch.setattr(runner, "flush_all", lambda cfg, wait_s: busy)
    measured = []
    monkeypatch.setattr(runner, "measure", lambda *a, **k: measured.append(a) or ({}, ""))
    cfg = SimpleNamespace(base_url="http://127.0.0.1:9", model_dir="/m", served_model_name="m", sglang_python="py",
                          state_dir=tmp_path / "server")
    bench = SimpleNamespace(cfg=cfg, store=store.RunStore.create(tmp_path / "run"), module="m", seed=0, env={},
                            sampler=SimpleNamespace(point_id=None))
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    record = runner.attempt_point(bench, point, 1)
    assert record.status == "failed" and "flush failed: server busy" in (record.error or "")
    assert record.cache_flushed is False and measured == []


# --- the API key never reaches the log --------------------------------------------------------------------------

def test_every_occurrence_of_the_key_in_a_line_is_redacted():
    secrets = [b"sk-123"]
    assert serverlog.redact(b"api_key='sk-123' again sk-123 and sk-123\n", secrets) == \
        b"api_key='***' again *** and ***\n"
    chunks = iter([b"a sk-123 b sk-", b"123 c sk-123\n", b""])
    out: list[bytes] = []
    serverlog.copy_output(lambda n: next(chunks), [out.append], secrets)
    assert b"".join(out) == b"a *** b *** c ***\n"


def test_the_key_is_found_as_written_and_as_repr_escapes_it_in_server_args(tmp_path):
    key = "it's" + chr(92) + "a-key"  # a quote and a backslash: repr() escapes both inside ServerArgs(...)
    config_file = tmp_path / "sglang_config.yaml"
    config_file.write_text(f"api-key: {json.dumps(key)}\n")
    escaped = repr(key)[1:-1]
    assert escaped != key and serverlog.key_secrets(config_file) == [escaped.encode(), key.encode()]
    logged = f"ServerArgs(api_key='{escaped}') then {key}\n".encode()
    assert serverlog.redact(logged, serverlog.key_secrets(config_file)) == b"ServerArgs(api_key='***') then ***\n"


def test_the_log_tail_and_last_line_read_the_end_and_treat_carriage_returns_as_line_ends(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(50)) + b"progress 10%\rprogress 90%\r\n\n")
    assert serverlog.last_line(log) == "progress 90%"
    assert serverlog.tail(log, 5) == "line 49\nprogress 10%\nprogress 90%\n\n"
    assert serverlog.last_line(tmp_path / "none") == "" and "no log at" in serverlog.tail(tmp_path / "none")


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

def test_the_attempt_counter_continues_across_resumes_and_never_restarts_at_one():
    def last(attempt: int) -> PointRecord:
        p = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
        return PointRecord.of(p, attempt=attempt, status="failed", error="x", started_at=1.0, ended_at=2.0,
                              cache_flushed=True, summary=None, requests_file="requests/x.jsonl")

    assert list(runner.attempt_range(None)) == [1, 2]  # a try and its retry
    assert list(runner.attempt_range(last(1))) == [2]  # killed after a failed try: only its retry is left
    assert list(runner.attempt_range(last(2))) == [3, 4]  # a failed retry: a fresh pair, numbered on
    assert list(runner.attempt_range(last(4))) == [5, 6]


def test_the_launch_environment_round_trips_values_with_newlines_and_is_private(tmp_path):
    env = {"A": "1", "MULTI": "x\ny=z", "EMPTY": ""}
    process.write_launch_env(tmp_path, env)
    assert process.read_launch_env(tmp_path) == env
    assert (tmp_path / "launch.env").stat().st_mode & 0o777 == 0o600


def test_the_recorded_port_is_the_launch_commands_and_none_without_one(tmp_path):
    assert process.recorded_port(tmp_path) is None
    (tmp_path / "launch_command.json").write_text('{"argv": ["python3", "-m", "sglang", "--port", "31000"]}')
    assert process.recorded_port(tmp_path) == 31000
    (tmp_path / "launch_command.json").write_text('{"argv": ["python3", "--port"]}')
    assert process.recorded_port(tmp_path) is None


def test_stop_group_ends_a_whole_group_that_ignores_sigterm_with_sigkill(tmp_path):
    import signal
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); open(%r, 'w').close(); time.sleep(60)" % str(tmp_path / "up")],
                             start_new_session=True)
    threading.Thread(target=child.wait, daemon=True).start()  # reap it, as init reaps the real pane's server
    deadline = time.monotonic() + 20
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    warnings: list[str] = []
    assert process.stop_group(child.pid, 0.5, warnings.append) is True
    assert child.wait(5) == -signal.SIGKILL and "ignored SIGTERM" in warnings[0]
    assert process.stop_group(child.pid, 0.5, warnings.append) is True and len(warnings) == 1  # gone: nothing to do


# --- the config CLI lib.sh reads -------------------------------------------------------------------------------

def test_the_config_cli_hands_bash_every_value_and_names_a_bad_one_under_its_prefix(tmp_path, monkeypatch, capsys):
    local = tmp_path / "config.local.env"
    local.write_text("PORT=31234\n")
    monkeypatch.setattr(config, "LOCAL_FILE", local)
    monkeypatch.delenv("LLMHOST_CONFIG", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    assert config.main(["--env0"]) == 0
    records = capsys.readouterr().out.split("\0")
    assert records[-1] == "" and "PORT=31234" in records
    assert dict(r.split("=", 1) for r in records[:-1]) == config.load_values()
    assert config.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("PORT") and "= 31234" in line and line.endswith("config.local.env:1")
               for line in printed)
    local.write_text("PORT=70000\n")
    assert config.main(["--env0", "--log-prefix", "serve"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("[serve] error: ") and "PORT=70000" in err and err.count("\n") == 1


def test_a_line_reaches_the_log_as_soon_as_it_ends_and_a_long_run_keeps_a_key_length_back():
    secrets = [b"sk-123"]
    seen_at_read: list[bytes] = []
    out: list[bytes] = []
    chunks = iter([b"first\nsecond par", b"t\rthird", b"x" * (serverlog.CHUNK + 10) + b"sk-", b"123 end", b""])

    def read(n: int) -> bytes:
        assert n == serverlog.CHUNK
        seen_at_read.append(b"".join(out))
        return next(chunks)
    serverlog.copy_output(read, [out.append], secrets)
    assert seen_at_read[1] == b"first\n"  # emitted before the next read, the partial line held back
    assert seen_at_read[2] == b"first\nsecond part\r"  # a progress bar's \r ends a line too
    # no line end for > CHUNK bytes: all but len(key) - 1 bytes go out, so a key split across reads stays whole
    assert seen_at_read[3] == b"first\nsecond part\rthird" + b"x" * (serverlog.CHUNK + 10 - 2)
    assert b"".join(out) == b"first\nsecond part\rthird" + b"x" * (serverlog.CHUNK + 10) + b"*** end"
    no_secrets: list[bytes] = []
    parts = iter([b"a" * (serverlog.CHUNK + 5), b""])
    serverlog.copy_output(lambda n: next(parts), [no_secrets.append])
    assert no_secrets == [b"a" * (serverlog.CHUNK + 5)]


def test_a_sink_that_fails_does_not_stop_the_others():
    def broken(data: bytes) -> None:
        raise OSError("pane closed")
    out: list[bytes] = []
    serverlog.emit(b"line\n", [broken, out.append])
    assert out == [b"line\n"]


def test_a_group_whose_leader_is_our_pane_for_this_state_dir_is_ours(tmp_path):
    import subprocess
    import sys
    pane = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "_run", str(tmp_path)],
                            start_new_session=True)
    try:
        (tmp_path / "pgid").write_text(f"{pane.pid}\n")  # no pid file: the leader's command line decides
        deadline = time.monotonic() + 10
        while process.recorded_group(tmp_path) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # /proc/PID/cmdline is the interpreter's until exec finished
        assert process.recorded_group(tmp_path) == pane.pid
        other = tmp_path / "other"
        other.mkdir()
        (other / "pgid").write_text(f"{pane.pid}\n")
        assert process.recorded_group(other) is None  # a pane of another state directory is not ours
    finally:
        pane.kill()
        pane.wait()
    assert process.recorded_group(tmp_path) is None  # gone


def test_a_tool_call_case_is_asked_as_the_check_documents_and_timed():
    sent: dict = {}
    call = SimpleNamespace(function=SimpleNamespace(name="get_weather",
                                                    arguments='{"city": "Paris", "unit": "celsius"}'))

    def create(**kwargs):
        sent.update(kwargs)
        time.sleep(0.01)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(tool_calls=[call]))])
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    case = next(c for c in toolcalls.CASES if c.case_id == "weather-0")
    row = toolcalls.run_case(client, "qwen3-4b", case, "fp8-kv")
    assert sent == {"model": "qwen3-4b", "messages": [{"role": "user", "content": case.prompt}],
                    "tools": toolcalls.TOOLS, "tool_choice": "auto", "temperature": 0, "max_tokens": 256,
                    "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert (row.arm, row.case_id, row.prompt, row.expected_tool, row.called_tool) == \
        ("fp8-kv", "weather-0", case.prompt, "get_weather", "get_weather")
    assert row.args_ok is True and row.ok is True and row.error == ""
    assert 10.0 <= row.latency_ms < 5000.0


def test_dummy_weights_get_one_skip_note_and_real_weights_every_case():
    skipped = toolcalls.check("baseline", None, "m", "dummy")
    assert len(skipped) == 1 and skipped[0].arm == "baseline" and "LOAD_FORMAT=dummy" in skipped[0].skipped
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(
        create=lambda **kw: SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(tool_calls=None))]))))
    rows = toolcalls.check("baseline", client, "m", "auto", workers=2)
    assert [r.case_id for r in rows] == [c.case_id for c in toolcalls.CASES]
    assert [r.ok for r in rows] == [c.expected_tool is None for c in toolcalls.CASES]
