"""fi_trace.py analyze on a recorded-like trace (an SGLang-style allocator replayed through the real recorder:
shared prefixes, one new slot per request per decode step, CUDA-graph padding), the report section built from it,
and the SERVER_ENV the capture hands to the server lifecycle."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmhost.fi.report import trace_section
from llmhost.fi.trace import capture, hook

REPO = Path(__file__).resolve().parents[2]
PREFIX, REQUESTS, STEPS = 64, 8, 12


def record_like_sglang(trace_dir: Path) -> None:
    """Two 64-token system prompts cached once; 8 requests (4 per prompt) decode 12 steps; the graph batch is padded
    to 16 with length-1 dummy requests, as SGLang's CUDA-graph runner does."""
    rec = hook.Recorder(hook.TraceSettings(trace_dir=str(trace_dir), every=1, slots=64))
    free = list(range(1000, 5000))
    prefixes = [list(range(100, 100 + PREFIX)), list(range(300, 300 + PREFIX))]
    private: list[list[int]] = [[] for _ in range(REQUESTS)]
    for step in range(STEPS):
        for r in range(REQUESTS):
            private[r].append(free.pop(0))  # interleaved across the batch: private pages never form runs
        tables = [prefixes[r % 2] + private[r] for r in range(REQUESTS)] + [[0]] * 8
        indptr = np.cumsum([0] + [len(t) for t in tables]).astype(np.int32)
        meta = {"mode": "decode", "bs": len(tables), "graph": True, "fast_plan": True, "spec": False,
                "page_size": 1}
        rec.observe(meta, {"indptr": indptr, "indices": np.concatenate(tables).astype(np.int32)})
        rec.drain()
    rec.flush()


def test_analyze_cli_writes_trace_json_with_known_sharing_and_runs(tmp_path):
    record_like_sglang(tmp_path / "raw")
    proc = subprocess.run([sys.executable, "fi_trace.py", "analyze", "--trace-dir", str(tmp_path / "raw"),
                           "--out-dir", str(tmp_path / "out"), "--windows", "3"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["decode_steps_graph"] == STEPS
    doc = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert doc["schema"] == 1 and doc["stage"] == "trace" and "env" in doc
    last = doc["batches"][-1]
    k = STEPS  # private tokens per request at the last step
    assert last["requests"] == REQUESTS and last["padding"] == 8
    assert last["sharing_ratio"] == pytest.approx(PREFIX / (PREFIX + k))
    assert last["mean_run_len"] == pytest.approx((PREFIX + k) / (1 + k))
    first = doc["batches"][0]
    assert first["sharing_ratio"] == pytest.approx(PREFIX / (PREFIX + 1))
    windows = [w["window"] for w in doc["windows"]]
    assert windows == sorted(windows) and set(windows) <= {0, 1, 2}
    assert sum(w["batches"] for w in doc["windows"]) == STEPS  # every batch lands in exactly one window
    html = trace_section.render_section(doc, str(tmp_path))
    assert html.count('class="plotly-graph-div"') == 2 and "CUDA-graph decode replays" in html
    assert "No overhead phases" in html  # this trace has no traffic.json
    head = trace_section.headline(doc)
    assert head["decode_steps_graph"] == STEPS and head["decode_requests_mean"] == REQUESTS


def test_analyze_of_an_empty_directory_is_one_line_and_exit_1(tmp_path):
    proc = subprocess.run([sys.executable, "fi_trace.py", "analyze", "--trace-dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "fi_trace.py capture" in proc.stderr


@pytest.mark.parametrize("name, content", [("stats-7.json", b"{"), ("stats-7.json", b"\xff\xfe"),
                                           ("shard-7-00001.npz", b"PK\x03\x04 torn"), ("traffic.json", b"[")])
def test_a_damaged_trace_file_is_one_line_naming_it_and_exit_1(tmp_path, name, content):
    record_like_sglang(tmp_path)
    (tmp_path / name).write_bytes(content)
    proc = subprocess.run([sys.executable, "fi_trace.py", "analyze", "--trace-dir", str(tmp_path), "--out-dir",
                           str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{tmp_path / name} is damaged" in proc.stderr and "Traceback" not in proc.stderr


def test_report_section_without_data_leaves_the_placeholder_to_the_page():
    assert trace_section.render_section(None, "/r") is None
    assert trace_section.headline(None)["samples"] == 0


def test_capture_server_env_puts_the_hook_first_and_keeps_the_users_settings(tmp_path):
    env = capture.hook_server_env("FOO=1 PYTHONPATH=/opt/sg LLMHOST_FI_TRACE_DIR=/old", "/ignored", tmp_path, 4)
    pairs = dict(item.split("=", 1) for item in shlex.split(env))
    assert pairs["FOO"] == "1" and pairs["LLMHOST_FI_TRACE_DIR"] == str(tmp_path)
    assert pairs["PYTHONPATH"].split(os.pathsep) == [str(capture.HOOK_DIR), "/opt/sg"]
    plain = dict(item.split("=", 1) for item in shlex.split(capture.hook_server_env("", "/site", tmp_path, 2)))
    assert plain["PYTHONPATH"].split(os.pathsep) == [str(capture.HOOK_DIR), "/site"]
    assert plain["LLMHOST_FI_TRACE_EVERY"] == "2"


def test_capture_help_and_bad_arguments(tmp_path):
    ok = subprocess.run([sys.executable, "fi_trace.py", "capture", "--help"], cwd=REPO, capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "--duration-s" in ok.stdout
    bad = subprocess.run([sys.executable, "fi_trace.py", "capture", "--concurrency", "0"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--concurrency" in bad.stderr


def test_capture_restarts_with_the_hook_env_and_stops_again_when_the_tracer_is_absent(tmp_path, free_port):
    """Against the SGLang stand-in (no FlashInfer backend to patch): lifecycle really starts it with the hook on
    PYTHONPATH and the trace dir set, capture reports the missing tracer in one line and stops the server again."""
    import tempfile

    from standin import harness

    standin = REPO / "tests" / "standin"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    tmux_dir = Path(tempfile.mkdtemp(prefix="tmx", dir="/tmp"))
    dash_port = harness.free_port()
    env = {**os.environ, "TMUX_TMPDIR": str(tmux_dir), "WORK_DIR": str(tmp_path / "work"), "MODEL_DIR": str(model),
           "RESULTS_DIR": str(tmp_path / "results"), "SGLANG_PYTHON": sys.executable, "PORT": str(free_port),
           "DASHBOARD_PORT": str(dash_port), "TMUX_SESSION": f"fit{free_port}", "SERVER_ENV": "STANDIN_STARTUP_S=1",
           "PYTHONPATH": str(standin), "API_KEY_FILE": "", "READY_TIMEOUT_S": "60", "LLMHOST_CONFIG": ""}
    env.pop("TMUX", None)
    trace_dir = tmp_path / "trace"
    try:
        proc = subprocess.run([sys.executable, "fi_trace.py", "capture", "--trace-dir", str(trace_dir),
                               "--hook-timeout-s", "2", "--duration-s", "1"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("fi_trace.py capture: the tracer did not load")
        launch = json.loads((tmp_path / "work" / "server" / "launch_command.json").read_text())
        assert launch["env"]["PYTHONPATH"].split(os.pathsep) == [str(capture.HOOK_DIR), str(standin)]
        assert launch["env"]["LLMHOST_FI_TRACE_DIR"] == str(trace_dir) and launch["env"]["STANDIN_STARTUP_S"] == "1"
        assert "restoring the server without the tracer (stop)" in proc.stdout
        status = subprocess.run([str(REPO / "serve.sh"), "status"], cwd=REPO, env=env, capture_output=True,
                                timeout=60)
        assert status.returncode == 1  # it was not running before, so it is not running after
    finally:
        subprocess.run([str(REPO / "serve.sh"), "stop"], cwd=REPO, env=env, capture_output=True, timeout=90)
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=10)
        shutil.rmtree(tmux_dir, ignore_errors=True)


def test_sigterm_during_a_capture_restores_the_server_without_the_tracer(tmp_path, free_port):
    """Python skips `finally` on SIGTERM by default: the traced server used to be left running and sampling."""
    import signal
    import tempfile
    import time

    standin = REPO / "tests" / "standin"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    tmux_dir = Path(tempfile.mkdtemp(prefix="tmx", dir="/tmp"))
    env = {**os.environ, "TMUX_TMPDIR": str(tmux_dir), "WORK_DIR": str(tmp_path / "work"), "MODEL_DIR": str(model),
           "RESULTS_DIR": str(tmp_path / "results"), "SGLANG_PYTHON": sys.executable, "PORT": str(free_port),
           "TMUX_SESSION": f"fis{free_port}", "SERVER_ENV": "", "PYTHONPATH": str(standin), "API_KEY_FILE": "",
           "READY_TIMEOUT_S": "60", "LLMHOST_CONFIG": ""}
    env.pop("TMUX", None)
    serve = lambda *a: subprocess.run([str(REPO / "serve.sh"), *a], cwd=REPO, env=env,  # noqa: E731
                                      capture_output=True, text=True, timeout=90)
    try:
        proc = subprocess.Popen([sys.executable, "fi_trace.py", "capture", "--trace-dir", str(tmp_path / "trace"),
                                 "--hook-timeout-s", "60"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60  # until the traced server is up and capture waits for the tracer
        while serve("status").returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out
        assert "restoring the server without the tracer (stop)" in out and "Traceback" not in out
        assert serve("running").returncode == 1, out  # not running before the capture, not running after
    finally:
        serve("stop")
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=10)
        shutil.rmtree(tmux_dir, ignore_errors=True)


def test_overhead_phases_stream_against_the_standin_and_switch_the_tracer_between_them(tmp_path, free_port,
                                                                                          monkeypatch):
    """The traffic the trace measures: a warm-up with the tracer paused, then off, on, on, off; each phase's
    throughput and TPOT come from streamed replies (usage in the last chunk), and the overhead compares the arms."""
    from standin import harness

    from llmhost import config
    from llmhost.fi.trace import traffic

    monkeypatch.setattr(traffic, "WARMUP_S", 0.5)
    monkeypatch.setenv("PORT", str(free_port))
    monkeypatch.setenv("API_KEY_FILE", "")
    monkeypatch.setenv("LLMHOST_CONFIG", "")
    cfg = config.load()
    opts = traffic.CaptureOptions(trace_dir=tmp_path, out_dir=tmp_path, duration_s=2.0, concurrency=2, prefixes=2,
                                  prefix_words=50, max_tokens=8, every=1, hook_timeout_s=1)
    switched: list[bool] = []
    with harness.launch(free_port):
        got = traffic.run_phases(cfg, opts, switched.append)
    assert switched == [False, False, True, True, False]  # warm-up paused, then the ABBA schedule
    assert got["failed"] == 0 and got["ok"] == got["requests"] > 0, got["errors"]
    assert [p["arm"] for p in got["phases"]] == ["off", "on", "on", "off"]
    assert all(p["output_tok_s"] and p["tpot_ms_median"] is not None for p in got["phases"])
    assert set(got["overhead"]) == {"schedule", "output_tok_s", "tpot_ms_median"}
    assert got["overhead"]["output_tok_s"]["verdict"] in ("within noise", "tracer costs",
                                                          "tracer arm faster (noise or drift)")


def test_set_tracing_waits_for_the_tracers_writer_to_report_each_switch(tmp_path):
    """The capture's switch between the overhead phases: PAUSE on or off, then the stats file must say so."""
    import types

    class Updater:
        def call_begin_forward(self, *args):
            return None

    fake_backend = types.SimpleNamespace(FlashInferIndicesUpdaterDecode=Updater)
    (tmp_path / "PAUSE").touch()
    rec = hook.Recorder(hook.TraceSettings(trace_dir=str(tmp_path), flush_s=0.1))
    assert hook.patch_backend(fake_backend, rec) == ["FlashInferIndicesUpdaterDecode"]
    capture.set_tracing(tmp_path, False, timeout_s=5)  # started paused: already acknowledged
    capture.set_tracing(tmp_path, True, timeout_s=5)
    assert not (tmp_path / "PAUSE").exists() and rec.paused is False
    capture.set_tracing(tmp_path, False, timeout_s=5)
    assert rec.paused is True
    (tmp_path / "STOP").touch()
    assert capture.stop_tracing(tmp_path, timeout_s=5)


def test_set_tracing_fails_in_one_line_when_no_tracer_answers_and_ignores_gone_writers(tmp_path):
    import time

    (tmp_path / "stats-1.json").write_text(json.dumps({"patched": ["X"], "paused": True, "updated_at": time.time()}))
    with pytest.raises(capture.CaptureError, match="did not resume within 1s"):
        capture.set_tracing(tmp_path, True, timeout_s=1)
    (tmp_path / "stats-1.json").write_text(json.dumps({"patched": ["X"], "paused": False, "updated_at": time.time()}))
    gone = {"patched": ["X"], "paused": True, "updated_at": time.time() - 60}  # a forked child that exited
    (tmp_path / "stats-2.json").write_text(json.dumps(gone))
    capture.set_tracing(tmp_path, True, timeout_s=1)


def test_a_busy_server_lock_is_lifecycles_policy_and_ends_the_restart_in_one_line(monkeypatch, capsys):
    """capture no longer retries exit 75 itself: lifecycle waited BUSY_WAIT_S and raised ServerBusy."""
    from llmhost import config
    from llmhost.serve import lifecycle
    from llmhost.serve.console import ServerBusy

    seen = {}

    def busy(cfg, extra_args=(), settings=None, **kwargs):
        seen.update(settings=settings, busy_wait_s=kwargs.get("busy_wait_s"))
        raise ServerBusy("another ./serve.sh start/stop/restart is running for /w/server")

    monkeypatch.setattr(lifecycle, "restart", busy)
    monkeypatch.setenv("LLMHOST_CONFIG", "")
    assert capture.serve(config.load(), "restart", "FOO=1") is False
    # lifecycle's own default wait; traced with SGLang's own decode, whose plans the tracer records
    assert seen == {"settings": {"SERVER_ENV": "FOO=1", "SHARED_PREFIX_DECODE": "off"}, "busy_wait_s": None}
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["[serve] error: another ./serve.sh start/stop/restart is running for /w/server"]


def test_a_broken_stdout_goes_quiet_instead_of_raising(monkeypatch):
    """The terminal's tee died with Ctrl-C: the restore that follows must still run, so printing never fails."""
    class Broken:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    stream = capture.Unbreakable("stdout")
    monkeypatch.setattr(sys, "stdout", Broken())
    print("restoring", file=stream, flush=True)
    assert stream.is_broken
