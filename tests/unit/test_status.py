"""./serve.sh status: the uptime line reads the UTC start time serve.sh recorded."""
from __future__ import annotations

import calendar
import time

from llmhost import status


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
    assert status.main(["chat"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "openai is not importable" in err and "SGLANG_PYTHON" in err
