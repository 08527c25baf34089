"""fi_bench.py report and the pure headline builders, on no data and on synthetic stage documents (CPU)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost.fi import balance, sparse
from llmhost.fi.report import balance_section, page
from llmhost.fi.sparse_kernels import bandwidth

ENV = {"gpu_name": "NVIDIA H200", "sm_count": 132, "gpu_memory_gib": 139.8, "driver": "580.1", "cuda_runtime": "13.0",
       "torch": "2.11.0", "flashinfer": "0.6.15.post1", "sglang": "0.5.17", "git_commit": "abc123",
       "jit_cache_dir": "cache/.cache/flashinfer"}
CEILINGS = {"gpu": "NVIDIA H200", "peak_gb_s": 4800.0, "copy_gb_s": 4100.0, "bf16_tensor_tflops": 989.4,
            "fp32_tflops": 66.9}


def synthetic_sparse() -> dict:
    """The default matrix with made-up but self-consistent times: random pages cost more at small page sizes, FP8
    halves the time on tensor cores (bytes-bound) and keeps it on CUDA cores (element-bound)."""
    slow = {"contiguous": 1.0, "random": 1.3, "churned": 1.1}
    cases = []
    for dtype, kv_bytes in (("bf16", 2), ("fp8", 1)):
        for page_size in (1, 4, 16, 64):
            for batch, seq_len in ((64, 4096), (16, 16384), (256, 1024)):
                for placement, factor in slow.items():
                    for path in ("cuda-core", "tensor-core"):
                        total = batch * seq_len * 2 * 8 * 128 * kv_bytes
                        bf16_total = total * 2 // kv_bytes
                        moved = total if path == "tensor-core" else bf16_total  # CUDA cores: time of BF16
                        us = moved / 4.0e6 * (1 + (factor - 1) / page_size) * (1.2 if path == "cuda-core" else 1)
                        cases.append({"dtype": dtype, "page_size": page_size, "batch": batch, "seq_len": seq_len,
                                      "placement": placement, "path": path, "median_us": us, "p10_us": us * .98,
                                      "p90_us": us * 1.03, "n": 30, "total_bytes": total, "kv_bytes": total,
                                      "timing": "graph", "event_median_us": us + 9.0,
                                      "event_over_precise": (us + 9.0) / us, "split_kv": False, "work_units": 512,
                                      **bandwidth(total, us / 1e3, 4800.0, 4100.0),
                                      "roofline": {"intensity_flop_per_byte": 4.0 / kv_bytes * 2 / 2,
                                                   "binding": "memory", "memory_bound_us": total / 4.8e6,
                                                   "compute_bound_us": 1.0, "pct_of_bound": total / 4.8e6 / us * 100,
                                                   "achieved_tflops": 1.0, "kv_elements_per_ns": 1.0},
                                      "mean_run_pages": 1.0, "samples_ms": [us / 1e3] * 3})
    sparse.add_ratios(cases)
    return {"schema": 1, "created_at": "2026-01-01T00:00:00+00:00", "env": ENV, "ceilings": CEILINGS,
            "cases": cases, "errors": {},
            "checks": [{"check": "torch reference", "ok": True, "detects_drop": True},
                       {"check": "contiguous == torch reference", "ok": True, "detects_drop": False},
                       {"check": "scattered == contiguous", "ok": True, "bitwise_equal": True}]}


def balance_group(batch: int, dist: str, gain: float) -> list[dict]:
    """The planner splits below batch 64 (off = gain x slower); above it declines and a forced split costs 10%."""
    base = {"batch": batch, "distribution": dist, "max_len": 1000, "imbalance": gain, "p10_us": 1.0, "p90_us": 1.0,
            "n": 30, "kv_chunk_tokens": 256, "samples_ms": [0.1]}
    splits = batch < 64
    rows = [{**base, "split": "auto", "split_kv": splits, "work_units": 33 if splits else batch * 8,
             "median_us": 100.0, "plan_us": 40.0 + batch, "plan_us_per_layer": (40.0 + batch) / 36},
            {**base, "split": "graph", "split_kv": splits, "work_units": 33, "median_us": 104.0,
             "fast_plan_us": 15.0 + batch / 8}]
    rows.append({**base, "split": "off", "split_kv": False, "median_us": 100.0 * gain} if splits else
                {**base, "split": "forced", "split_kv": True, "median_us": 110.0})
    return [{**r, "kernel_us_per_forward": r["median_us"] * 36} for r in rows]


def synthetic_balance() -> dict:
    cases = [row for batch in (4, 16, 64, 128) for dist, gain in (("uniform", 1.0), ("one-long", 3.0), ("zipf", 1.8))
             for row in balance_group(batch, dist, gain)]
    return {"schema": 1, "created_at": "2026-01-01T00:00:00+00:00", "env": ENV, "ceilings": CEILINGS,
            "split_control": {"off": "disable_split_kv", "forced": "fixed_split_size", "note": "off/forced"},
            "path": "tensor-core", "planning": balance.PLANNING_NOTE, "num_layers": 36, "cases": cases,
            "checks": [], "timing": "graph", "errors": {}, "speedup_by_distribution": balance.speedups(cases)}


def test_report_without_any_data_says_how_to_produce_each_section(tmp_path):
    written = page.build(tmp_path)
    html = written["html"].read_text()
    for command in ("fi_bench.py sparse", "fi_bench.py balance", "fi_bench.py jit", "fi_trace.py"):
        assert command in html
    assert html.count("<svg") >= 4  # every section keeps its explanatory diagram
    summary = json.loads(written["summary"].read_text())
    assert summary["sparse"] is None and summary["balance"] is None and summary["schema"] == 1


def test_report_with_synthetic_data_has_sections_figures_and_headline(tmp_path):
    (tmp_path / "sparse.json").write_text(json.dumps(synthetic_sparse()))
    (tmp_path / "balance.json").write_text(json.dumps(synthetic_balance()))
    written = page.build(tmp_path)
    html = written["html"].read_text()
    assert len(re.findall(r"plotly\.js v\d", html)) == 1  # plotly.js inlined exactly once
    for question in ("Does scattering KV pages slow decode down?", "Why each kernel stops where it does",
                     "When does split-KV pay off", "What does planning cost next to the kernel it schedules?"):
        assert question in html
    assert "NVIDIA H200" in html and "0.6.15.post1" in html  # environment card
    assert html.index("<svg") < html.index("plotly-graph-div")  # the diagram comes before the charts
    head = json.loads(written["summary"].read_text())
    assert head["sparse"]["fp8_over_bf16_speedup"]["tensor-core"] == pytest.approx(2.0)
    assert head["sparse"]["fp8_over_bf16_speedup"]["cuda-core"] == pytest.approx(1.0)
    assert head["sparse"]["fp8_limit"] == {"cuda-core": "elements", "tensor-core": "bytes"}
    assert head["sparse"]["scattered_over_contiguous_time"]["page 1"]["random"] == pytest.approx(1.3)
    assert head["sparse"]["scattered_over_contiguous_time"]["page 64"]["random"] == pytest.approx(1 + 0.3 / 64)
    assert head["sparse"]["timing"]["method"] == "graph" and head["sparse"]["timing"]["compared"] == 144
    assert head["sparse"]["checks_bitwise"] == 1 and head["sparse"]["reference_checks_blind_to_a_dropped_token"] == 1
    assert head["balance"]["split_kv_best"] == {"one-long": pytest.approx(3.0), "uniform": 1.0,
                                                "zipf": pytest.approx(1.8)}
    assert set(head["balance"]["split_kv_speedup"]["zipf"]) == {"batch 4", "batch 16"}  # only where it split
    assert head["balance"]["forced_split_speedup_where_declined"]["zipf"]["batch 128"] == pytest.approx(100 / 110)
    assert head["balance"]["planner_splits"]["uniform"] == {"4": "split, 33 units", "16": "split, 33 units",
                                                            "64": "no split", "128": "no split"}
    assert head["balance"]["plan_us_per_layer"] == pytest.approx(head["balance"]["plan_us_per_call"] / 36)
    assert head["balance"]["sglang_graph_decode_pays"] == "fast_decode_plan"
    assert head["balance"]["fast_plan_us_per_call"] < head["balance"]["plan_us_per_call"]


def test_sparse_headline_bandwidth_by_hand():
    # 64 x 4096 tokens, bf16: 2 x 8 x 128 x 2 B = 4 KiB per token -> 1 GiB read in 250 us = 4295 GB/s
    got = bandwidth(64 * 4096 * 4096, 0.25, 4800.0, 4000.0)
    assert got["gb_s"] == pytest.approx(4294.97, rel=1e-5)
    assert got["pct_peak"] == pytest.approx(89.48, rel=1e-3)
    assert got["pct_copy"] == pytest.approx(107.37, rel=1e-3)


def test_an_unreadable_results_file_is_one_line_naming_the_command(tmp_path):
    (tmp_path / "balance.json").write_text("{not json")
    with pytest.raises(page.ReportError, match="fi_bench.py balance"):
        page.build(tmp_path)


def test_each_section_is_rendered_once_and_a_bad_one_writes_nothing(tmp_path, monkeypatch):
    (tmp_path / "sparse.json").write_text(json.dumps(synthetic_sparse()))
    calls = []
    real = page.SECTIONS["sparse"].render_section
    monkeypatch.setattr(page.SECTIONS["sparse"], "render_section", lambda *a: calls.append(a) or real(*a))
    page.build(tmp_path)
    assert len(calls) == 1
    (tmp_path / "fi_report.html").unlink()
    (tmp_path / "fi_summary.json").unlink()
    (tmp_path / "balance.json").write_text(json.dumps({**synthetic_balance(), "cases": [{"batch": "x"}]}))
    with pytest.raises(page.ReportError, match=r"balance\.json is not what its stage writes .*fi_bench\.py balance"):
        page.build(tmp_path)
    assert not (tmp_path / "fi_report.html").exists() and not (tmp_path / "fi_summary.json").exists()


def test_split_speedup_is_base_time_over_split_time():
    cases = [{"distribution": "zipf", "batch": 4, "split": "auto", "median_us": 50.0},
             {"distribution": "zipf", "batch": 4, "split": "off", "median_us": 150.0},
             {"distribution": "zipf", "batch": 64, "split": "auto", "median_us": 100.0},
             {"distribution": "zipf", "batch": 64, "split": "forced", "median_us": 125.0}]
    assert balance.speedups(cases) == {"zipf": {"4": 3.0}}
    assert balance.speedups(cases, "auto", "forced") == {"zipf": {"64": 0.8}}


@pytest.mark.parametrize("stage", sorted(page.PRODUCE))
def test_each_produce_command_names_a_real_subcommand(stage):
    repo = Path(page.__file__).resolve().parents[3]
    script, subcommand = re.search(r"python3 (\S+\.py) (\S+)", page.PRODUCE[stage]).groups()
    usage = subprocess.run([sys.executable, str(repo / script), "--help"], capture_output=True, text=True,
                           cwd=repo, timeout=60).stdout
    choices = re.search(r"\{([a-z,]+)\}", usage).group(1).split(",")
    assert subcommand in choices, f"{stage}: {page.PRODUCE[stage]!r} (choices {choices})"


def test_the_balance_section_says_where_the_planner_stops_splitting_and_what_sglang_pays():
    """FlashInfer's planner allows 2 x SMs / KV heads work units: 33 on an H200 with Qwen3-4B's 8 KV heads."""
    doc = {**synthetic_balance(), "sm_count": 132, "num_kv_heads": 8}
    note = balance_section.planner_note(doc)
    assert "2 x 132 SMs / 8 KV heads = 33 work units" in note
    assert "fast_decode_plan per step" in note
    older = balance_section.planner_note(synthetic_balance())  # a balance.json written before the fields existed
    assert "2 x SMs / KV heads work units" in older
    html = balance_section.render_section(doc, "/nonexistent")
    assert "split, 33 units" in html and "no split" in html and "fast_decode_plan us" in html


def test_without_plotly_the_page_keeps_every_table_and_says_why_the_charts_are_missing(tmp_path, monkeypatch):
    """The GPU host's server Python has no plotly: the report stage must still build the page there."""
    from llmhost.fi.report import figures

    monkeypatch.setattr(figures, "has_plotly", lambda: False)
    (tmp_path / "sparse.json").write_text(json.dumps(synthetic_sparse()))
    (tmp_path / "balance.json").write_text(json.dumps(synthetic_balance()))
    html = page.build(tmp_path)["html"].read_text()
    assert "plotly-graph-div" not in html and html.count("Charts left out") == 2
    assert "Why each kernel stops where it does" in html and "fast_decode_plan us" in html
    assert len(html) < 1_000_000  # no plotly.js inlined


def test_the_headline_answers_questions_from_the_summary_and_folds_the_rest():
    from llmhost.fi.report import headline, page as fi_page

    head = {"sparse": {"decode_gb_s_best": 4434.0, "decode_pct_peak_best": 92.4, "decode_pct_copy_best": 101.8,
                       "best_case": "bf16 tensor-core 16x16384 page 4 contiguous", "decode_gb_s_sglang_like": 4371.0,
                       "decode_pct_peak_sglang_like": 91.1, "pct_peak_by_kernel": {"bf16 tensor-core": "85-92%"},
                       "scattered_over_contiguous_time": {"page 1": {"random": 1.005, "churned": 1.001}},
                       "fp8_over_bf16_speedup": {"tensor-core": 1.1}, "fp8_limit": {"tensor-core": "elements"},
                       "checks_failed": 0, "checks_bitwise": 96, "reference_checks_blind_to_a_dropped_token": 12,
                       "timing": {"method": "graph", "event_over_precise_median": 1.012,
                                  "event_over_precise_max": 1.034}},
            "balance": None, "jit": {"variants": 10}, "trace": {}}
    rows = headline.rows(head)
    answers = {q: a for _, q, a in rows}
    assert answers["How close does decode get to the bandwidth ceiling?"].startswith("4,434 GB/s = 92.4% of peak")
    assert answers["Does scattering KV pages cost time?"].endswith("1.001-1.005x")
    assert "0 checks failed; 96 scattered outputs bit-identical" in answers["Are the outputs right?"]
    assert {stage for stage, _, _ in rows} == {"sparse", "jit"}  # no data, no questions
    html = fi_page.headline_table(head)
    assert html.index("question") < html.index("<details>") and "Every summary number" in html
    assert headline.rows({"sparse": {"decode_pct_peak_best": 90}}) == []  # a partial summary: the folded table only


def shared_cases(base: list[dict]) -> list[dict]:
    """The bf16 tensor-core cases again, under both shared placements: grouped reads 60% of the time (the L2 cache
    served repeats), interleaved 95%; each shared page counted once is a third of the bytes read."""
    out = []
    for c in base:
        if (c["dtype"], c["path"], c["placement"]) == ("bf16", "tensor-core", "contiguous"):
            for placement, factor in (("shared", 0.6), ("shared-interleaved", 0.95)):
                us = c["median_us"] * factor
                got = bandwidth(c["total_bytes"], us / 1e3, 4800.0, 4100.0)
                out.append({**c, "placement": placement, "median_us": us, **got, "distinct_gb_s": got["gb_s"] / 3,
                            "distinct_pct_peak": got["pct_peak"] / 3})
    return out


def test_shared_prompt_pages_are_answered_on_their_own_and_left_out_of_the_bandwidth_and_placement_numbers(tmp_path):
    doc = synthetic_sparse()
    plain = sparse.headline(doc)
    doc["cases"] += shared_cases(doc["cases"])
    sparse.add_ratios(doc["cases"])
    doc["checks"].append({"check": "shared prompt pages == torch reference", "ok": True, "detects_drop": True})
    head = sparse.headline(doc)
    assert head["shared_prompt_over_private_time"] == {"shared": pytest.approx(0.6),
                                                       "shared-interleaved": pytest.approx(0.95)}
    # 4800 GB/s peak: read at contiguous speed / factor, distinct a third of that
    contiguous = next(c for c in doc["cases"] if (c["dtype"], c["path"], c["page_size"], c["placement"], c["batch"])
                      == ("bf16", "tensor-core", 1, "contiguous", 64))
    assert head["shared_prompt_distinct_pct_peak"]["shared"] == pytest.approx(contiguous["pct_peak"] / 0.6 / 3)
    assert head["shared_prompt_case"].startswith("bf16 tensor-core page 1")
    for key in ("decode_gb_s_best", "scattered_over_contiguous_time", "pct_peak_by_kernel", "fp8_over_bf16_speedup"):
        assert head[key] == plain[key]  # repeated reads are not bandwidth, and sharing is not a placement cost
    (tmp_path / "sparse.json").write_text(json.dumps(doc))
    html = page.build(tmp_path)["html"].read_text()
    assert "Shared prompt pages: does decode read them once per request?" in html
    assert re.search(r"Does decode read a shared prompt(&#x27;|')s pages once per request\?</td><td>time / private "
                     r"pages shared: 0\.6", html)


def test_a_shared_placement_is_checked_on_two_requests_of_one_prompt_and_one_of_another():
    from llmhost.fi import kv_layout
    from llmhost.fi.sparse_kernels import shared_check_requests

    for interleaved, expected in ((False, [0, 1, 4]), (True, [0, 16, 1])):
        picks = shared_check_requests(64, interleaved)
        assert picks == expected
        groups = [kv_layout.group_of(b, 64, interleaved) for b in picks]
        assert groups[0] == groups[1] != groups[2]
    assert shared_check_requests(1, False) == [0]  # one request: nothing to pair it with


def test_the_distinct_bandwidth_counts_each_shared_page_once_by_hand():
    from llmhost.fi.sparse_kernels import distinct_bandwidth

    # 1 GB asked for, of it 0.8 GB KV of which 0.2 GB distinct: 0.4 GB in 0.1 ms = 4,000 GB/s = 83.3% of 4,800
    moved = {"total_bytes": 10**9, "kv_bytes": 8 * 10**8, "distinct_kv_bytes": 2 * 10**8}
    got = distinct_bandwidth(moved, 0.1, 4800.0)
    assert got["distinct_gb_s"] == pytest.approx(4000.0) and got["distinct_pct_peak"] == pytest.approx(83.333, 1e-4)
    assert distinct_bandwidth(moved, 0.1, None)["distinct_pct_peak"] is None  # an unknown GPU: no share


def two_level_record(placement: str, one_level_us: float, two_level_us: float, cascade_us: float) -> dict:
    return {"dtype": "bf16", "batch": 64, "seq_len": 4608, "page_size": 1, "placement": placement, "groups": 16,
            "members": 4, "prefix_tokens": 4320, "suffix_tokens_mean": 288.0, "one_level_us": one_level_us,
            "two_level_us": two_level_us, "cascade_us": cascade_us, "level0_us": two_level_us * 0.7,
            "level1_us": two_level_us * 0.2, "two_level_over_one_level": two_level_us / one_level_us,
            "cascade_over_one_level": cascade_us / one_level_us, "distinct_kv_bytes": 10**8,
            "prefill_level0_us": one_level_us, "prefill_level0_over_one_level": 1.0,
            "two_level_gb_s": 3000.0, "two_level_pct_peak": 62.5, "cascade_backend": "fa3",
            "prefill_level0_plan": {"work_units": 128, "cta_tile_q": 64, "split_kv": False}}


def test_the_two_level_decode_is_answered_with_its_saving_per_decode_step(tmp_path):
    doc = synthetic_sparse()
    assert "two_level_over_one_level" not in sparse.headline(doc)  # not measured: no question, no row
    doc["shape"] = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "num_layers": 36, "model": "Qwen3-4B"}
    doc["two_level"] = [two_level_record("shared", 150.0, 90.0, 350.0),
                        two_level_record("shared-interleaved", 160.0, 100.0, 360.0)]
    head = sparse.headline(doc)
    assert head["two_level_over_one_level"] == {"64x4608 shared": pytest.approx(0.6),
                                                "64x4608 shared-interleaved": pytest.approx(0.625)}
    assert head["cascade_wrapper_over_one_level"]["64x4608 shared"] == pytest.approx(350 / 150)
    assert head["prefill_level0_over_one_level"]["64x4608 shared"] == 1.0
    # the faster way is two-level: (150 - 90) us a layer x 36 layers = 2.16 ms a decode step
    assert head["two_level_step_saving_ms"] == {"64x4608 shared": pytest.approx(2.16),
                                                "64x4608 shared-interleaved": pytest.approx(2.16)}
    doc["two_level"][0]["prefill_level0_us"] = 60.0  # now level 0 on the prefill kernel is faster: 90 us a layer
    assert sparse.headline(doc)["two_level_step_saving_ms"]["64x4608 shared"] == pytest.approx(3.24)
    assert head["two_level_case"] == "bf16 tensor-core page 1, 4 requests per prompt"
    assert head["one_launch_over_one_level"] == {}  # records from before the one-launch way: no ratio, no saving
    (tmp_path / "sparse.json").write_text(json.dumps(doc))
    html = page.build(tmp_path)["html"].read_text()
    assert "Reading each shared prompt once: two-level decode" in html
    assert "M x 32 query heads on 8 KV heads" in html and "128 units, 64-row tiles, no split" in html
    assert re.search(r"What would reading each shared prompt once save\?</td><td>two-level / one-level time 64x4608 "
                     r"shared: 0\.6.*per decode step over all layers 64x4608 shared: 3\.24 ms", html)
    assert "both levels in one launch" not in html.split("What would reading")[1].split("</tr>")[0]
    # both levels in one launch, faster still: 55 us a layer, (150 - 55) x 36 = 3.42 ms a step
    doc["two_level"][0].update(one_launch_us=55.0, one_launch_over_one_level=55.0 / 150.0,
                               one_launch_plan={"work_units": 132, "cta_tile_q": 16, "split_kv": True})
    head = sparse.headline(doc)
    assert head["one_launch_over_one_level"] == {"64x4608 shared": pytest.approx(55.0 / 150.0)}
    assert head["two_level_step_saving_ms"]["64x4608 shared"] == pytest.approx(3.42)
    (tmp_path / "sparse.json").write_text(json.dumps(doc))
    html = page.build(tmp_path)["html"].read_text()
    assert "132 units, 16-row tiles" in html
    assert re.search(r"prefill kernel 64x4608 shared: 1x · 64x4608 shared-interleaved: 1x; both levels in one launch "
                     r"64x4608 shared: 0\.367x; FlashInfer&#x27;s cascade wrapper 64x4608 shared: 2\.33x", html)
