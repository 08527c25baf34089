"""Pure parts of smoke_test: endpoint resolution, key handling, result formatting, prompts, chat commands."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from llmhost import chat, client, smoke


def test_endpoint_defaults_come_from_config_env_and_flags_win(tmp_path):
    key = tmp_path / "key"
    key.write_text("from-file\n")
    env = {"PORT": "31234", "SERVED_MODEL_NAME": "served", "API_KEY_FILE": str(key)}
    ep = client.resolve(None, None, None, env)
    assert (ep.base_url, ep.model, ep.api_key, ep.port) == ("http://127.0.0.1:31234/v1", "served", "from-file", 31234)
    assert client.resolve(None, None, None, {**env, "OPENAI_API_KEY": "from-env"}).api_key == "from-env"
    other = tmp_path / "other"
    other.write_text("from-flag")
    ep = client.resolve("http://h:9/", "m", str(other), {**env, "OPENAI_API_KEY": "from-env"})
    assert (ep.base_url, ep.model, ep.api_key) == ("http://h:9/v1", "m", "from-flag")
    assert client.resolve(None, None, None, {"API_KEY_FILE": ""}).api_key is None


def test_the_key_never_shows_in_repr_or_public_view():
    ep = client.Endpoint("http://127.0.0.1:1/v1", "m", "s3cret")
    assert "s3cret" not in repr(ep) and "s3cret" not in json.dumps(ep.public())
    assert ep.public()["api_key_set"] is True
    assert "s3cret" not in json.dumps(smoke.summary(ep, []))


def test_unreadable_key_file_is_a_client_error(tmp_path):
    with pytest.raises(client.ClientError, match="cannot read API key file"):
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
