"""The measuring half of the GPU suite: the FlashInfer benchmarks, the live trace and a small benchmark, each as the
user runs it, asserting what the numbers must satisfy on any healthy GPU (checks pass, bandwidth is a real share of
the peak, CUDA-graph decode steps are seen, every point completes). Runs after test_1_serve_gpu.py (same pytest session, files run in name order):

    SGLANG_PYTHON=python3 MODEL_DIR=/path/to/Qwen3-4B LOAD_FORMAT=dummy python3 -m pytest -m gpu tests/gpu -v
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmhost.bench.points import is_primed
from llmhost.bench.records import PointRecord

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def run(env: dict[str, str], *argv: str, timeout: float = 900) -> tuple[dict, float]:
    """Run a toolkit script; its last stdout line is one JSON document. Fails the test with the output tail."""
    start = time.monotonic()
    out = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = round(time.monotonic() - start, 1)
    lines = out.stdout.strip().splitlines()
    assert lines, f"{argv[0]} printed nothing (rc {out.returncode}): {out.stderr[-2000:]}"
    return json.loads(lines[-1]), seconds


@pytest.fixture
def results(tmp_path, gpu_env) -> dict[str, str]:
    return {**gpu_env, "RESULTS_DIR": str(tmp_path / "results")}


def test_paged_decode_is_correct_and_reads_kv_at_a_real_share_of_peak(results, tmp_path, record):
    summary, seconds = run(results, "fi_bench.py", "sparse", "--quick", "--out-dir", str(tmp_path))
    record.step("fi_sparse_quick", wall_s=seconds, **{k: summary.get(k) for k in (
        "checks_failed", "decode_gb_s_best", "decode_pct_peak_best", "fp8_over_bf16_speedup", "timing",
        "two_level_over_one_level", "prefill_level0_over_one_level", "cascade_wrapper_over_one_level")})
    assert summary["checks_failed"] == 0 and not summary["errors"]  # the two-level decodes' checks among them
    # each shared prompt read once, two ways, at page 1: 64x4096 under both shared placements
    two_level = [*summary["two_level_over_one_level"].values(), *summary["prefill_level0_over_one_level"].values()]
    assert len(two_level) == 4 and all(0.2 < r < 3 for r in two_level)
    assert summary["decode_pct_peak_best"] > 40  # memory-bound decode: well above a tenth of peak on any GPU
    ratios = [r for per_page in summary["scattered_over_contiguous_time"].values() for r in per_page.values()]
    assert ratios and all(0.5 < r < 3 for r in ratios)
    assert summary["checks_bitwise"] > 0  # scattered outputs bit-identical to contiguous under the same plan
    timing = summary["timing"]
    assert timing["method"] in ("graph", "cupti") and timing["compared"] > 0
    assert 0.8 < timing["event_over_precise_median"] < 3  # events add the launch gap; they cannot halve a kernel


def test_split_kv_pays_off_for_one_long_request_in_a_small_batch(results, tmp_path, record):
    summary, seconds = run(results, "fi_bench.py", "balance", "--batches", "4,64",
                           "--distributions", "uniform,one-long", "--out-dir", str(tmp_path))
    record.step("fi_balance", wall_s=seconds, split_kv_speedup=summary.get("split_kv_speedup"),
                plan_us_per_layer=summary.get("plan_us_per_layer"), planner_splits=summary.get("planner_splits"),
                fast_plan_us_per_call=summary.get("fast_plan_us_per_call"))
    assert summary["checks_failed"] == 0
    assert summary["split_kv_speedup"]["one-long"]["batch 4"] > 1.5  # one CTA per head would serialise 64K tokens
    assert summary["planner_splits"]["one-long"]["4"].startswith("split")
    assert summary["planner_splits"]["uniform"]["64"] == "no split"  # above 2 x SMs / KV heads work units
    assert "batch 64" in summary["forced_split_speedup_where_declined"]["uniform"]
    assert 0 < summary["plan_us_per_layer"] < summary["plan_us_per_call"]
    assert summary["sglang_graph_decode_pays"] == "fast_decode_plan" and summary["fast_plan_us_per_call"] > 0


def test_the_live_trace_sees_cuda_graph_decode_steps_and_prefix_sharing(results, tmp_path, record):
    summary, seconds = run(results, "fi_trace.py", "capture", "--duration-s", "10", "--out-dir", str(tmp_path))
    record.step("fi_trace", wall_s=seconds, **{k: summary.get(k) for k in (
        "samples", "decode_steps_graph", "decode_steps_eager", "sees_graph_replays", "overhead")})
    assert summary["sees_graph_replays"] and summary["decode_steps_graph"] > 0
    assert summary["overhead"]["schedule"] == ["off", "on", "on", "off"]
    assert summary["overhead"]["output_tok_s"]["off"] > 0 and summary["overhead"]["tpot_ms_median"]["on"] > 0
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["traffic"]["failed"] == 0
    assert trace["summary"]["decode"]["sharing_ratio"] > 0.5  # shared system prompts: the radix cache at work


def cache_hit_agreement(run_dir: Path) -> tuple[float, float]:
    """(the dashboard cache chart's last value: the server's cumulative cached / prompt tokens from /metrics,
    the same share from the load generator's per-request cached tokens), in percent. They differ only by the few
    requests the client does not record (each point's one warm-up request, the server's own warm-up)."""
    from llmhost.report.timeline import CACHED, PROMPT
    last: dict[tuple[str, str], float] = {}
    for line in (run_dir / "telemetry.jsonl").read_text().splitlines():
        s = json.loads(line)
        if s["name"] in (CACHED, PROMPT):
            last[(s["name"], json.dumps(s["labels"], sort_keys=True))] = s["value"]
    cached = sum(v for (name, _), v in last.items() if name == CACHED)
    prompt = sum(v for (name, _), v in last.items() if name == PROMPT)
    rows = [json.loads(line) for f in sorted((run_dir / "raw").glob("*requests*.jsonl"))
            for line in f.read_text().splitlines() if line.strip().endswith("}")]  # a killed pass's torn line
    client = 100.0 * sum(r["cached_tokens"] for r in rows) / max(1, sum(r["prompt_tokens"] for r in rows))
    return 100.0 * cached / max(prompt, 1.0), client


def test_a_small_benchmark_completes_every_point(results, record):
    summary, seconds = run(results, "run_bench.py", "--quick", "--arms", "baseline", timeout=1200)
    record.step("bench_baseline_quick", wall_s=seconds, **summary)
    assert summary["points_planned"] > 0 and summary["points_failed"] == 0
    run_dir = Path(summary["run_dir"])
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert all(p["status"] == "ok" and p["cache_flushed"] != is_primed(PointRecord.from_dict(p))
               and p["summary"]["completed"] > 0 for p in points)  # primed points: measured on the cache they filled
    # ...with new questions: each request hits its 4,096-token system prompt (cached tokens from SGLang itself)
    # and prefills its own 128-token question
    warm = next(p for p in points if p["pattern"] == "warm")
    rows = [json.loads(line) for line in (run_dir / warm["requests_file"]).read_text().splitlines()]
    assert all(r["cached_tokens"] >= 4000 and r["prompt_tokens"] - r["cached_tokens"] >= 100 for r in rows if r["ok"])
    assert all(r["start_s"] < r["end_s"] and r["ttft_ms"] > 0 for r in rows if r["ok"])
    assert (run_dir / "telemetry.jsonl").stat().st_size > 0
    server_pct, client_pct = cache_hit_agreement(run_dir)
    record.step("bench_baseline_quick", server_hit_pct=server_pct, client_hit_pct=client_pct)
    assert abs(server_pct - client_pct) <= 3.0, (server_pct, client_pct)
    subprocess.run([str(REPO / "serve.sh"), "stop"], env=results, capture_output=True, timeout=120)
