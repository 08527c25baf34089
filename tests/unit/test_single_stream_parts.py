"""run_bench.py --single-stream's own parts in process: the floor it holds each arm to, each request's record in
ms, SGLang's mean ITL from two scrapes, the profiled request's failures named by arm, and the run's exit code."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmhost.bench import arms as arms_mod, floor, kernel_profile, runner, single_stream
from llmhost.bench.stream_records import StreamRequestRecord
from llmhost.serve.metrics import Sample
from test_single_stream import QWEN3_4B


@pytest.fixture()
def model_cfg(tmp_path):
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_4B))
    return SimpleNamespace(model_dir=model)


def test_the_floor_is_the_model_s_weight_bytes_at_this_gpu_s_datasheet_bandwidth(model_cfg):
    got, note = single_stream.weight_floor(model_cfg, "NVIDIA H200")
    assert got == floor.Floor(floor.weight_bytes_of_dir(model_cfg.model_dir), 4800.0, "NVIDIA H200") and note == ""
    assert got.ms == pytest.approx(1.68, abs=0.01)


def test_weights_quantized_on_load_give_a_lower_floor(model_cfg):
    fp8, _ = single_stream.weight_floor(model_cfg, "NVIDIA H200", "fp8")
    assert fp8.weight_bytes == floor.weight_bytes_of_dir(model_cfg.model_dir, "fp8")
    assert fp8.ms == pytest.approx(0.92, abs=0.01)


def test_a_gpu_without_a_datasheet_keeps_the_bytes_and_says_why_there_is_no_time(model_cfg):
    got, note = single_stream.weight_floor(model_cfg, "Mystery GPU 9000")
    assert got.peak_gb_s is None and got.ms is None and got.gpu == "Mystery GPU 9000"
    assert note == "GPU Mystery GPU 9000 has no datasheet bandwidth in llmhost/fi/gpu_specs.py"
    assert single_stream.weight_floor(model_cfg, None)[1] == ("GPU (none found) has no datasheet bandwidth in "
                                                              "llmhost/fi/gpu_specs.py")


def test_a_model_without_a_readable_config_has_no_floor_and_says_so(tmp_path):
    got, note = single_stream.weight_floor(SimpleNamespace(model_dir=tmp_path / "nowhere"), "NVIDIA H200")
    assert got is None and "config.json" in note


def test_a_request_s_record_is_in_ms_and_a_failed_one_keeps_only_its_error():
    ok = {"ok": True, "error": "", "completion_tokens": 3, "ttft_s": 0.25, "gaps_s": [0.004, 0.0035]}
    assert single_stream.request_record("base", 2, ok) == StreamRequestRecord("base", 2, True, "", 3, 250.0,
                                                                               (4.0, 3.5))
    assert single_stream.request_record("base", 3, {**ok, "ttft_s": None}).ttft_ms is None
    bad = {"ok": False, "error": "HTTP 500", "completion_tokens": 9, "ttft_s": 0.1, "gaps_s": [0.1]}
    assert single_stream.request_record("x", 4, bad) == StreamRequestRecord("x", 4, False, "HTTP 500", 0, None, ())


def scrape(total_s: float, count: float) -> list[Sample]:
    name = single_stream.ITL_HISTOGRAM
    return [Sample(f"{name}_sum", {}, total_s), Sample(f"{name}_count", {}, count)]


def test_sglang_s_mean_itl_is_the_histogram_s_increase_over_the_window():
    assert single_stream.tokenizer_itl_ms(scrape(10.0, 1000), scrape(10.8, 1200)) == pytest.approx(4.0)
    assert single_stream.tokenizer_itl_ms(scrape(10.0, 1000), scrape(10.0, 1000)) is None  # no token in between
    assert single_stream.tokenizer_itl_ms([], scrape(1.0, 10)) is None  # not exposed before
    assert single_stream.tokenizer_itl_ms(scrape(10.0, 1000), scrape(0.5, 100)) is None  # restarted in between


class Run:
    def __init__(self, root: Path):
        self.root = root

    def raw_dir(self) -> Path:
        return self.root / "raw"


def test_each_failure_of_the_profiled_request_is_the_arm_s_named_reason(monkeypatch, tmp_path):
    run, server = Run(tmp_path), object()
    seen = {}
    monkeypatch.setattr(single_stream, "wait_idle", lambda s: False)
    rec = single_stream.profile_kernels(server, lambda: {"ok": True}, run, "spd")
    assert (rec.arm, rec.status, rec.error) == ("spd", "failed", "the server did not go idle for the profiled "
                                                                 "request")
    monkeypatch.setattr(single_stream, "wait_idle", lambda s: True)

    def start(srv, out_dir, steps):
        seen["start"] = (srv, out_dir, steps)
        return "profiler busy"
    monkeypatch.setattr(kernel_profile, "start", start)
    rec = single_stream.profile_kernels(server, lambda: {"ok": True}, run, "spd")
    assert (rec.arm, rec.error) == ("spd", "profiler busy")
    assert seen["start"] == (server, tmp_path / "raw" / "profile-spd", kernel_profile.PROFILE_STEPS)
    monkeypatch.setattr(kernel_profile, "start", lambda *a: "")
    rec = single_stream.profile_kernels(server, lambda: {"ok": False, "error": "HTTP 503"}, run, "spd")
    assert (rec.arm, rec.error) == ("spd", "the profiled request failed: HTTP 503")
    monkeypatch.setattr(kernel_profile, "wait_trace", lambda d: seen.setdefault("trace_dir", d) and None)
    rec = single_stream.profile_kernels(server, lambda: {"ok": True}, run, "spd")
    assert rec.arm == "spd" and rec.error.startswith(f"SGLang wrote no trace into {tmp_path / 'raw' / 'profile-spd'}")
    assert seen["trace_dir"] == tmp_path / "raw" / "profile-spd"


def test_a_trace_it_cannot_read_is_the_arm_s_reason_and_a_good_one_is_summarized(monkeypatch, tmp_path, capsys):
    run, trace = Run(tmp_path), tmp_path / "raw" / "profile-spd" / "t.trace.json.gz"
    monkeypatch.setattr(single_stream, "wait_idle", lambda s: True)
    monkeypatch.setattr(kernel_profile, "start", lambda *a: "")
    monkeypatch.setattr(kernel_profile, "wait_trace", lambda d: trace)
    monkeypatch.setattr(kernel_profile, "read_kernels", lambda p: (_ for _ in ()).throw(
        kernel_profile.TraceError(f"{p.name} is not JSON")))
    rec = single_stream.profile_kernels(object(), lambda: {"ok": True}, run, "spd")
    assert (rec.arm, rec.error) == ("spd", "t.trace.json.gz is not JSON")
    kernels = [("gemm_kernel", 0.0, 100.0)]
    monkeypatch.setattr(kernel_profile, "read_kernels", lambda p: kernels if p == trace else [])
    called = {}
    monkeypatch.setattr(kernel_profile, "summarize", lambda *a: called.setdefault("args", a))
    assert single_stream.profile_kernels(object(), lambda: {"ok": True}, run, "spd") == \
        ("spd", kernels, kernel_profile.PROFILE_STEPS, "t.trace.json.gz")
    assert "raw/profile-spd/t.trace.json.gz" in capsys.readouterr().out


def test_the_run_passes_each_arm_its_gpu_and_exits_nonzero_unless_every_arm_measured(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "interrupt_on_sigterm", lambda: None)
    calls, appended = [], []

    def measure_arm(cfg, run, arm, requests, since, gpu_name):
        calls.append((cfg, run, arm.name, requests, since > 0, gpu_name))
        return arm.name
    monkeypatch.setattr(single_stream, "measure_arm", measure_arm)
    run = SimpleNamespace(root=tmp_path, append_stream=appended.append, read_manifest=lambda: SimpleNamespace(
        provenance=SimpleNamespace(gpu=SimpleNamespace(name="NVIDIA H200"))))
    arms = [arms_mod.Arm(name, name, "#000", (), "") for name in ("a", "b")]
    statuses = {"ok": [SimpleNamespace(status="ok")] * 2, "one failed": [SimpleNamespace(status="ok"),
                                                                        SimpleNamespace(status="failed")], "none": []}
    for case, recs in statuses.items():
        summarized = {}
        monkeypatch.setattr(single_stream, "print_summary",
                            lambda r, n, recs=recs: summarized.setdefault("args", (r, n)) and recs)
        code = single_stream.measure_all("cfg", run, arms, 5)
        assert code == (0 if case == "ok" else 1), case
        assert summarized["args"] == (run, 5)
    assert calls[:2] == [("cfg", run, "a", 5, True, "NVIDIA H200"), ("cfg", run, "b", 5, True, "NVIDIA H200")]
    assert appended[:2] == ["a", "b"]
