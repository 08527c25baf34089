"""./serve.sh status: the uptime line reads the UTC start time the pane recorded; live metrics, starting vs down."""
from __future__ import annotations

import calendar
import time

from llmhost.serve import cli, status
from llmhost.serve.endpoints import Reply, ServerClient


def test_uptime_is_right_on_a_host_in_summer_time(monkeypatch):
    monkeypatch.setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")  # central Europe, no tzdata needed
    time.tzset()
    try:
        started = calendar.timegm((2026, 7, 1, 12, 0, 0, 0, 0, 0))
        monkeypatch.setattr(time, "time", lambda: started + 2 * 3600 + 61)
        assert status._uptime("2026-07-01T12:00:00Z") == "2h01m01s"
        assert status._uptime("not a time") == "?"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_python_without_the_client_packages_is_one_line_naming_sglang_python(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # the host python3 serve.sh falls back to lacks openai
    monkeypatch.setenv("API_KEY_FILE", "")
    monkeypatch.setattr(cli.deps, "first_with", lambda modules, sglang_python: None)  # stay in this Python
    monkeypatch.setattr(cli.lifecycle, "start", lambda cfg, **kw: None)  # "ready": only the test chat is left
    assert cli.main(["start"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "openai is not importable" in err and "SGLANG_PYTHON" in err


class Answering(ServerClient):
    """The HTTP boundary faked: canned (status, body) per path."""

    def __init__(self, answers: dict[str, tuple[int, str]]):
        super().__init__("http://127.0.0.1:1")
        self.answers = answers

    def _send(self, method, path, body, timeout):
        return Reply(*self.answers[path])


def _cfg(tmp_path):
    from llmhost import config

    cfg = config.load({"WORK_DIR": str(tmp_path), "API_KEY_FILE": ""})
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    return cfg


def test_cache_hits_are_cumulative_not_the_last_batch_gauge(tmp_path, monkeypatch, repo):
    """Captured after real traffic: the gauge reads 0.0 (last batch was decode), the counters say 4886/9623."""
    metrics_text = (repo / "tests" / "captures" / "metrics_after.txt").read_text()
    answers = {"/health": (200, ""), "/v1/models": (200, '{"data": [{"id": "qwen3-4b"}]}'),
               "/metrics": (200, metrics_text)}
    monkeypatch.setattr("llmhost.serve.gpu.devices", lambda: [])
    healthy, lines = status.status_lines(_cfg(tmp_path), None, Answering(answers))
    assert healthy
    assert any(line.startswith("cache hits   : 50.8% of 9,623 prompt tokens") for line in lines), lines


def test_a_server_of_ours_still_starting_is_starting_not_down(tmp_path, monkeypatch):
    import subprocess
    import sys

    cfg = _cfg(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        (cfg.state_dir / "pgid").write_text(str(child.pid))
        (cfg.state_dir / "started_at").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        # a live group that is not ours (PID reuse): down
        healthy, lines = status.status_lines(cfg, None, Answering({"/health": (503, "")}))
        assert not healthy and lines[0].startswith("server down at")
        (cfg.state_dir / "pid").write_text(str(child.pid))  # the recorded server PID is in the group: ours
        (cfg.state_dir / "server.log").write_text("Capturing batches (bs=8): 40%\n")
        healthy, lines = status.status_lines(cfg, None, Answering({"/health": (503, "")}))
        assert not healthy and lines[0].startswith("server starting for 0h00m") and "Capturing batches" in lines[0]
    finally:
        child.kill()
        child.wait()
    healthy, lines = status.status_lines(cfg, None, Answering({"/health": (503, "")}))
    assert not healthy and lines[0].startswith("server down at") and "./serve.sh start" in lines[0]
