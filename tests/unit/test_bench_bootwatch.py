"""A benchmark's server start that runs past what a boot takes says so now and then (how long, the server log's last
line, what is left once it is ready); an ordinary start says nothing, and nothing is said once it is over."""
from __future__ import annotations

import time
from types import SimpleNamespace

from llmhost.bench import arms, bootwatch, runner
from llmhost.bench.costs import CostModel
from llmhost.bench.eta import Eta
from llmhost.bench import points


def _log(tmp_path, text):
    log = tmp_path / "server.log"
    log.write_text(text)
    return log


def test_a_start_shorter_than_the_first_line_says_nothing(tmp_path):
    said = []
    with bootwatch.BootWatch(said.append, expected_s=0.0, log=_log(tmp_path, "x\n"), first_s=0.3, every_s=0.05):
        time.sleep(0.1)
    time.sleep(0.3)
    assert said == []


def test_a_long_start_says_how_long_and_the_logs_last_line_until_it_is_over(tmp_path):
    said = []
    with bootwatch.BootWatch(said.append, expected_s=0.0, log=_log(tmp_path, "Capturing batches (bs=64)\n"),
                             first_s=0.05, every_s=0.05):
        time.sleep(0.3)
    over = len(said)
    time.sleep(0.15)
    assert len(said) == over and 2 <= over <= 7  # one at 0.05 s, then one every 0.05 s; none after the start
    assert said[0] == ("the server is still starting after 0m00s (expected ~0m00s) | log: "
                       "Capturing batches (bs=64)")


def test_no_line_before_the_boots_this_host_takes_and_none_without_a_log(tmp_path):
    said = []
    no_log = tmp_path / "absent.log"
    with bootwatch.BootWatch(said.append, expected_s=0.4, log=no_log, first_s=0.05, every_s=0.05):
        time.sleep(0.2)
    assert said == []
    watch = bootwatch.BootWatch(said.append, expected_s=95.0, log=no_log)
    assert watch.first_s == 95.0 and watch.every_s == bootwatch.EVERY_S
    assert watch.line(130.0) == "the server is still starting after 2m10s (expected ~1m35s)"
    assert bootwatch.BootWatch(said.append, 20.0, no_log).first_s == bootwatch.FIRST_S


def test_the_runner_watches_a_boot_with_the_runs_boot_estimate_and_says_what_is_left(tmp_path, monkeypatch,
                                                                                      capsys):
    state = tmp_path / "state"
    state.mkdir()
    (state / "server.log").write_text("[2026-12-04 15:53:34] Capture target decode CUDA graph begin.\n")
    todo = [points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)]
    clock = Eta(CostModel(), todo, boots=1, quick=False)
    b = SimpleNamespace(cfg=SimpleNamespace(state_dir=state), clock=clock, done=0, total=1)
    monkeypatch.setattr(bootwatch, "FIRST_S", 0.0)
    monkeypatch.setattr(bootwatch, "EVERY_S", 0.05)
    watch = runner.boot_watch(b, arms.REGISTRY["page-16"])
    assert watch.expected_s == clock.boot_left_s() > 0 and watch.first_s == watch.expected_s
    watch.first_s = 0.05  # as if the boot had run past its estimate already
    with watch:
        time.sleep(0.12)
    out = capsys.readouterr().out.splitlines()
    rest = clock.refit() - clock.boot_left_s()
    assert out and out[0].startswith("[bench 0/1] arm page-16: the server is still starting after 0m00s (expected "
                                     f"~{runner.fmt_s(clock.boot_left_s())}) | log: [2026-12-04 15:53:34] "
                                     "Capture target decode CUDA graph begin.; then ~")
    assert out[0].endswith(f"then ~{runner.fmt_s(rest)} for the rest") and rest > 0


def test_a_startup_or_single_stream_restart_is_watched_too(tmp_path, monkeypatch, capsys):
    from llmhost.bench import costs, restart_runs, store
    from llmhost.serve import lifecycle

    state = tmp_path / "state"
    state.mkdir()
    (state / "server.log").write_text("Load weight end.\n")
    cfg = SimpleNamespace(state_dir=state, server_env="")
    monkeypatch.setattr(costs, "RESTART_EST_S", 0.05)
    monkeypatch.setattr(bootwatch, "FIRST_S", 0.0)
    monkeypatch.setattr(bootwatch, "EVERY_S", 0.05)
    monkeypatch.setattr(lifecycle, "restart", lambda cfg, **kw: time.sleep(0.2) or "ready")
    run = store.RunStore.create(tmp_path / "run")
    assert restart_runs.restart(cfg, run, arms.REGISTRY["baseline"], 0.0) == "ready"
    out = capsys.readouterr().out.splitlines()
    assert out and all(line.startswith("[bench] arm baseline: the server is still starting after 0m00s (expected "
                                       "~0m00s) | log: Load weight end.") for line in out)
