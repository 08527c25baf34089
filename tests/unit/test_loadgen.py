"""The in-process load generator: one process per boot runs SGLang's benchmark module (here the stand-in, faithful to
0.5.17's API) for every point; per-request records on the wall clock with cached tokens; TTFT from the first token of
any kind (checked on the captured tool-call stream); a clear line for an API it does not know; Ctrl-C, a point's
time limit and a SIGKILLed parent all end the process."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llmhost.bench import loadgen, points
from llmhost.bench.loadgen_process import LoadGenerator, LoadgenError
from llmhost.bench.records import RequestRecord
from llmhost.bench.workloads import REGISTRY as WORKLOADS
from standin.harness import launch, standin_env

REPO = Path(__file__).resolve().parents[2]
MODULE = "sglang.benchmark.serving"


def _argv(point, url: str, out: Path, prime: bool = False, seed: int = 1) -> list[str]:
    return points.bench_argv(point, WORKLOADS[point.workload], base_url=url, model_dir="/m",
                             served_model_name="qwen3-4b", seed=seed, output_file=out, prime=prime)


def _rows(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


@pytest.fixture
def hanging_url():
    """A port that accepts connections and never answers (a hung server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_one_process_runs_every_point_of_a_boot_with_wall_clock_requests_and_cached_tokens(tmp_path, free_port):
    warm = points.make_point("baseline", "agent", "warm", 8, None, 32, 1)
    chat = points.make_point("baseline", "chat", "qps", None, 20.0, 12, 1)
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv, \
            LoadGenerator(sys.executable, MODULE, standin_env(), tmp_path / "log") as gen:
        gen.start()
        pid, before = gen.proc.pid, time.time()
        _, error = gen.run(_argv(warm, srv.url, tmp_path / "p.jsonl", prime=True), tmp_path / "p.req", 60)
        assert error == ""
        totals, error = gen.run(_argv(warm, srv.url, tmp_path / "w.jsonl"), tmp_path / "w.req", 60)
        assert error == "" and totals["completed"] == 32
        chat_totals, error = gen.run(_argv(chat, srv.url, tmp_path / "c.jsonl"), tmp_path / "c.req", 60)
        assert error == "" and gen.proc.pid == pid and gen.version == "0.5.17"  # the same process all along
        assert gen.event_loop == "uvloop"  # SGLang installs it; the points stream on it
    assert chat_totals["completed"] == 12 and json.loads((tmp_path / "c.jsonl").read_text())["completed"] == 12
    rows = _rows(tmp_path / "w.req")
    assert len(rows) == 32 and all(r.ok for r in rows)
    assert all(before < r.start_s < r.end_s <= time.time() for r in rows)  # time.time(), the telemetry clock
    assert all(r.end_s - r.start_s == pytest.approx(r.e2e_ms / 1000) and r.ttft_ms > 0 for r in rows)
    assert all(len(r.itl_ms) == r.output_tokens - 1 == 255 for r in rows)
    # each request's response headers came back after its start and before its first token (the stand-in streams
    # through one session per request, as SGLang's module does)
    assert all(0 < r.headers_ms <= r.ttft_ms for r in rows)
    # Primed with 1-token questions: every measured request hits its system prompt, none its question.
    assert all(4096 <= r.cached_tokens < r.prompt_tokens - 64 for r in rows)
    assert {r.cached_tokens for r in _rows(tmp_path / "p.req")} == {0}  # the priming pass itself ran cold
    assert all(r.cached_tokens == 0 for r in _rows(tmp_path / "c.req"))  # random ids: nothing shared
    # each measured request was also appended as it finished; the requests file replaces that file at the end
    assert not any(loadgen.completed_file(tmp_path / name).exists() for name in ("p.req", "w.req", "c.req"))


def test_agent_datasets_built_while_the_server_boots_are_the_ones_each_point_would_build(tmp_path, free_port):
    """Prepared before any server answers, through the module's own get_dataset and disk cache: the point then
    loads its dataset, and that dataset is byte for byte the one a point builds by itself."""
    point = points.make_point("baseline", "agent", "qps", None, 50.0, 32, 2)
    chat = points.make_point("baseline", "chat", "concurrency", 4, None, 8, 2)
    cache = lambda home: sorted((home / ".cache" / "sglang" / "benchmark").glob("*.pkl"))  # noqa: E731
    with LoadGenerator(sys.executable, MODULE, standin_env({"HOME": str(tmp_path / "a")}), tmp_path / "log") as gen:
        gen.launch(prepare=[_argv(p, "http://127.0.0.1:1", tmp_path / "x", seed=2) for p in (point, chat)])
        with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv:
            gen.start()
            assert len(cache(tmp_path / "a")) == 1  # random ids are not cached by the module: nothing built
            _, error = gen.run(_argv(point, srv.url, tmp_path / "o.jsonl", seed=2), tmp_path / "r", 60)
    assert error == "" and "Loading cached generated input data" in (tmp_path / "log").read_text()
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv, \
            LoadGenerator(sys.executable, MODULE, standin_env({"HOME": str(tmp_path / "b")}), tmp_path / "l2") as gen:
        gen.start()
        _, error = gen.run(_argv(point, srv.url, tmp_path / "o2.jsonl", seed=2), tmp_path / "r2", 60)
    assert error == "" and "Caching generated input data" in (tmp_path / "l2").read_text()
    (built,), (own,) = cache(tmp_path / "a"), cache(tmp_path / "b")
    assert built.name == own.name and built.read_bytes() == own.read_bytes()


def test_a_prepare_that_fails_is_a_warning_and_the_points_still_run(tmp_path, free_port, capsys):
    point = points.make_point("baseline", "agent", "concurrency", 4, None, 16, 1)
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv, \
            LoadGenerator(sys.executable, MODULE, standin_env({"HOME": str(tmp_path)}), tmp_path / "log") as gen:
        gen.launch(prepare=[["--no-such-flag"]])
        gen.start()
        totals, error = gen.run(_argv(point, srv.url, tmp_path / "o.jsonl"), tmp_path / "r", 60)
    assert error == "" and totals["completed"] == 16
    assert "building the datasets ahead failed (bad benchmark arguments: " in capsys.readouterr().out


def test_the_chat_path_reports_cached_tokens_from_sglext(tmp_path, free_port):
    point = points.make_point("baseline", "agent-tools", "concurrency", 4, None, 32, 1)
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv, \
            LoadGenerator(sys.executable, MODULE, standin_env(), tmp_path / "log") as gen:
        gen.start()
        _, error = gen.run(_argv(point, srv.url, tmp_path / "o.jsonl"), tmp_path / "r", 60)
    assert error == ""
    rows = _rows(tmp_path / "r")
    assert len(rows) == 32 and all(r.ok and r.ttft_ms > 0 for r in rows)
    assert max(r.cached_tokens for r in rows) > 4096  # the second request of a group reuses its system prompt
    assert all(r.headers_ms is None for r in rows)  # SGLang's chat route sends its headers with the first chunk
    assert sorted(json.loads((tmp_path / "o.jsonl").read_text())["cached_tokens"]) == \
        sorted(r.cached_tokens for r in rows)  # the module's own list, in its order


def _capture_deltas(captures: Path) -> list[dict]:
    events = [json.loads(line[6:]) for line in (captures / "chat_tool_named_stream.txt").read_text().splitlines()
              if line.startswith("data: {")]
    return [(e.get("choices") or [{}])[0].get("delta") or {} for e in events]


def test_any_token_ttft_starts_at_the_tool_call_delta_of_the_captured_stream(captures, monkeypatch, repo):
    serving = _standin_module(monkeypatch, repo)
    deltas = _capture_deltas(captures)
    first_content = next(i for i, d in enumerate(deltas) if serving._combine_openai_chat_content(d))
    counted = loadgen.any_token_text(serving._combine_openai_chat_content)
    first_any = next(i for i, d in enumerate(deltas) if counted(d))
    assert deltas[first_any]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert first_any == 1 < first_content == 3  # the role chunk (content "") counts for neither
    assert counted({"tool_calls": [{"index": 0, "function": {"name": None, "arguments": None}}]})
    assert counted({"content": "hi", "tool_calls": None}) == "hi"


def test_the_wrapped_chat_request_function_times_a_replayed_tool_call_stream(captures, monkeypatch, repo):
    """The real request function, wrapped (not forked), against the captured bytes: TTFT at the call delta."""
    body = (captures / "chat_tool_named_stream.txt").read_text().split("\n\n", 1)[1].encode()
    deltas = _capture_deltas(captures)
    first_content = next(i for i, e in enumerate(body.split(b"\n\n"))
                         if e.startswith(b"data: {") and ((json.loads(e[6:])["choices"] or [{}])[0].get("delta")
                                                          or {}).get("content"))

    class Replay(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, event in enumerate(body.split(b"\n\n")):
                if i == first_content:  # well after the call delta, so a loaded CI core cannot blur the two
                    time.sleep(0.3)
                self.wfile.write(event + b"\n\n")
                self.wfile.flush()
                time.sleep(0.01)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    serving = _standin_module(monkeypatch, repo)
    gen = loadgen.Generator(serving)
    serving.args = gen.parse(["--backend", "sglang-oai-chat"])
    url = f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
    inp = serving.RequestFuncInput("hi", url, 5, 64, "m", None, None, {})
    try:
        import asyncio

        out = asyncio.run(serving.ASYNC_REQUEST_FUNCS["sglang-oai-chat"](request_func_input=inp))
    finally:
        server.shutdown()
    streamed = sum(1 for d in deltas if loadgen.any_token_text(lambda m: "")(d) or d.get("content"))
    assert out.success and gen.outputs == [out]
    assert 0 < out.ttft < 0.25  # the call delta, not the first content chunk 300 ms later
    assert len(out.itl) == streamed - 1


def _standin_module(monkeypatch, repo: Path):
    monkeypatch.syspath_prepend(str(repo / "tests" / "standin"))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    from sglang.benchmark import serving

    return serving


def test_a_point_run_in_process_writes_its_measured_requests_by_start_on_the_wall_clock(tmp_path, monkeypatch,
                                                                                         free_port, repo):
    """Generator.run_point with the stand-in module against a stand-in server: the warm-up requests are not
    measured; each measured request was appended to the completed file as it finished; the requests file holds
    them all, sorted by start, on time.time()'s clock, and the completed file is gone."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the module's dataset cache
    serving = _standin_module(monkeypatch, repo)
    gen = loadgen.Generator(serving)
    real, appended = serving.run_benchmark, []

    def run_benchmark(args):
        result = real(args)
        appended.extend(json.loads(line) for line in loadgen.completed_file(requests).read_text().splitlines())
        return result
    monkeypatch.setattr(serving, "run_benchmark", run_benchmark)
    point = points.make_point("baseline", "agent", "concurrency", 4, None, 16, 1)  # the native route
    requests = tmp_path / "r.jsonl"
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv:
        argv = points.bench_argv(point, WORKLOADS["agent"], base_url=srv.url, model_dir="/m",
                                 served_model_name="qwen3-4b", seed=1, output_file=tmp_path / "out.jsonl")
        argv += ["--warmup-requests", "2"]  # the module's own option: these requests go first, unmeasured
        before = time.time()
        totals = gen.run_point(argv, requests)
        after = time.time()
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    assert totals["completed"] == len(rows) == 16 and set(totals) == set(loadgen.SUMMARY_KEYS)  # 16 groups
    assert len(gen.outputs) == 18  # the two warm-up requests first, never measured
    assert sorted(map(json.dumps, appended)) == sorted(map(json.dumps, rows))
    assert [r["start_s"] for r in rows] == sorted(r["start_s"] for r in rows)
    assert all(before < r["start_s"] < r["end_s"] < after and r["ok"] for r in rows)
    assert all(0 < r["headers_ms"] <= r["ttft_ms"] for r in rows)  # /generate sends its headers first
    assert not loadgen.completed_file(requests).exists()
    # a benchmark that reports another count than the outputs kept is an error, not a silent mismatch
    monkeypatch.setattr(serving, "run_benchmark", lambda args: {**real(args), "ttfts": []})
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv:
        argv = points.bench_argv(point, WORKLOADS["agent"], base_url=srv.url, model_dir="/m",
                                 served_model_name="qwen3-4b", seed=1, output_file=tmp_path / "out.jsonl")
        with pytest.raises(loadgen.LoadgenError, match="^16 request outputs kept but the benchmark reports 0$"):
            gen.run_point(argv, requests)


def test_bad_arguments_are_one_line_from_the_module_own_parser(monkeypatch, repo):
    gen = loadgen.Generator(_standin_module(monkeypatch, repo))
    with pytest.raises(loadgen.LoadgenError, match="bad benchmark arguments: .*unrecognized arguments: --nope"):
        gen.parse(["--nope"])
    assert gen.parse(["--num-prompts", "3"]).num_prompts == 3


def test_each_point_runs_with_the_garbage_collector_settled_and_frozen(monkeypatch, repo, tmp_path):
    """What is alive before a point (imports, tokenizer, datasets) is frozen, and the garbage collected first, so a
    full collection during the point walks only the point's own objects: unfrozen, it paused the streams ~0.5 s."""
    import gc
    import weakref

    class Node:
        pass
    cycle = Node()
    cycle.me = cycle  # garbage only a collection frees
    dead = weakref.ref(cycle)
    del cycle
    seen = {}

    def run_benchmark(args):
        seen.update(frozen=gc.get_freeze_count(), cycle_freed=dead() is None)
        raise SystemExit(1)
    gen = loadgen.Generator(_standin_module(monkeypatch, repo))
    monkeypatch.setattr(gen.mod, "run_benchmark", run_benchmark)
    gc.disable()  # no automatic collection may free the cycle first
    try:
        with pytest.raises(loadgen.LoadgenError, match="the benchmark exited"):
            gen.run_point(["--num-prompts", "1"], tmp_path / "r.jsonl")
    finally:
        gc.enable()
        gc.unfreeze()
    assert seen["cycle_freed"] and seen["frozen"] > 1000


def test_the_process_entry_explains_itself_and_refuses_other_arguments(capsys):
    assert loadgen.main(["--help"]) == 0 and "one JSON document a line" in capsys.readouterr().out
    assert loadgen.main([]) == 2 and loadgen.main(["a", "b"]) == 2 and "usage" in capsys.readouterr().err


def test_an_unknown_benchmark_api_ends_with_one_line_naming_both_versions(tmp_path):
    (tmp_path / "newbench.py").write_text(
        "import sglang\nsglang.__version__ = '0.6.0'\n"
        "def cli_main(): pass\ndef run_benchmark(namespace, extra): pass\n")
    env = standin_env({"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    with LoadGenerator(sys.executable, "newbench", env, tmp_path / "log") as gen, \
            pytest.raises(LoadgenError) as err:
        gen.start()
    assert "SGLang 0.6.0" in str(err.value) and "verified with SGLang 0.5.17" in str(err.value)
    assert "run_benchmark(namespace, extra) instead of run_benchmark(args_)" in str(err.value)


def test_a_point_over_its_limit_is_killed_and_the_next_point_gets_a_fresh_process(tmp_path, hanging_url, free_port):
    point = points.make_point("baseline", "chat", "concurrency", 2, None, 4, 1)
    with LoadGenerator(sys.executable, MODULE, standin_env(), tmp_path / "log") as gen:
        gen.start()
        first = gen.proc.pid
        totals, error = gen.run(_argv(point, hanging_url, tmp_path / "o"), tmp_path / "r", limit_s=1)
        assert totals is None and error == "load generator exceeded 1s" and gen.proc is None
        assert not _alive(first)
        with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv:
            totals, error = gen.run(_argv(point, srv.url, tmp_path / "o"), tmp_path / "r", limit_s=60)
        assert error == "" and totals["completed"] == 4 and gen.proc.pid != first


def test_a_load_generator_that_died_between_points_is_replaced_by_a_fresh_one(tmp_path, free_port):
    point = points.make_point("baseline", "chat", "concurrency", 2, None, 4, 1)
    with launch(free_port, "--served-model-name", "qwen3-4b", env={"STANDIN_ITL_MS": "1"}) as srv, \
            LoadGenerator(sys.executable, MODULE, standin_env(), tmp_path / "log") as gen:
        gen.start()
        first = gen.proc.pid
        os.kill(first, signal.SIGKILL)
        gen.proc.wait()
        totals, error = gen.run(_argv(point, srv.url, tmp_path / "o"), tmp_path / "r", limit_s=60)
        assert error == "" and totals["completed"] == 4 and gen.proc.pid != first


def test_ctrl_c_during_a_point_also_stops_the_load_generator(tmp_path, hanging_url):
    point = points.make_point("baseline", "chat", "concurrency", 2, None, 4, 1)
    with LoadGenerator(sys.executable, MODULE, standin_env(), tmp_path / "log") as gen:
        gen.start()
        child = gen.proc.pid
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            gen.run(_argv(point, hanging_url, tmp_path / "o"), tmp_path / "r", limit_s=60)
    assert not _alive(child)


def test_a_sigkilled_run_bench_takes_its_load_generator_with_it(tmp_path, hanging_url):
    """SIGKILL runs no cleanup in run_bench.py: the kernel must end the load generator (own session) itself."""
    pid_file = tmp_path / "pid"
    point = points.make_point("baseline", "chat", "concurrency", 2, None, 4, 1)
    parent_code = (
        "import sys; from pathlib import Path; from llmhost.bench.loadgen_process import LoadGenerator; "
        f"from standin.harness import standin_env; gen = LoadGenerator(sys.executable, {MODULE!r}, standin_env(), "
        f"Path({str(tmp_path / 'log')!r})); gen.start(); Path({str(pid_file)!r}).write_text(str(gen.proc.pid)); "
        f"gen.run({_argv(point, hanging_url, tmp_path / 'o')!r}, Path({str(tmp_path / 'r')!r}), 60)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "tests")))}
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO, env=env)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert _alive(child) and os.getsid(child) != os.getsid(0)  # running, in its own session
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("error,expected", [
    # SGLang's warm-up failure embeds the whole traceback (seen on the H200 when the server was stopped mid-point)
    ("ValueError: Warmup failed - Please make sure benchmark arguments are correctly specified. Error: Traceback "
     "(most recent call last):\n  File \"aiohttp/connector.py\", line 1301, in _wrap_create_connection\n"
     "    sock = await start_connection(\naiohttp.client_exceptions.ClientConnectorError: Cannot connect to host",
     "ValueError: Warmup failed - Please make sure benchmark arguments are correctly specified. Error: … "
     "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'ttft'", "KeyError: 'ttft'"),
    ("one line", "one line"),
    ("", "no error text"),
])
def test_a_load_generator_error_is_one_line_with_its_exception(error, expected):
    from llmhost.bench.loadgen_process import one_line
    assert one_line(error) == expected and "\n" not in one_line(error * 30) and len(one_line(error * 30)) <= 500


def test_each_concurrent_request_notes_its_own_response_headers_through_the_wrapped_session_factory():
    class Post:  # aiohttp's request context manager: entered once the headers are in (here after `delay` s)
        def __init__(self, delay):
            self.delay = delay

        async def __aenter__(self):
            await asyncio.sleep(self.delay)
            return f"response after {self.delay}"

        async def __aexit__(self, *exc):
            return None

    class Session:
        closed = False

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            self.closed = True

        def post(self, url, json=None):  # noqa: A002 - aiohttp's name
            return Post(json["delay"])

    create = loadgen.header_timed(Session)

    async def one(delay, awaited):
        times = {}
        token = loadgen.REQUEST_TIMES.set(times)
        try:
            start = time.perf_counter()
            async with create() as session:
                if awaited:
                    response = await session.post("u", json={"delay": delay})
                else:
                    async with session.post("u", json={"delay": delay}) as response:
                        pass
            assert response == f"response after {delay}" and session.closed  # the proxy closed the real one
            return times["headers"] - start
        finally:
            loadgen.REQUEST_TIMES.reset(token)

    async def both():
        return await asyncio.gather(one(0.05, False), one(0.25, True))

    fast, slow = asyncio.run(both())
    assert 0.04 <= fast < 0.2 and 0.24 <= slow < 0.5  # each task its own times, though they ran together
    assert loadgen.REQUEST_TIMES.get() is None  # nothing leaks out of the requests
