"""The SGLang stand-in answers like the captured SGLang 0.5.17: argv, shapes, headers, SSE framing, auth, cache."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.serve import startup
from standin.harness import free_port, launch, standin_env

BASE_ARGS = ("--served-model-name", "qwen3-4b", "--enable-metrics", "--enable-cache-report")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def call(url: str, body: object | None = None, headers: dict | None = None, method: str | None = None):
    """(status, headers, body bytes) without raising on 4xx/5xx."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def captured(captures, name: str) -> tuple[int, dict, bytes]:
    raw = (captures / name).read_bytes().decode()
    head, _, body = raw.partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body.encode()


def keys(obj: object) -> object:
    """The key structure of a JSON value (values ignored; lists by their first element)."""
    if isinstance(obj, dict):
        return {k: keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [keys(obj[0])] if obj else []
    return None


def sse(body: bytes) -> list[str]:
    assert body.endswith(b"data: [DONE]\n\n")
    events = body.decode().split("\n\n")
    assert events[-1] == "" and all(e.startswith("data: ") for e in events[:-1])
    return [e[len("data: "):] for e in events[:-2]]  # without the final [DONE]


def chat(url: str, **body) -> dict:
    body.setdefault("model", "qwen3-4b")
    body.setdefault("messages", [{"role": "user", "content": "What is the capital of France?"}])
    body.setdefault("max_tokens", 8)
    status, _, raw = call(url + "/v1/chat/completions", body)
    assert status == 200, raw
    return raw if body.get("stream") else json.loads(raw)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    port = free_port()
    with launch(port, *BASE_ARGS) as server:
        yield server


def test_routes_answer_with_the_captured_status_headers_and_keys(srv, captures):
    for route, name in [("/health", "GET_health.txt"), ("/health_generate", "GET_health_generate.txt"),
                        ("/v1/models", "GET_v1_models.txt"), ("/model_info", "GET_model_info.txt"),
                        ("/server_info", "GET_server_info.txt"), ("/get_server_info", "GET_get_server_info.txt")]:
        want_status, want_headers, want_body = captured(captures, name)
        status, headers, body = call(srv.url + route)
        assert status == want_status, route
        assert headers.get("content-type") == want_headers.get("content-type"), route
        assert headers.get("server") == "uvicorn"
        if want_body:
            assert keys(json.loads(body)) == keys(json.loads(want_body)), route
    models = json.loads(call(srv.url + "/v1/models")[2])
    assert [m["id"] for m in models["data"]] == ["qwen3-4b"]
    assert json.loads(call(srv.url + "/server_info")[2])["port"] == srv.port


def test_chat_non_stream_matches_capture_and_puts_random_text_in_reasoning(srv, captures):
    reply = chat(srv.url, model="nope")  # the first chat on this server: nothing cached, details null
    want = json.loads(captured(captures, "chat_nonstream.txt")[2])
    assert keys(reply) == keys(want)
    assert reply["model"] == "nope"  # any model name is accepted, as on the real server
    msg = reply["choices"][0]["message"]
    assert msg["content"] == "" and msg["reasoning_content"]
    assert reply["usage"]["completion_tokens"] == 8 == reply["usage"]["reasoning_tokens"]
    assert reply["choices"][0]["finish_reason"] == "length"
    plain = chat(srv.url, chat_template_kwargs={"enable_thinking": False})["choices"][0]["message"]
    assert plain["content"] and plain["reasoning_content"] is None


def test_chat_stream_is_sse_with_captured_chunk_shapes_usage_and_done(srv, captures):
    body = chat(srv.url, stream=True, stream_options={"include_usage": True}, max_tokens=5)
    got = [json.loads(e) for e in sse(body)]
    want = [json.loads(e) for e in sse(captured(captures, "chat_stream.txt")[2])]
    assert [keys(c) for c in got[:2]] == [keys(c) for c in want[:2]]
    assert keys(got[-2]) == keys(want[-2]) and got[-2]["choices"][0]["finish_reason"] == "length"
    assert got[-1]["choices"] == [] and got[-1]["usage"]["completion_tokens"] == 5
    assert len(got) == 1 + 5 + 1 + 1
    no_usage = [json.loads(e) for e in sse(chat(srv.url, stream=True, max_tokens=2))]
    assert all(c["choices"] for c in no_usage)


def test_named_tool_choice_without_thinking_streams_a_call_like_the_capture_but_not_unstreamed(srv, captures):
    named = {"type": "function", "function": {"name": "get_weather"}}
    off = {"enable_thinking": False}
    reply = chat(srv.url, tools=TOOLS, tool_choice=named, chat_template_kwargs=off, max_tokens=16)
    assert reply["choices"][0]["message"]["tool_calls"] is None  # random weights: JSON cut off at max_tokens
    assert reply["choices"][0]["message"]["content"]
    got = [json.loads(e) for e in sse(chat(srv.url, tools=TOOLS, tool_choice=named, chat_template_kwargs=off,
                                           max_tokens=16, stream=True))]
    want = [json.loads(e) for e in sse(captured(captures, "chat_tool_named_stream.txt")[2])]
    assert [keys(c) for c in got[:4]] == [keys(c) for c in want[:4]]
    call_ = got[1]["choices"][0]["delta"]["tool_calls"][0]
    assert call_["function"]["name"] == "get_weather"
    assert call_["id"].startswith("call_") and len(call_["id"]) == 29
    assert keys(got[-1]) == keys(want[-1])
    assert got[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] == "{}"
    thinking = chat(srv.url, tools=TOOLS, tool_choice=named)["choices"][0]["message"]
    assert thinking["tool_calls"] is None  # random weights stay in <think> when thinking is on
    auto = chat(srv.url, tools=TOOLS, tool_choice="auto")
    assert keys(auto) == keys(json.loads(captured(captures, "chat_tool_auto.txt")[2]))
    assert auto["choices"][0]["message"]["tool_calls"] is None
    required = chat(srv.url, tools=TOOLS, tool_choice="required")["choices"][0]["message"]
    assert required == json.loads(captured(captures, "chat_tool_required.txt")[2])["choices"][0]["message"]


def test_bad_body_gets_the_captured_400_error(srv, captures):
    status, _, body = call(srv.url + "/v1/chat/completions", {"model": "qwen3-4b", "messages": "notalist"})
    want_status, _, want = captured(captures, "chat_bad_body.txt")
    assert status == want_status == 400
    got, want = json.loads(body), json.loads(want)
    assert keys(got) == keys(want) and got["type"] == "Bad Request" and got["code"] == 400
    assert got["message"].split("\n")[:2] == want["message"].split("\n")[:2]
    assert call(srv.url + "/nope")[0] == 404


def test_completions_and_generate_stream_match_captures(srv, captures):
    status, _, body = call(srv.url + "/v1/completions", {"model": "qwen3-4b", "prompt": "Hello", "max_tokens": 8})
    assert status == 200
    assert keys(json.loads(body)) == keys(json.loads(captured(captures, "completions.txt")[2]))
    status, _, body = call(srv.url + "/generate", {"text": "Hi", "stream": True,
                                                    "sampling_params": {"max_new_tokens": 8}})
    got = [json.loads(e) for e in sse(body)]
    want = [json.loads(e) for e in sse(captured(captures, "generate_stream.txt")[2])]
    assert len(got) == 8 and [keys(got[i]) for i in (0, 1, -1)] == [keys(want[i]) for i in (0, 1, -1)]
    assert got[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
    assert got[-1]["text"].startswith(got[0]["text"]) and len(got[-1]["output_ids"]) == 8


def test_second_identical_long_prompt_hits_the_prefix_cache_and_is_faster(free_port):
    # 500 us per uncached token: ~2 s of prefill saved, so a scheduling stall on a busy CI core cannot flip it
    with launch(free_port, *BASE_ARGS, env={"STANDIN_PREFILL_US_PER_TOKEN": "500"}) as srv:
        text = " ".join(f"word{i % 97} token{i % 89}" for i in range(2000))
        messages = [{"role": "user", "content": text}]
        t0 = time.perf_counter()
        first = chat(srv.url, messages=messages, max_tokens=1)["usage"]
        t1 = time.perf_counter()
        second = chat(srv.url, messages=messages, max_tokens=1)["usage"]
        t2 = time.perf_counter()
        assert first["prompt_tokens"] > 4000
        assert first["prompt_tokens_details"] is None  # nothing cached: details are null, as captured
        assert second["prompt_tokens_details"]["cached_tokens"] == second["prompt_tokens"] - 1
        assert (t1 - t0) - (t2 - t1) > 1.0
        status, _, body = call(srv.url + "/flush_cache", b"", method="POST")
        assert status == 200 and body.startswith(b"Cache flushed.\n")
        assert chat(srv.url, messages=messages, max_tokens=1)["usage"]["prompt_tokens_details"] is None


def _wait_for_gauge(url: str, name: str, value: float, timeout_s: float = 10.0) -> str:
    """Poll /metrics until gauge `name` reads `value` (not a fixed sleep: a busy CI core is slow to admit)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = call(url + "/metrics")[2].decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        if fams[name].samples[0].value == value or time.monotonic() > deadline:
            return text
        time.sleep(0.02)


def test_flush_is_refused_and_metrics_are_live_while_a_request_runs(srv, captures):
    worker = threading.Thread(target=chat, args=(srv.url,), kwargs={"max_tokens": 1000})  # ~2 s of decode
    worker.start()
    text = _wait_for_gauge(srv.url, "sglang:num_running_reqs", 1)
    status, _, body = call(srv.url + "/flush_cache", b"", method="POST")
    worker.join()
    want_status, _, want_body = captured(captures, "POST_flush_cache_busy.txt")
    assert (status, body) == (want_status, want_body)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["sglang:num_running_reqs"].samples[0].value == 1
    after = {f.name: f for f in text_string_to_metric_families(call(srv.url + "/metrics")[2].decode())}
    assert after["sglang:num_running_reqs"].samples[0].value == 0
    served = [s for s in after["sglang:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in served) >= 2
    captured_names = {f.name for f in text_string_to_metric_families(
        (captures / "metrics_after.txt").read_text())}
    assert set(after) == captured_names


def test_queueing_shows_in_num_queue_reqs(free_port):
    with launch(free_port, "--enable-metrics", env={"STANDIN_MAX_RUNNING": "1", "STANDIN_ITL_MS": "5"}) as srv:
        workers = [threading.Thread(target=chat, args=(srv.url,), kwargs={"max_tokens": 400}) for _ in range(2)]
        for w in workers:
            w.start()
        text = _wait_for_gauge(srv.url, "sglang:num_queue_reqs", 1)
        for w in workers:
            w.join()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["sglang:num_queue_reqs"].samples[0].value == 1


def test_api_key_from_yaml_config_is_required_except_on_health_and_metrics(free_port, tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("api-key: s3cret\nenable-metrics: true\ndisable-radix-cache: true\n")
    with launch(free_port, "--config", str(config), "--enable-cache-report") as srv:
        status, _, body = call(srv.url + "/v1/models")
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
        assert call(srv.url + "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(srv.url + "/flush_cache", b"", method="POST")[0] == 401
        assert call(srv.url + "/health")[0] == 200 and call(srv.url + "/metrics")[0] == 200
        auth = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
        body = {"model": "m", "messages": [{"role": "user", "content": "same prompt " * 50}], "max_tokens": 1}
        for _ in range(2):
            status, _, raw = call(srv.url + "/v1/chat/completions", body, headers=auth)
            assert status == 200
        assert json.loads(raw)["usage"]["prompt_tokens_details"] is None  # --disable-radix-cache from YAML


def test_unknown_flag_exits_2_like_argparse_and_help_is_the_captured_one(captures):
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--no-such-flag"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=standin_env(), timeout=30)
    assert proc.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --no-such-flag" in proc.stderr
    proc = subprocess.run(argv[:3] + ["--help"], capture_output=True, text=True, env=standin_env(), timeout=30)
    assert proc.returncode == 0 and "--tokenizer-worker-num TOKENIZER_WORKER_NUM" in proc.stdout
    proc = subprocess.run(argv[:3] + ["--port", "1"], capture_output=True, text=True, env=standin_env(), timeout=30)
    assert proc.returncode == 2 and "the following arguments are required: --model-path" in proc.stderr


def test_port_in_use_exits_1_with_uvicorn_bind_error(srv):
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(srv.port)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=standin_env(), timeout=30)
    assert proc.returncode == 1
    assert f"error while attempting to bind on address ('127.0.0.1', {srv.port}): address already in use" in proc.stderr


def test_health_is_503_during_startup_then_200_and_crash_knob_exits_1(free_port):
    with launch(free_port, env={"STANDIN_STARTUP_S": "1.0"}, wait=False) as srv:
        codes = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and 200 not in codes:
            try:
                codes.append(call(srv.url + "/health")[0])
            except urllib.error.URLError:
                codes.append(None)
            time.sleep(0.03)
        log = srv.log()
    assert codes[0] is None and 503 in codes and codes[-1] == 200
    assert "The server is fired up and ready to roll!" in log and "server_args=ServerArgs(" in log
    with launch(free_port, env={"STANDIN_CRASH_AFTER_S": "0.3", "STANDIN_STARTUP_S": "5"}, wait=False) as srv:
        assert srv.proc.wait(10) == 1
        assert "Scheduler hit an exception" in srv.log()


def test_start_up_logs_the_schedulers_phases_with_its_rank_tags_as_sglang_does(free_port):
    """SGLang's scheduler of TP > 1 stamps its lines '[... TP0]'; a graph kind turned off is not captured, so its
    phase is absent from the timeline `serve.sh start` prints."""
    with launch(free_port, "--tp-size", "2", "--disable-piecewise-cuda-graph", env={"STANDIN_STARTUP_S": "0.2"}) \
            as srv:
        lines = srv.log().splitlines()
    assert any(re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Load weight end\. ", line) for line in lines)
    assert any(re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=", line) for line in lines)  # launcher
    found = startup.marker_times(lines)
    assert {"launcher", "scheduler start", "weights", "KV pool", "decode graphs"} <= set(found)
    assert "prefill graphs" not in found
