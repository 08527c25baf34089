"""run_bench.py --single-stream end to end against the SGLang stand-in (real tmux, ./serve.sh's lifecycle): the
instruments reach the server, its Decode lines are read back per arm, the breakdown is recorded and printed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchrun import QWEN3_4B, bench, isolated_env
from benchrun import rows as _rows

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")


@pytest.fixture
def env(tmp_path):
    yield from isolated_env(tmp_path, server_env="STANDIN_ITL_MS=2")  # a 2 ms decode step


def test_single_stream_splits_the_time_per_token_from_the_servers_own_decode_lines(env):
    (Path(env["MODEL_DIR"]) / "config.json").write_text(json.dumps(QWEN3_4B))
    proc = bench(env, "--single-stream", "2", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    final = json.loads(proc.stdout.strip().splitlines()[-1])
    run = Path(final["run_dir"])
    assert run.name.endswith("-single-stream") and final["single_stream_requests"] == 2
    assert json.loads((run / "manifest.json").read_text())["single_stream_requests"] == 2
    launch = (run / "raw" / "serve-baseline.log").read_text()
    assert "--enable-mfu-metrics" in launch  # and the device timer's variable reached it: the occupancy below
    arm = final["arms"]["baseline"]
    assert arm["status"] == "ok" and arm["requests_ok"] == 2 and arm["decode_lines"] >= 40  # 2 x ~25, first dropped
    assert 1.9 <= arm["server_step_ms"] <= 3.0  # 1000 / gen throughput of the stand-in's 2 ms gaps
    assert arm["gpu_forward_ms"] == pytest.approx(arm["server_step_ms"] * 0.85, rel=0.05)  # STANDIN_FWD_OCCUPANCY
    assert arm["cpu_gap_ms"] == pytest.approx(arm["server_step_ms"] - arm["gpu_forward_ms"], abs=0.01)
    assert arm["streaming_ms"] == pytest.approx(arm["client_itl_mean_ms"] - arm["server_step_ms"], abs=0.01)
    assert arm["sglang_read_gb_s"] > 0 and 1.9 <= arm["tokenizer_itl_ms"] <= 3.0
    stored = _rows(run / "stream_arms.jsonl")[0]
    assert stored["weight_bytes"] == 8_044_544_000  # Qwen3-4B: 4.022 B params x 2 bytes
    if stored["peak_gb_s"] is None:  # no GPU here: the floor's time is said to be unknown, never guessed
        assert arm["floor_ms"] is None and "datasheet bandwidth" in proc.stdout
    requests = _rows(run / "stream_requests.jsonl")
    assert [(r["arm"], r["number"], r["ok"]) for r in requests] == [("baseline", 1, True), ("baseline", 2, True)]
    assert all(r["output_tokens"] == 1024 and len(r["itl_ms"]) >= 1000 for r in requests)
    table = [line for line in proc.stdout.splitlines() if line.startswith("[bench] ")]
    assert any("server step" in line and "GPU fwd" in line for line in table)
    assert any(line.split()[1:2] == ["baseline"] for line in table)
    # SGLang's profiler over 100 forward passes of one more request, outside the measured window
    kernels = _rows(run / "stream_kernels.jsonl")
    assert [(k["arm"], k["status"], k["steps"]) for k in kernels] == [("baseline", "ok", 100)]
    assert list((run / "raw" / "profile-baseline").glob("single-stream-*-TP-0.trace.json.gz"))
    cats = final["kernels"]["baseline"]["by_category_ms"]
    assert set(cats) == {"GEMM", "attention", "norm", "activation", "rope", "copy / KV write", "sampling", "other"}
    # the stand-in's Qwen3-4B step as the H200 traced it: 36 layers x (qkv 11.2 + o 7.9 + gate_up 29.2 + down 15.1
    # + two split-K reduces of 1.8) µs of GEMM + the 183.7 µs lm_head; attention 9.1 + its split-KV merge 1.8 a
    # decode step, and the request's first pass, its extend, runs the ragged path instead (10 + 120 + 3 µs)
    assert cats["GEMM"] == pytest.approx((36 * (11.2 + 7.9 + 29.2 + 15.1 + 2 * 1.8) + 183.7) / 1000, rel=1e-6)
    assert cats["attention"] == pytest.approx(36 * (99 * (9.1 + 1.8) + 10.0 + 120.0 + 3.0) / 100 / 1000, rel=1e-6)
    kern = final["kernels"]["baseline"]
    assert kern["kernel_ms"] == pytest.approx(sum(cats.values())) and kern["span_ms"] > kern["kernel_ms"]
    assert any(line.startswith("[bench] baseline: GPU kernels per forward pass (100 profiled by SGLang): ")
               for line in table)
    assert sum(1 for r in _rows(run / "stream_requests.jsonl")) == 2  # the profiled request is not a measured one


def test_an_arm_whose_server_quantizes_the_weights_is_held_to_its_own_smaller_floor(env):
    """--quantization fp8 reads the linear layers at a byte a weight: the floor the arm is set against is the one
    its server reports running, not the checkpoint's."""
    (Path(env["MODEL_DIR"]) / "config.json").write_text(json.dumps(QWEN3_4B))
    proc = bench(env, "--single-stream", "1", "--arms", "w8", "--arm", "w8=--quantization fp8", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    assert "--quantization fp8" in (run / "raw" / "serve-w8.log").read_text()
    stored, = _rows(run / "stream_arms.jsonl")
    assert stored["arm"] == "w8" and stored["weight_bytes"] == 4_411_228_160  # 3.63 B linear x 1 + LM head x 2
