"""Pure parts of smoke_test: endpoint resolution, key handling, result formatting, prompts, chat commands."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from llmhost.smoke import chat, checks as smoke
from llmhost import client



def test_endpoint_defaults_come_from_config_env_and_flags_win(tmp_path):
    key = tmp_path / "key"
    key.write_text("from-file\n")
    key.chmod(0o600)
    env = {"PORT": "31234", "SERVED_MODEL_NAME": "served", "API_KEY_FILE": str(key)}
    ep = client.resolve(None, None, None, env)
    assert (ep.base_url, ep.model, ep.api_key, ep.port) == ("http://127.0.0.1:31234/v1", "served", "from-file", 31234)
    assert client.resolve(None, None, None, {**env, "OPENAI_API_KEY": "from-env"}).api_key == "from-env"
    other = tmp_path / "other"
    other.write_text("from-flag")
    other.chmod(0o600)
    ep = client.resolve("http://h:9/", "m", str(other), {**env, "OPENAI_API_KEY": "from-env"})
    assert (ep.base_url, ep.model, ep.api_key) == ("http://h:9/v1", "m", "from-flag")
    assert client.resolve(None, None, None, {"API_KEY_FILE": ""}).api_key is None


def test_the_key_never_shows_in_repr_or_public_view():
    ep = client.Endpoint("http://127.0.0.1:1/v1", "m", "s3cret")
    assert "s3cret" not in repr(ep) and "s3cret" not in json.dumps(ep.public())
    assert ep.public()["api_key_set"] is True
    assert "s3cret" not in json.dumps(smoke.summary(ep, []))


def test_unreadable_key_file_is_a_client_error(tmp_path):
    with pytest.raises(client.ClientError, match=r"^--api-key-file .*missing cannot be read"):
        client.resolve("http://h:1", "m", str(tmp_path / "missing"), {})


def test_tunnel_hint_names_the_port_on_both_sides():
    assert client.tunnel_hint(30000) == "ssh -N -L 30000:127.0.0.1:30000 user@gpu-host"


def test_usage_reads_cached_and_reasoning_tokens_from_sdk_objects():
    usage = SimpleNamespace(prompt_tokens=10, completion_tokens=2, model_extra={"reasoning_tokens": 2},
                            prompt_tokens_details=SimpleNamespace(cached_tokens=9))
    assert smoke.usage_dict(usage) == {"prompt_tokens": 10, "completion_tokens": 2, "cached_tokens": 9,
                                       "reasoning_tokens": 2}
    bare = SimpleNamespace(prompt_tokens=1, completion_tokens=1, model_extra=None, prompt_tokens_details=None)
    assert smoke.usage_dict(bare)["cached_tokens"] is None and smoke.usage_dict(None) is None


def test_long_prompt_is_about_4k_tokens_and_differs_per_nonce():
    a, b = smoke.long_prompt("aaa"), smoke.long_prompt("bbb")
    assert 3000 <= len(a.split()) <= 3500  # "token3" splits in two for Qwen: ~4.1k tokens in all
    assert a != b and a.split("\n", 1)[1] == b.split("\n", 1)[1]


def test_failed_check_is_formatted_with_its_error_and_counts_in_the_summary():
    bad = smoke.CheckResult("tools", False, 0.5, "in", "out", {"prompt_tokens": 3}, "detail", "boom")
    good = smoke.CheckResult("chat", True, 0.1, "hi", "there")
    text = smoke.format_result(bad)
    assert text.startswith("[smoke] tools        FAIL  0.500s  boom") and "    usage : prompt 3" in text
    summary = smoke.summary(client.Endpoint("http://x/v1", "m"), [good, bad])
    assert summary["ok"] is False and [c["ok"] for c in summary["checks"]] == [True, False]
    assert smoke.summary(client.Endpoint("http://x/v1", "m"), [good])["ok"] is True


def test_fake_weather_is_deterministic_and_tolerates_bad_arguments():
    assert chat.fake_weather('{"city": "Oslo"}') == chat.fake_weather('{"city": "oslo"}') | {"city": "Oslo"}
    assert chat.fake_weather("{}")["city"] == "Paris" and chat.fake_weather("not json")["city"] == "Paris"


def test_chat_commands_change_the_session(capsys):
    session = chat.Session()
    out = chat.Printer(sys.stdout)
    session.messages.append({"role": "user", "content": "hi"})
    assert chat.command("/system be brief", session, out) and session.system == "be brief"
    assert chat.command("/tools", session, out) and session.tool_mode == "auto"
    assert chat.command("/tools forced", session, out) and session.tool_mode == "forced"
    assert chat.command("/tools", session, out) and session.tool_mode == "off"
    chat.command("/history", session, out)
    assert "system: be brief\nuser: hi\n[1 messages]" in capsys.readouterr().out
    assert chat.command("/reset", session, out) and session.messages == [] and session.system == "be brief"
    assert chat.command("/nonsense", session, out)
    assert chat.command("/quit", session, out) is False


def test_smoke_test_imports_no_heavy_or_server_side_packages(repo):
    code = ("import sys; sys.argv=['smoke_test.py']; import smoke_test; "
            "bad = [m for m in ('openai', 'requests', 'pandas', 'plotly', 'prometheus_client') if m in sys.modules];"
            "print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_a_mistyped_tools_mode_is_refused_not_toggled(capsys):
    session = chat.Session(tool_mode="forced")
    out = chat.Printer(sys.stdout)
    for typo in ("force", "of", "yes"):
        assert chat.command(f"/tools {typo}", session, out) and session.tool_mode == "forced"
        assert f"[unknown tool mode '{typo}'" in capsys.readouterr().out
    assert chat.command("/tools OFF", session, out) and session.tool_mode == "off"


class ScriptedStream:
    """A streamed reply calling get_weather every time, as a model stuck on tools would."""

    def __init__(self, n: int):
        call = SimpleNamespace(index=0, id=f"call_{n}", function=SimpleNamespace(name="get_weather",
                                                                                 arguments='{"city": "Oslo"}'))
        delta = SimpleNamespace(content=None, reasoning_content=None, tool_calls=[call])
        self.chunks = [SimpleNamespace(usage=None, choices=[SimpleNamespace(delta=delta)])]

    def __iter__(self):
        return iter(self.chunks)

    def close(self):
        pass


def test_the_tool_loop_never_leaves_a_call_without_its_tool_reply(capsys):
    """OpenAI's protocol: each assistant tool_call is answered by a tool message with its id before the next turn."""
    sent = []

    def create(**kw):
        sent.append(kw)
        return ScriptedStream(len(sent))

    api = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    session = chat.Session(tool_mode="auto", messages=[{"role": "user", "content": "weather?"}])
    chat.reply(api, client.Endpoint("http://x/v1", "m"), session, chat.Printer(sys.stdout), 16)
    assert len(sent) == chat.MAX_TOOL_ROUNDS + 1 and sent[-1]["tool_choice"] == "none"
    assert all(kw["tool_choice"] == "auto" for kw in sent[:-1])
    asked = [c["id"] for m in session.messages for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in session.messages if m["role"] == "tool"]
    assert asked == answered == [f"call_{n}" for n in range(1, chat.MAX_TOOL_ROUNDS + 1)]
    assert session.messages[-1]["role"] == "assistant" and "tool_calls" not in session.messages[-1]


def test_weights_come_from_server_info_and_an_unreadable_one_is_said(monkeypatch):
    ep = client.Endpoint("http://h:1/prefix/v1", "m")
    asked = []

    def get(url, cast_to):
        asked.append(url)
        if url.endswith("/get_server_info"):
            return {"load_format": "dummy"}
        raise RuntimeError("404")

    assert client.load_format(SimpleNamespace(get=get), ep) == ("dummy", "/get_server_info")
    assert asked == ["http://h:1/prefix/server_info", "http://h:1/prefix/get_server_info"]
    assert client.load_format(SimpleNamespace(get=lambda url, cast_to: {}), ep) == (None, "/server_info unreadable")
    import smoke_test

    args = SimpleNamespace(weights="auto")
    monkeypatch.setattr(client, "load_format", lambda api, ep: (None, "/server_info unreadable"))
    real, source = smoke_test.weights(args, ep, None)
    assert real is False and "unreadable" in source and "--weights real" in source
    monkeypatch.setattr(client, "load_format", lambda api, ep: ("auto", "/server_info"))
    assert smoke_test.weights(args, ep, None) == (True, "load_format auto (/server_info)")
    assert smoke_test.weights(SimpleNamespace(weights="random"), ep, None) == (False, "--weights random")


def test_behind_sglangs_router_the_weights_are_assumed_random_and_the_router_is_named():
    """sglang-router 0.3.2 has no /server_info and answers /get_server_info with its own counts (captured on the
    H200, tests/captures/router_routes.txt): no load_format reaches the laptop, and the reason says so."""
    ep = client.Endpoint("http://h:1/v1", "m")

    def get(url, cast_to):
        if url.endswith("/get_server_info"):  # sent as text/plain: the SDK hands the text over
            return '{"router_manager":true,"routers_count":1,"workers_count":2}'
        raise RuntimeError("404")

    fmt, why = client.load_format(SimpleNamespace(get=get), ep)
    assert fmt is None and "router" in why


def test_prefix_cache_fails_when_repeats_are_not_faster_even_if_cached(monkeypatch):
    """Medians decide: a cache that reports hits but saves no time (or a slow tunnel on every repeat) fails."""
    calls = []

    def create(**kw):
        calls.append(kw)
        repeat = sum(c["messages"] == kw["messages"] for c in calls) > 1
        prompt = 4000 if len(kw["messages"][0]["content"]) > 100 else 3
        usage = SimpleNamespace(prompt_tokens=prompt, completion_tokens=1, model_extra={},
                                prompt_tokens_details=SimpleNamespace(cached_tokens=prompt - 1 if repeat else 0))
        return SimpleNamespace(usage=usage)

    clock = iter(range(1000))
    monkeypatch.setattr(smoke.time, "perf_counter", lambda: float(next(clock)))  # every call takes 1 s
    api = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    ctx = smoke.Ctx(api, client.Endpoint("http://x/v1", "m"), ["m"], smoke.Options())
    result = smoke.check_prefix_cache(ctx)
    assert not result.ok and "not faster than cold sends" in result.detail
    assert len(calls) == 7 and calls[0]["messages"][0]["content"] == "Hi"  # warm-up, then 3 pairs


LAPTOP_SIDE = ("smoke_test.py", "llmhost/client.py", "llmhost/smoke/checks.py", "llmhost/smoke/chat.py",
               "llmhost/smoke/__init__.py", "llmhost/config.py", "llmhost/settings.py", "llmhost/deps.py",
               "llmhost/cli.py")


@pytest.mark.parametrize("path", LAPTOP_SIDE)
def test_laptop_side_code_stays_python_3_9(repo, path):
    """macOS ships Python 3.9: smoke_test and what it imports ran there (verified once by hand); keep it so."""
    import ast

    tree = ast.parse((repo / path).read_text(), feature_version=(3, 9))  # grammar: no match statements
    slots = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg in ("slots", "kw_only")]
    assert not slots, f"{path}: dataclass slots=/kw_only= need Python 3.10 (lines {slots})"
    # `X | None` evaluated at runtime (outside annotations, which `from __future__ import annotations` defers)
    annotations = {id(n) for node in ast.walk(tree) for n in ast.walk(getattr(node, "annotation", None) or ast.Pass())}
    annotations |= {id(n) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.returns for n in ast.walk(node.returns)}
    typeish = (ast.Name, ast.Attribute, ast.Subscript)

    def is_type(node: ast.AST) -> bool:
        return isinstance(node, typeish) or (isinstance(node, ast.Constant) and node.value is None)

    unions = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)
              and id(node) not in annotations and (
                  (isinstance(node.right, ast.Constant) and node.right.value is None)
                  or (is_type(node.left) and is_type(node.right)
                      and any(isinstance(x, ast.Name) and x.id in ("int", "str", "float", "bool", "bytes", "list",
                                                                    "dict", "tuple", "set") for x in (node.left, node.right))))]
    assert not unions, f"{path}: a runtime X | Y type union needs Python 3.10 (lines {unions})"

