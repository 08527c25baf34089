"""config.env is read identically by Python and bash; overrides and validation behave as documented."""
from __future__ import annotations

import os
import subprocess

import pytest

from llmhost import config


def test_env_override_wins_and_derived_paths_follow_it():
    cfg = config.load({"HOME": os.environ["HOME"], "WORK_DIR": "/srv/llm", "PORT": "31000"})
    assert cfg.port == 31000
    assert cfg.model_dir == "/srv/llm/models/Qwen3-4B"
    assert cfg.sglang_python == "/srv/llm/venv/bin/python"
    assert cfg.base_url == "http://127.0.0.1:31000"


def test_parse_rules_skip_comments_split_first_equals_and_expand():
    values = config.parse_lines("# c\n\nA=x=y\nB=${A}/z\nC=~/d\n", {})
    assert values["A"] == "x=y"
    assert values["B"] == "x=y/z"
    assert values["C"].endswith("/d") and not values["C"].startswith("~")


def test_undefined_reference_and_bad_lines_are_one_line_errors():
    with pytest.raises(config.ConfigError, match=r"\$\{NOPE\}"):
        config.parse_lines("A=${NOPE}\n", {})
    with pytest.raises(config.ConfigError, match="expected KEY=value"):
        config.parse_lines("just words\n", {})


def test_bad_port_and_unknown_key_are_rejected(tmp_path):
    with pytest.raises(config.ConfigError, match=r"^environment: PORT=http is not a port \(1-65535\)$"):
        config.load({"PORT": "http"})
    with pytest.raises(config.ConfigError, match=r"^environment: PORT=70000 is not a port"):
        config.load({"PORT": "70000"})
    local = tmp_path / "local.env"
    local.write_text("PROT=1\n")
    with pytest.raises(config.ConfigError, match=r"local.env:1: unknown setting PROT"):
        config.load({"LLMHOST_CONFIG": str(local)})


def test_local_file_overrides_defaults_but_environment_wins(tmp_path):
    local = tmp_path / "local.env"
    local.write_text("PORT=32000\nHOST=0.0.0.0\n")
    cfg = config.load({"LLMHOST_CONFIG": str(local), "HOST": "127.0.0.2"})
    assert cfg.port == 32000
    assert cfg.host == "127.0.0.2"


def test_bash_sees_exactly_the_python_values(repo, tmp_path):
    env = {**os.environ, "WORK_DIR": str(tmp_path / "w"), "SERVER_EXTRA_ARGS": "--a 'b c'"}
    script = 'source lib.sh; load_config; for k in "$@"; do printf "%s=%s\\n" "$k" "${!k}"; done'
    keys = list(config.CHECKS)
    out = subprocess.run(["bash", "-c", script, "bash", *keys], cwd=repo, env=env,
                         capture_output=True, text=True, check=True).stdout
    from_bash = dict(line.split("=", 1) for line in out.splitlines())
    python_values = config.load_values(env)
    assert from_bash == {k: python_values[k] for k in keys}
    assert from_bash["SERVER_EXTRA_ARGS"] == "--a 'b c'"


def test_local_work_dir_moves_the_paths_derived_from_it_like_an_environment_override(tmp_path):
    local = tmp_path / "local.env"
    local.write_text("WORK_DIR=/data/llm\nSERVED_MODEL_NAME=${MODEL_ID}\n")
    cfg = config.load({"HOME": os.environ["HOME"], "LLMHOST_CONFIG": str(local)})
    assert cfg.work_dir == "/data/llm"
    assert cfg.model_dir == "/data/llm/models/Qwen3-4B"
    assert cfg.sglang_python == "/data/llm/venv/bin/python"
    assert cfg.flashinfer_workspace_base == "/data/llm/flashinfer-cache"
    assert cfg.served_model_name == "Qwen/Qwen3-4B"
    env_wins = config.load({"HOME": os.environ["HOME"], "LLMHOST_CONFIG": str(local), "WORK_DIR": "/srv"})
    assert env_wins.model_dir == "/srv/models/Qwen3-4B"


def test_unreadable_api_key_file_names_the_setting(tmp_path):
    cfg = config.load({"HOME": os.environ["HOME"], "API_KEY_FILE": str(tmp_path / "absent")})
    with pytest.raises(OSError, match=r"API_KEY_FILE=.*absent cannot be read"):
        cfg.api_key()


def test_base_url_brackets_an_ipv6_loopback_host():
    from urllib.parse import urlsplit

    url = config.load({"HOME": os.environ["HOME"], "HOST": "::1", "PORT": "30001"}).base_url
    assert url == "http://[::1]:30001"
    assert (urlsplit(url).hostname, urlsplit(url).port) == ("::1", 30001)
    assert config.load({"HOME": os.environ["HOME"], "HOST": "0.0.0.0"}).base_url == "http://127.0.0.1:30000"


def test_every_value_remembers_the_file_and_line_or_the_environment_it_came_from(tmp_path):
    local = tmp_path / "local.env"
    local.write_text("# mine\n\nPORT=32000\n")
    cfg = config.load({"HOME": os.environ["HOME"], "LLMHOST_CONFIG": str(local), "HOST": "127.0.0.2"})
    assert cfg.source("PORT") == f"{local}:3"
    assert cfg.source("host") == "environment"
    line = next(n for n, text in enumerate(config.DEFAULT_FILE.read_text().splitlines(), 1) if text.startswith("MODEL_DIR="))
    assert cfg.source("MODEL_DIR") == f"config.env:{line}"


@pytest.mark.parametrize("text, message", [
    (b"PORT=1\nHOST=\xff\n", r"local.env:2: byte 0xff is not UTF-8 text"),
    (b"PORT=1\nwords\n", r"local.env:2: expected KEY=value"),
    (b"READY_TIMEOUT_S=-5\n", r"local.env:1: READY_TIMEOUT_S=-5 must be >= 1 seconds$"),
    (b"HOST=my host\n", r"local.env:1: HOST='my host' is not a host name"),
    (b"\nLOAD_FORMAT=dumy\n", r"local.env:2: LOAD_FORMAT=dumy is not one of SGLang's load formats \(auto, pt"),
    (b"TMUX_SESSION=a.b\n", r"TMUX_SESSION=a.b must be a name without ':' or '.'"),
    (b"WORK_DIR=rel/dir\n", r"WORK_DIR=rel/dir must be an absolute path"),
    (b"BYTECODE_CACHE=pyc\n", r"BYTECODE_CACHE=pyc must be an absolute path"),
    (b"MEM_FRACTION_STATIC=1.5\n", r"MEM_FRACTION_STATIC=1.5 must be auto or a fraction between 0 and 1"),
    (b"SERVER_EXTRA_ARGS=--x 'unclosed\n", r"SERVER_EXTRA_ARGS=.* cannot be split like a shell command line"),
])
def test_a_bad_file_or_value_is_one_line_naming_the_file_and_line(tmp_path, text, message):
    local = tmp_path / "local.env"
    local.write_bytes(text)
    with pytest.raises(config.ConfigError, match=message) as caught:
        config.load({"HOME": os.environ["HOME"], "LLMHOST_CONFIG": str(local)})
    assert "\n" not in str(caught.value)


def test_the_bytecode_cache_follows_work_dir_and_may_be_switched_off(tmp_path):
    cfg = config.load({"HOME": os.environ["HOME"], "WORK_DIR": str(tmp_path / "w")})
    assert cfg.bytecode_cache == str(tmp_path / "w" / "bytecode-cache")
    assert config.load({"HOME": os.environ["HOME"], "BYTECODE_CACHE": ""}).bytecode_cache == ""


def test_a_world_readable_key_file_is_refused_like_ssh_refuses_a_loose_private_key(tmp_path):
    key = tmp_path / "key"
    key.write_text("secret\n")
    key.chmod(0o644)
    cfg = config.load({"HOME": os.environ["HOME"], "API_KEY_FILE": str(key)})
    with pytest.raises(OSError, match=rf"^environment: API_KEY_FILE={key} may be read by other users \(mode 0644\) "
                                      rf"— run chmod 600 {key}$"):
        cfg.api_key()
    key.chmod(0o600)
    assert cfg.api_key() == "secret"


def test_bash_stops_on_a_bad_value_with_python_s_one_line_under_its_own_prefix(repo):
    env = {**os.environ, "PORT": "abc", "LLMHOST_CONFIG": ""}
    proc = subprocess.run(["bash", "-c", "LOG_PREFIX=serve; source lib.sh; load_config; echo reached"], cwd=repo,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "reached" not in proc.stdout
    assert proc.stderr == "[serve] error: environment: PORT=abc is not a port (1-65535)\n"


def test_the_checkouts_own_files_are_named_by_file_name_others_by_path(tmp_path):
    assert config._label(config.LOCAL_FILE) == "config.local.env"
    assert config._label(tmp_path / "mine.env") == str(tmp_path / "mine.env")


def test_recorded_config_masks_the_secret_looking_names_of_server_env():
    cfg = config.load({"HOME": os.environ["HOME"], "SERVER_ENV": "HF_TOKEN=hf_abc PYTHONPATH='/a b' "
                       "TOKENIZERS_PARALLELISM=false"})
    shown = config.redacted(cfg)
    assert shown["server_env"] == "'HF_TOKEN=<redacted>' 'PYTHONPATH=/a b' TOKENIZERS_PARALLELISM=false"
    assert "hf_abc" not in repr(shown) and cfg.server_env.startswith("HF_TOKEN=hf_abc")  # the server still gets it
    assert config.redacted(config.load({"HOME": os.environ["HOME"], "SERVER_ENV": "A=1"}))["server_env"] == "A=1"
