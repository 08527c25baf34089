"""smoke_test.py check against the SGLang stand-in: all checks pass, and each failure mode fails loudly and by name."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from pathlib import Path

import pytest

from standin.harness import free_port, launch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # smoke_test.py is a script at the repo root, not part of the package
import smoke_test  # noqa: E402

SERVED = "qwen3-4b"
ARGS = ("--served-model-name", SERVED, "--enable-metrics", "--enable-cache-report")
RANDOM = ("--load-format", "dummy")  # random weights, as the GPU suite serves them
PARIS = '{"city": "Paris"}'


def smoke(capsys, *argv: str) -> tuple[int, str, str]:
    """Run smoke_test.main in-process (imports openai once for the whole module)."""
    code = smoke_test.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server():
    port = free_port()
    # 200 us per uncached token: ~0.8 s saved per repeat, far above the noise of a busy 2-core CI machine
    with launch(port, *ARGS, *RANDOM, env={"STANDIN_PREFILL_US_PER_TOKEN": "200"}) as srv:
        yield srv


def test_all_checks_pass_and_json_summary_is_the_last_line(server, repo):
    env = {**os.environ, "OPENAI_API_KEY": ""}
    proc = subprocess.run([sys.executable, str(repo / "smoke_test.py"), "--base-url", server.url, "--model", SERVED,
                           "--json"], capture_output=True, text=True, timeout=120, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = last_json(proc.stdout)
    assert summary["ok"] is True and summary["model"] == SERVED and summary["api_key_set"] is False
    assert summary["weights"] == "random" and summary["weights_source"] == "load_format dummy (/server_info)"
    checks = {c["name"]: c for c in summary["checks"]}
    assert list(checks) == ["chat", "model", "tools", "prefix_cache", "stream"]
    assert all(c["ok"] and c["latency_s"] > 0 for c in checks.values())
    cache = checks["prefix_cache"]
    assert cache["usage"]["cached_tokens"] >= 0.9 * cache["usage"]["prompt_tokens"] > 3000
    assert cache["extra"]["repeat_median_s"] < cache["extra"]["cold_median_s"]
    assert len(cache["extra"]["cold_latency_s"]) == len(cache["extra"]["repeat_latency_s"]) == 3
    assert checks["stream"]["extra"]["chunks"] > 1 and checks["stream"]["extra"]["ttft_s"] > 0
    assert "forced: get_weather(" in checks["tools"]["output"]
    for name in checks:  # the human-readable block shows input, output and usage of each check
        assert f"[smoke] {name:<12} PASS" in proc.stdout
    assert "    usage : prompt" in proc.stdout and "    input : " in proc.stdout


def test_wrong_served_name_fails_the_model_check(server, capsys):
    code, out, _ = smoke(capsys, "--base-url", server.url, "--model", "llama-3", "--only", "model", "--json")
    assert code == 1
    check = last_json(out)["checks"][0]
    assert check["name"] == "model" and not check["ok"]
    assert "serves ['qwen3-4b'] but we expect ['llama-3']" in check["detail"]
    assert "FAILED: model" in out


def test_no_server_prints_the_tunnel_command(free_port, capsys):
    code, out, err = smoke(capsys, "--base-url", f"http://127.0.0.1:{free_port}/v1", "--model", SERVED)
    assert code == 1
    assert f"ssh -N -L {free_port}:127.0.0.1:{free_port} user@gpu-host" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out


def test_prefix_cache_check_fails_when_the_radix_cache_is_off(free_port, capsys):
    with launch(free_port, *ARGS, *RANDOM, "--disable-radix-cache"):
        code, out, _ = smoke(capsys, "--base-url", f"http://127.0.0.1:{free_port}", "--model", SERVED,
                             "--only", "prefix_cache", "--json")
    assert code == 1
    check = last_json(out)["checks"][0]
    assert check["name"] == "prefix_cache" and not check["ok"] and "reused 0/" in check["detail"]


def test_tools_check_fails_when_no_tool_call_comes_back(free_port, capsys):
    with launch(free_port, *ARGS, *RANDOM, env={"STANDIN_NO_TOOL_CALLS": "1"}):
        code, out, _ = smoke(capsys, "--base-url", f"http://127.0.0.1:{free_port}", "--model", SERVED,
                             "--only", "tools", "--json")
    assert code == 1
    check = last_json(out)["checks"][0]
    assert check["name"] == "tools" and "forced: no tool call in the reply" in check["detail"]


def test_forced_tools_accept_random_weight_arguments_only_without_real_weights(free_port, capsys):
    base = ("--base-url", f"http://127.0.0.1:{free_port}", "--model", SERVED, "--only", "tools", "--json")
    with launch(free_port, *ARGS, *RANDOM, env={"STANDIN_TOOL_ARGUMENTS": "-80292"}):
        code, out, _ = smoke(capsys, *base, "--tool-mode", "forced")
        assert code == 0
        assert "structure only" in last_json(out)["checks"][0]["detail"]
        code, out, _ = smoke(capsys, *base, "--tool-mode", "forced", "--real-weights")
    assert code == 1 and "arguments are not a JSON object" in last_json(out)["checks"][0]["detail"]


@pytest.mark.parametrize("forced_args, natural_args, needle", [
    (PARIS, PARIS, ""),
    ("{}", PARIS, "forced: arguments {} do not give Paris"),
    (PARIS, '{"city": "Lyon"}', "natural: arguments"),
    (PARIS, None, "natural: no tool call"),
])
def test_real_weights_are_read_from_the_server_and_must_fill_in_the_arguments(free_port, capsys, forced_args,
                                                                              natural_args, needle):
    """No --load-format = real weights (/server_info says auto): both tool modes run and the city must be Paris."""
    env = {"STANDIN_TOOL_ARGUMENTS": forced_args, **({"STANDIN_NATURAL_TOOL_ARGUMENTS": natural_args}
                                                      if natural_args else {})}
    with launch(free_port, *ARGS, env=env):
        code, out, _ = smoke(capsys, "--base-url", f"http://127.0.0.1:{free_port}", "--model", SERVED,
                             "--only", "tools", "--json")
    summary = last_json(out)
    assert summary["weights"] == "real" and summary["weights_source"] == "load_format auto (/server_info)"
    check = summary["checks"][0]
    if not needle:
        assert code == 0 and check["detail"] == "get_weather(city=Paris) called", check
        assert check["output"].startswith("forced: get_weather(") and "natural: get_weather(" in check["output"]
    else:
        assert code == 1 and needle in check["detail"], check


def test_natural_tool_mode_fails_on_random_weights(server, capsys):
    code, out, _ = smoke(capsys, "--base-url", server.url, "--model", SERVED, "--only", "tools",
                         "--tool-mode", "natural", "--json")
    assert code == 1 and "natural: no tool call" in last_json(out)["checks"][0]["detail"]


def test_api_key_missing_wrong_and_right(free_port, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    key_file, wrong_file = tmp_path / "key", tmp_path / "wrong"
    key_file.write_text("k3y-value\n")
    wrong_file.write_text("nope\n")
    key_file.chmod(0o600)
    wrong_file.chmod(0o600)
    base = ("--base-url", f"http://127.0.0.1:{free_port}", "--model", SERVED, "--only", "chat")
    printed = []
    with launch(free_port, *ARGS, "--api-key", "k3y-value"):
        code, out, err = smoke(capsys, *base, "--api-key-file", str(wrong_file), "--json")
        printed.append(out + err)
        assert code == 1 and "401" in err and "was rejected" in err
        monkeypatch.setenv("API_KEY_FILE", "")
        code, out, err = smoke(capsys, *base)
        printed.append(out + err)
        assert code == 1 and "is required" in err and "--api-key-file" in err
        code, out, err = smoke(capsys, *base, "--api-key-file", str(key_file), "--json")
        printed.append(out + err)
        assert code == 0, err
        monkeypatch.setenv("OPENAI_API_KEY", "k3y-value")
        code, out, err = smoke(capsys, *base, "--json")
        printed.append(out + err)
        assert code == 0 and last_json(out)["api_key_set"] is True
    assert all("k3y-value" not in text and "nope" not in text for text in printed)  # no key is ever printed


def test_missing_key_file_and_bad_usage_are_one_line_errors(capsys, tmp_path):
    code, _, err = smoke(capsys, "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                         "--api-key-file", str(tmp_path / "absent"))
    assert code == 1 and err.count("\n") == 1 and "--api-key-file" in err and "absent cannot be read" in err
    with pytest.raises(SystemExit) as exc:
        smoke_test.main(["check", "--only", "nonsense"])
    assert exc.value.code == 2


@pytest.mark.parametrize("url, needle", [
    ("localhost:30000", "needs a scheme and a host"),
    ("http://127.0.0.1:abc/v1", "Port could not be cast"),
    ("http://127.0.0.1:99999/v1", "Port out of range"),
    ("http://[::1", "Invalid IPv6 URL"),
])
def test_a_bad_base_url_is_a_usage_error_not_a_traceback_or_a_wrong_tunnel_hint(capsys, url, needle):
    with pytest.raises(SystemExit) as exc:
        smoke_test.main(["--base-url", url, "--model", "m"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_json_mode_prints_a_summary_line_on_every_early_failure(tmp_path, capsys, monkeypatch):
    code, out, err = smoke(capsys, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--json",
                           "--api-key-file", str(tmp_path / "absent"))
    assert code == 1 and "absent cannot be read" in err
    assert last_json(out) == {"ok": False, "error": err.strip().removeprefix("smoke_test: "), "checks": []}
    monkeypatch.setitem(sys.modules, "openai", None)
    code, out, _ = smoke(capsys, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--json")
    assert code == 1 and last_json(out)["ok"] is False and "pip install" in last_json(out)["error"]


def _request_to(listening: socket.socket, path: bytes) -> socket.socket:
    """The first connection whose request names `path`: a port can also be one another test's client still tries
    (a server it stopped), and its connection must not count as ours, so `path` carries a prefix of this test's own."""
    while True:
        conn, _ = listening.accept()
        conn.settimeout(60)
        if path in conn.recv(4096):
            return conn
        conn.close()


def test_ctrl_c_against_a_hung_server_exits_130_with_one_line_and_the_json(repo):
    """A tunnel that accepts but never answers is when users press Ctrl-C: no traceback, a JSON line still."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", free_port()))  # below the ephemeral range: no other test's client comes here by chance
        hung.listen()
        prefix = f"/hung{os.getpid()}"  # and if one did, its request would not carry this path
        url = f"http://127.0.0.1:{hung.getsockname()[1]}{prefix}/v1"
        hung.settimeout(60)
        proc = subprocess.Popen([sys.executable, str(repo / "smoke_test.py"), "--base-url", url, "--model", "m",
                                 "--json"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        conn = _request_to(hung, f"{prefix}/v1/models".encode())  # ours asked and now waits for an answer never sent
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        conn.close()
    assert proc.returncode == 130 and "Traceback" not in err and "interrupted" in err
    assert last_json(out) == {"ok": False, "interrupted": True, "error": "interrupted", "checks": []}


def test_a_non_utf8_console_does_not_crash_on_random_weight_text(server, repo):
    env = {**os.environ, "OPENAI_API_KEY": "", "PYTHONIOENCODING": "cp1252"}
    proc = subprocess.run([sys.executable, str(repo / "smoke_test.py"), "--base-url", server.url, "--model", SERVED,
                           "--only", "chat", "--json"], capture_output=True, timeout=120, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert last_json(proc.stdout.decode("cp1252"))["checks"][0]["ok"]


def test_a_laptop_without_the_openai_package_gets_the_install_command(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    code, _, err = smoke(capsys, "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert code == 1 and err.count("\n") == 1 and "pip install -U openai" in err
