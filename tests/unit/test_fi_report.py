"""fi_bench.py report and the pure headline builders, on no data and on synthetic stage documents (CPU)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost.fi import balance, report, sparse

ENV = {"gpu_name": "NVIDIA H200", "sm_count": 132, "gpu_memory_gib": 139.8, "driver": "580.1", "cuda_runtime": "13.0",
       "torch": "2.11.0", "flashinfer": "0.6.15.post1", "sglang": "0.5.17", "git_commit": "abc123",
       "jit_cache_dir": "cache/.cache/flashinfer"}
CEILINGS = {"gpu": "NVIDIA H200", "peak_gb_s": 4800.0, "copy_gb_s": 4100.0}


def synthetic_sparse() -> dict:
    """The default matrix with made-up but self-consistent times: random pages cost more at small page sizes."""
    slow = {"contiguous": 1.0, "random": 1.3, "churned": 1.1}
    cases = []
    for dtype, kv_bytes in (("bf16", 2), ("fp8", 1)):
        for page_size in (1, 4, 16, 64):
            for batch, seq_len in ((64, 4096), (16, 16384), (256, 1024)):
                for placement, factor in slow.items():
                    for path in ("cuda-core", "tensor-core"):
                        total = batch * seq_len * 2 * 8 * 128 * kv_bytes
                        us = total / 4.0e6 * (1 + (factor - 1) / page_size) * (1.2 if path == "cuda-core" else 1)
                        cases.append({"dtype": dtype, "page_size": page_size, "batch": batch, "seq_len": seq_len,
                                      "placement": placement, "path": path, "median_us": us, "p10_us": us * .98,
                                      "p90_us": us * 1.03, "n": 30, "total_bytes": total, "kv_bytes": total,
                                      **sparse.bandwidth(total, us / 1e3, 4800.0, 4100.0),
                                      "mean_run_pages": 1.0, "samples_ms": [us / 1e3] * 3})
    sparse.add_ratios(cases)
    return {"schema": 1, "created_at": "2026-01-01T00:00:00+00:00", "env": ENV, "ceilings": CEILINGS,
            "cases": cases, "checks": [{"check": "torch reference", "ok": True}], "errors": {}}


def synthetic_balance() -> dict:
    cases = []
    for batch in (4, 16, 64, 128):
        for dist, gain in (("uniform", 1.0), ("one-long", 3.0), ("zipf", 1.8)):
            for split, us in (("on", 100.0), ("off", 100.0 * (gain if batch < 64 else 1.0))):
                cases.append({"batch": batch, "distribution": dist, "split": split, "max_len": 1000,
                              "imbalance": gain, "median_us": us, "p10_us": us, "p90_us": us, "n": 30,
                              "plan_us": 40.0 + batch, "plan_us_per_layer": (40.0 + batch) / 36,
                              "kernel_us_per_forward": us * 36, "samples_ms": [us / 1e3]})
    return {"schema": 1, "created_at": "2026-01-01T00:00:00+00:00", "env": ENV, "ceilings": CEILINGS,
            "split_control": {"method": "disable_split_kv", "note": "plan(disable_split_kv=True)"},
            "path": "tensor-core", "planning": balance.PLANNING_NOTE, "num_layers": 36, "cases": cases,
            "checks": [], "speedup_by_distribution": balance.speedups(cases)}


def test_report_without_any_data_says_how_to_produce_each_section(tmp_path):
    written = report.build(tmp_path)
    html = written["html"].read_text()
    for command in ("fi_bench.py sparse", "fi_bench.py balance", "fi_bench.py jit", "fi_trace.py"):
        assert command in html
    assert html.count("<svg") >= 4  # every section keeps its explanatory diagram
    summary = json.loads(written["summary"].read_text())
    assert summary["sparse"] is None and summary["balance"] is None and summary["schema"] == 1


def test_report_with_synthetic_data_has_sections_figures_and_headline(tmp_path):
    (tmp_path / "sparse.json").write_text(json.dumps(synthetic_sparse()))
    (tmp_path / "balance.json").write_text(json.dumps(synthetic_balance()))
    written = report.build(tmp_path)
    html = written["html"].read_text()
    assert len(re.findall(r"plotly\.js v\d", html)) == 1  # plotly.js inlined exactly once
    for question in ("Does scattering KV pages slow decode down?", "How much faster is decode with an FP8 KV cache?",
                     "When does split-KV pay off?", "What does plan() cost next to the kernel time it schedules?"):
        assert question in html
    assert "NVIDIA H200" in html and "0.6.15.post1" in html  # environment card
    assert html.index("<svg") < html.index("plotly-graph-div")  # the diagram comes before the charts
    head = json.loads(written["summary"].read_text())
    assert set(head["sparse"]) >= {"decode_gb_s_best", "decode_pct_peak_best", "scattered_over_contiguous_time",
                                   "fp8_over_bf16_speedup"}
    assert head["sparse"]["fp8_over_bf16_speedup"]["tensor-core"] == pytest.approx(2.0)
    assert head["sparse"]["scattered_over_contiguous_time"]["page 1"]["random"] == pytest.approx(1.3)
    assert head["sparse"]["scattered_over_contiguous_time"]["page 64"]["random"] == pytest.approx(1 + 0.3 / 64)
    assert head["balance"]["split_kv_best"] == {"one-long": pytest.approx(3.0), "uniform": 1.0,
                                                "zipf": pytest.approx(1.8)}
    assert head["balance"]["plan_us_per_layer"] == pytest.approx(head["balance"]["plan_us_per_call"] / 36)


def test_sparse_headline_bandwidth_by_hand():
    # 64 x 4096 tokens, bf16: 2 x 8 x 128 x 2 B = 4 KiB per token -> 1 GiB read in 250 us = 4295 GB/s
    got = sparse.bandwidth(64 * 4096 * 4096, 0.25, 4800.0, 4000.0)
    assert got["gb_s"] == pytest.approx(4294.97, rel=1e-5)
    assert got["pct_peak"] == pytest.approx(89.48, rel=1e-3)
    assert got["pct_copy"] == pytest.approx(107.37, rel=1e-3)


def test_an_unreadable_results_file_is_one_line_naming_the_command(tmp_path):
    (tmp_path / "balance.json").write_text("{not json")
    with pytest.raises(report.ReportError, match="fi_bench.py balance"):
        report.build(tmp_path)


def test_split_speedup_is_time_off_over_time_on():
    cases = [{"distribution": "zipf", "batch": 4, "split": "on", "median_us": 50.0},
             {"distribution": "zipf", "batch": 4, "split": "off", "median_us": 150.0}]
    assert balance.speedups(cases) == {"zipf": {"4": 3.0}}


def test_split_control_prefers_disable_split_kv_and_says_when_neither_exists():
    assert balance.split_control({"disable_split_kv", "fixed_split_size"})["method"] == "disable_split_kv"
    assert balance.split_control({"fixed_split_size"})["method"] == "fixed_split_size"
    assert balance.split_control({"indptr"})["method"] is None


def test_plan_parameters_look_through_a_kwargs_forwarder():
    class Wrapper:  # the shape of FlashInfer 0.6.x: plan(*args, **kwargs) -> _plan_impl(..., disable_split_kv)
        def plan(self, indptr, *deprecated, **kwargs): ...

        def _plan_impl(self, indptr, *, fixed_split_size=None, disable_split_kv=False): ...

    assert {"disable_split_kv", "fixed_split_size"} <= balance.plan_parameters(Wrapper().plan)


@pytest.mark.parametrize("stage", sorted(report.PRODUCE))
def test_each_produce_command_names_a_real_subcommand(stage):
    repo = Path(report.__file__).resolve().parents[2]
    script, subcommand = re.search(r"python3 (\S+\.py) (\S+)", report.PRODUCE[stage]).groups()
    usage = subprocess.run([sys.executable, str(repo / script), "--help"], capture_output=True, text=True,
                           cwd=repo, timeout=60).stdout
    choices = re.search(r"\{([a-z,]+)\}", usage).group(1).split(",")
    assert subcommand in choices, f"{stage}: {report.PRODUCE[stage]!r} (choices {choices})"


def test_the_balance_section_says_where_the_planner_stops_splitting():
    """FlashInfer's planner allows 2 x SMs / KV heads work units: 33 on an H200 with Qwen3-4B's 8 KV heads."""
    doc = {**synthetic_balance(), "sm_count": 132, "num_kv_heads": 8}
    note = report.planner_cap_note(doc)
    assert "2 x 132 SMs / 8 KV heads = 33 work units" in note and "batch of about 34" in note
    assert "fast_decode_plan" in note
    older = report.planner_cap_note(synthetic_balance())  # a balance.json written before the fields existed
    assert "2 x SMs / KV heads work units" in older
    assert "batch of about 34" in report.balance_section(doc, Path("/nonexistent"))
