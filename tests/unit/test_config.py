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
    with pytest.raises(config.ConfigError, match="not an integer"):
        config.load({"PORT": "http"})
    with pytest.raises(config.ConfigError, match="not a TCP port"):
        config.load({"PORT": "70000"})
    local = tmp_path / "local.env"
    local.write_text("PROT=1\n")
    with pytest.raises(config.ConfigError, match="unknown setting PROT"):
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
    keys = [f.name.upper() for f in config.dataclasses.fields(config.Config)]
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
