"""The lifecycle's API as the benchmark runner uses it: a busy lock is waited out for a bounded time, then a
clear ServerBusy; "busy" and "did not start" reach the runner as different errors; the launch environment is
this shell's without secrets; the one HTTP client answers with data, never a raise."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from llmhost import config
from llmhost.bench import arms, runner, store
from llmhost.serve import lifecycle, process
from llmhost.serve.console import Console, ServerBusy
from llmhost.serve.endpoints import ServerClient
from llmhost.serve.lock import ServeLock


@pytest.fixture
def cfg(tmp_path) -> config.Config:
    return dataclasses.replace(config.load({}), work_dir=str(tmp_path / "work"), api_key_file="",
                               tmux_session="t-lifecycle")


def test_a_busy_lock_is_waited_out_for_a_bounded_time_then_named(cfg):
    with ServeLock(cfg.state_dir) as other:
        assert other.try_acquire()
        started = time.monotonic()
        with pytest.raises(ServerBusy, match="after waiting 1s — wait for it") as busy:
            lifecycle.stop(cfg, busy_wait_s=1.0)
        assert time.monotonic() - started >= 1.0 and busy.value.exit_code == 75


def test_a_lock_released_while_waiting_lets_the_call_through(cfg, capsys):
    other = ServeLock(cfg.state_dir)
    assert other.try_acquire()
    threading.Timer(0.5, other.release).start()
    lifecycle.stop(cfg, busy_wait_s=10.0)
    assert "no server of ours is running" in capsys.readouterr().out


def test_a_stop_marks_itself_and_a_later_restart_that_must_respect_it_refuses(cfg, capsys):
    before = time.time() - 1
    lifecycle.stop(cfg, busy_wait_s=0)
    assert lifecycle.stopped_by_user(cfg, before).endswith("UTC")
    assert lifecycle.stopped_by_user(cfg, time.time() + 1) is None  # a stop older than the caller is not its
    with pytest.raises(lifecycle.StoppedByUser, match="stopped with ./serve.sh stop at"):
        lifecycle.restart(cfg, unless_stopped_since=before, busy_wait_s=0)
    assert not process.read_state(cfg.state_dir)  # refused before it launched anything


def test_the_runner_tells_a_busy_server_from_one_that_did_not_start_and_from_a_users_stop(tmp_path, monkeypatch,
                                                                                           cfg):
    bench = type("B", (), {"cfg": cfg, "store": store.RunStore.create(tmp_path / "run"), "started_at": 0.0})()
    arm = arms.parse_user_arm("chunk=--chunked-prefill-size 4096 --page-size 16")
    seen = {}

    def busy(cfg, **kw):
        seen.update(kw)
        raise ServerBusy("another ./serve.sh start/stop/restart is running")

    monkeypatch.setattr(lifecycle, "restart", busy)
    assert runner.restart_server(bench, arm).startswith("server busy, arm chunk not started")
    assert seen["extra_args"] == ["--page-size", "16"] and seen["settings"] == {"CHUNKED_PREFILL_SIZE": "4096"}

    def down(cfg, **kw):
        raise lifecycle.StartFailed("the server (process group 1) exited")

    monkeypatch.setattr(lifecycle, "restart", down)
    assert runner.restart_server(bench, arm).startswith("server restart failed for arm chunk: the server")

    def stopped(cfg, **kw):
        raise lifecycle.StoppedByUser("12:00:00 UTC")

    monkeypatch.setattr(lifecycle, "restart", stopped)
    with pytest.raises(runner.UserStopped, match="12:00:00 UTC"):
        runner.restart_server(bench, arm)


def test_the_launch_environment_is_this_shells_minus_secrets_and_the_shims_pythonpath():
    env, dropped = process.launch_environment({
        "HF_TOKEN": "x", "OPENAI_API_KEY": "y", "SGLANG_INIT_NEW_TOKEN_RATIO": "0.5", "TMUX": "/tmp/t",
        "PYTHONPATH": f"{config.REPO_ROOT}:/opt/user", "LLMHOST_PROBE": "kept"})
    assert env == {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.5", "PYTHONPATH": "/opt/user", "LLMHOST_PROBE": "kept"}
    assert sorted(dropped) == ["HF_TOKEN", "OPENAI_API_KEY"]


def test_the_client_reports_no_server_as_data_with_and_without_requests(free_port, monkeypatch):
    import sys

    client = ServerClient(f"http://127.0.0.1:{free_port}")
    reply = client.health(timeout=2)
    assert reply.status == 0 and "Connection" in reply.describe() and "\n" not in reply.describe()
    monkeypatch.setitem(sys.modules, "requests", None)  # the host python3 before any venv: urllib
    fallback = ServerClient(f"http://127.0.0.1:{free_port}").health(timeout=2)
    assert fallback.status == 0 and "Connection" in fallback.describe()


def test_the_client_talks_to_the_standin_through_requests_and_urllib(free_port, monkeypatch):
    import sys

    from standin.harness import launch

    with launch(free_port, "--served-model-name", "qwen3-4b", "--enable-metrics") as srv:
        srv.wait_ready()
        for blocked in (False, True):
            if blocked:
                monkeypatch.setitem(sys.modules, "requests", None)
            client = ServerClient(srv.url)
            assert client.health().ok and "sglang:" in client.metrics().text
            assert client.server_info().json()["served_model_name"] == "qwen3-4b" and client.model_info().ok
            assert client.flush_cache(wait_s=5)


def test_console_lines_go_to_the_streams_it_was_given(tmp_path):
    log = (tmp_path / "serve.log").open("w")
    Console(log, log).info("launching: x")
    Console(log, log).warn("careful")
    log.close()
    assert (tmp_path / "serve.log").read_text() == "[serve] launching: x\n[serve] warning: careful\n"


def test_the_serve_package_runs_on_the_stdlib_alone(tmp_path):
    """serve.sh runs on the host's python3 before any venv exists: no third-party import on the way to a command."""
    import os
    import subprocess
    import sys

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    blocked = ("requests", "openai", "prometheus_client", "pynvml")
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); from llmhost.serve.cli import main; "
            "raise SystemExit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(config.REPO_ROOT), "WORK_DIR": str(tmp_path / "work"),
           "MODEL_DIR": str(tmp_path / "model"), "API_KEY_FILE": "", "LLMHOST_CONFIG": "", "TMUX_SESSION": "t-stdlib"}
    shown = subprocess.run([sys.executable, "-c", code, "print-command"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0 and "sglang.launch_server" in shown.stdout, shown.stderr
    idle = subprocess.run([sys.executable, "-c", code, "running"], env=env, capture_output=True, text=True, timeout=60)
    assert idle.returncode == 1 and idle.stderr == ""


def test_an_arms_setting_is_checked_by_the_rule_config_env_values_are_checked_by():
    from llmhost.serve import spec

    cfg = config.load({})
    with pytest.raises(spec.SpecError, match="^LOAD_FORMAT=dumy is not one of"):
        spec.with_settings(cfg, {"LOAD_FORMAT": "dumy"})
    with pytest.raises(spec.SpecError, match="^CHUNKED_PREFILL_SIZE=lots "):
        spec.with_settings(cfg, {"CHUNKED_PREFILL_SIZE": "lots"})
    assert spec.with_settings(cfg, {"CHUNKED_PREFILL_SIZE": "4096"}).chunked_prefill_size == "4096"