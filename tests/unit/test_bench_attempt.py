"""One attempt of a point (runner.attempt_point) with the load generator's output faked: every request failed, the
server died, a stream broke, the cache flush met a stopped server, the point was killed at its limit, the server
logged a crash during the point or had died of one before it; and telemetry that cannot be written for a while. The
retry rule around it is in test_bench_runner.py."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from llmhost.bench import points, records, runner, store
from llmhost.bench.records import RequestRecord


class FakeLoadgen:
    """The boot's load generator 'ran' the point: the module's output line (API key in server_info) and one request
    record per entry of `details`, as llmhost.bench.loadgen writes them."""

    def __init__(self, details: dict):
        self.details = details

    def run(self, argv, requests_file, limit_s, watch=None):
        from llmhost.bench import loadgen
        from types import SimpleNamespace

        d = self.details
        out = Path(argv[argv.index("--output-file") + 1])
        out.write_text(json.dumps({**d, "server_info": {"api_key": "sk-secret", "port": 1}}) + "\n")
        outs = [SimpleNamespace(success=not e, error=e, start_time=100.0 + i, latency=0.5, ttft=t, itl=itl,
                                prompt_len=n, output_len=o, cached_tokens=0)
                for i, (e, t, itl, n, o) in enumerate(zip(d["errors"], d["ttfts"], d["itls"], d["input_lens"],
                                                          d["output_lens"]))]
        Path(requests_file).write_text("".join(json.dumps(loadgen.request_row(o, 0.0)) + "\n" for o in outs))
        return {k: float(d[k]) for k in loadgen.SUMMARY_KEYS}, ""


def _fake_attempt_env(tmp_path, monkeypatch, details: dict, alive: bool = True):
    """A Bench whose load generator 'ran' and left `details` as its output."""
    from types import SimpleNamespace

    from llmhost.serve.endpoints import ServerClient

    cfg = SimpleNamespace(sglang_python=sys.executable, base_url="http://127.0.0.1:1", model_dir="/m",
                          served_model_name="qwen3-4b", api_key=lambda: "sk-secret", state_dir=tmp_path / "state",
                          router="off")
    bench = SimpleNamespace(store=store.RunStore.create(tmp_path), cfg=cfg, sampler=SimpleNamespace(point_id=None),
                            seed=1, module="sglang.benchmark.serving", env={}, loadgen=FakeLoadgen(details))
    monkeypatch.setattr(ServerClient, "flush_cache", lambda self, **k: True)
    monkeypatch.setattr(runner, "server_alive", lambda cfg: alive)
    return bench


def _details(errors: list[str]) -> dict:
    n = len(errors)
    return {"completed": sum(not e for e in errors), "duration": 1.0, "request_throughput": 1.0,
            "output_throughput": 10.0, "input_throughput": 1.0, "total_throughput": 11.0,
            "ttfts": [0.0 if e else 0.05 for e in errors], "itls": [[0.01, 5.0] if e else [0.01] for e in errors],
            "errors": errors, "input_lens": [8] * n, "output_lens": [0 if e else 2 for e in errors]}


def test_a_point_whose_every_request_failed_is_failed_not_ok(tmp_path, monkeypatch):
    """bench_serving exits 0 when all requests fail: the point must be retried, not recorded as a 0 tok/s 'ok'."""
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["Connection reset"] * 4))
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.status == "failed" and "every request failed (Connection reset)" in record.error


def test_a_server_that_died_during_a_point_fails_it_and_raw_files_hold_no_key(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["", "", "", "boom"]), alive=False)
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.status == "failed" and "stopped answering /health" in record.error
    raw = [p.read_text() for p in bench.store.raw_dir().glob("*.jsonl") if not p.name.endswith(".requests.jsonl")]
    assert raw and all("sk-secret" not in text and "<redacted>" in text for text in raw)


def test_partial_failures_stay_data_and_their_broken_streams_stay_out_of_itl(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details(["", "", "", "stream broke"]))
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    record = runner.attempt_point(bench, point, 1)
    assert record.status == "ok" and record.summary.failed == 1
    rows = records.read_records(bench.store.root / record.requests_file, RequestRecord.from_dict).records
    assert [r.itl_ms for r in rows] == [(10.0,), (10.0,), (10.0,), ()]  # not the 5,000 ms gap of the broken one


def test_a_flush_against_a_stopped_server_says_down_at_once_not_http_400(tmp_path, monkeypatch):
    from standin.harness import free_port

    from llmhost.serve.endpoints import ServerClient

    real_flush = ServerClient.flush_cache
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))
    monkeypatch.setattr(ServerClient, "flush_cache", real_flush)  # the real flush, at a port nothing listens on
    bench.cfg.base_url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert time.monotonic() - started < 10  # not the 120 s a busy server gets
    assert record.status == "failed" and "server down (ConnectionRefusedError" in record.error
    assert "HTTP 400" not in record.error and record.cache_flushed is False


def test_a_point_killed_at_its_limit_keeps_the_requests_that_finished(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))

    def hung_loadgen(argv, requests_file, limit_s, watch=None):
        from types import SimpleNamespace

        from llmhost.bench import loadgen

        done = [SimpleNamespace(success=i != 1, error="" if i != 1 else "reset", start_time=101.0 + i, latency=0.5,
                                ttft=0.05, itl=[0.01] * 3, prompt_len=8, output_len=4, cached_tokens=0)
                for i in range(3)]  # as the load generator appends them, warm-up request left out
        lines = [json.dumps(loadgen.request_row(o, 0.0)) for o in reversed(done)]  # in completion order
        loadgen.completed_file(requests_file).write_text("\n".join(lines) + '\n{"start_s": 10')  # torn by the kill
        return None, f"load generator exceeded {limit_s:.0f}s"

    bench.loadgen.run = hung_loadgen
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 16, 1), 1)
    assert record.status == "failed" and "exceeded" in record.error and "3 requests that finished" in record.error
    assert record.summary.completed == 2 and record.summary.failed == 1
    rows = records.read_records(bench.store.root / record.requests_file, RequestRecord.from_dict).records
    assert [r.start_s for r in rows] == [101.0, 102.0, 103.0] and rows[0].itl_ms == (10.0, 10.0, 10.0)


def test_a_failed_point_names_the_crash_the_server_logged_during_it(tmp_path, monkeypatch):
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))
    log = bench.cfg.state_dir / "server.log"
    log.parent.mkdir()
    log.write_text("RuntimeError: an old crash, before this point\nfired up\n")

    def crashing_loadgen(argv, requests_file, limit_s, watch=None):
        with log.open("a") as out:  # what SGLang's scheduler writes when it dies (the stand-in copies it)
            out.write("Scheduler hit an exception: Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                      "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                      "Received sigquit from a child process. It usually means the child failed.\n")
        return None, "load generator died: All requests failed"

    bench.loadgen.run = crashing_loadgen
    record = runner.attempt_point(bench, points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), 1)
    assert record.error == ("load generator died: All requests failed — server log: RuntimeError: CUDA error: "
                            "an illegal memory access was encountered")


def test_a_point_that_found_the_server_dead_names_the_crash_it_died_of_before(tmp_path, monkeypatch):
    """The server crashed between points: the point's own stretch of the log is empty, the flush finds it down, and
    the traceback it left before the point is the cause (its log is its own: a launch rotates it)."""
    from standin.harness import free_port

    from llmhost.serve.endpoints import ServerClient

    real_flush = ServerClient.flush_cache
    bench = _fake_attempt_env(tmp_path, monkeypatch, _details([""]))
    monkeypatch.setattr(ServerClient, "flush_cache", real_flush)
    bench.cfg.base_url = f"http://127.0.0.1:{free_port()}"
    log = bench.cfg.state_dir / "server.log"
    log.parent.mkdir()
    log.write_text("fired up\nerror_rate_limit=0 in the args\nScheduler hit an exception: Traceback (most recent "
                   "call last):\nRuntimeError: CUDA error: an illegal memory access was encountered\nKilled\n")
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1)
    gone = {"now": "the server process (PID 1234) is gone"}
    monkeypatch.setattr(runner, "server_watch", lambda cfg: lambda: gone["now"])
    record = runner.attempt_point(bench, point, 1)
    assert record.error.startswith("prefix cache flush failed: server down (ConnectionRefusedError")
    assert record.error.endswith(" — server log: RuntimeError: CUDA error: an illegal memory access was encountered")
    gone["now"] = ""  # alive (a port that does not answer yet): what came before the point is not its cause
    assert "server log" not in runner.attempt_point(bench, point, 2).error


def test_telemetry_that_cannot_be_written_for_a_while_is_a_gap_not_the_end_of_sampling(monkeypatch, capsys):
    from llmhost import files
    from llmhost.bench import telemetry
    from standin.harness import free_port

    written, failures = [], iter([True, True, True])

    def sink(rows):
        if next(failures, False):
            raise files.WriteError("cannot write telemetry.jsonl: No space left on device (0 MiB free there)")
        written.extend(rows)

    sampler = telemetry.Sampler(f"http://127.0.0.1:{free_port()}", sink, interval_s=0.05)
    monkeypatch.setattr(telemetry, "gpu_reader", lambda: lambda t, p: [records.TelemetrySample(t, "gpu", "gpu_util_pct",
                                                                                                 {"gpu": "0"}, 1.0, p)])
    sampler.start()
    deadline = time.monotonic() + 20
    while len(written) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    gaps = [r for r in written if r.source == "gap"]
    assert len(gaps) == 1 and gaps[0].name == telemetry.GAP_NAME and gaps[0].value > 0
    assert "No space left" in gaps[0].labels["error"] and sampler.ticks >= 4 and len(sampler.gaps) == 1
    assert "telemetry has 1 gap(s)" in sampler.gap_warning()
    assert capsys.readouterr().err.count("telemetry not written") == 1  # said once, not every second
