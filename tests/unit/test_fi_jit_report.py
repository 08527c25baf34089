"""The JIT report section and headline from a hand-made jit.json (no data -> the producing command)."""
from __future__ import annotations

import pytest

from llmhost.fi.report import jit_section


def _row(name, cold, cached, modules, setup=0.2, steady=0.05, lanes=2):
    return {"variant": name, "ok": True, "what": f"{name} differs", "new_modules": modules, "setup_s": setup,
            "first_call_cold_s": cold, "first_call_cached_s": cached, "compile_s": cold - cached,
            "compile_cpu_s": 3 * (cold - cached), "lanes_busy_at_start": lanes, "steady_median_ms": steady}


DOC = {"schema": 1, "warm": False, "cache_base": "/w/fi-jit-clean/cache", "jobs": 4, "wall_s": 95.0,
       "probe": {"cpu_cores": 16, "max_jobs": None, "flashinfer_nvcc_threads": None, "cuda_archs": ["90a"]},
       "variants": [_row("decode_base", 20.5, 0.5, ["batch_decode_a"]),
                    _row("prefill_paged", 40.4, 0.4, ["batch_prefill_b"]),
                    _row("decode_tensor_cores", 0.45, 0.4, []),
                    {"variant": "decode_swa", "ok": False, "error": "worker ran past 300s"}],
       "diff": {"a": "decode_base", "b": "decode_softcap",
                "sources": {"changed_files": ["batch_decode_config.inc"], "identical_files": ["batch_decode.cu"],
                            "text": "-DefaultAttention<false, false, false, false>\n+DefaultAttention<false, false, "
                                    "true, false>\n"},
                "build_ninja": {"text": ""}}}


def test_headline_reports_median_and_worst_compile_and_the_failure():
    head = jit_section.headline(DOC)
    assert head["variants"] == 3 and head["failed"] == 1
    assert head["compile_s_median"] == pytest.approx(30.0)  # only variants that built a module
    assert head["slowest_variant"] == "prefill_paged" and head["compile_s_max"] == pytest.approx(40.0)
    assert head["modules_built"] == 2
    assert head["parallel_jobs"] == 4 and head["compile_cpu_s_total"] == pytest.approx(3 * (20.0 + 40.0 + 0.05))


def test_section_has_figure_table_reuse_note_diff_and_failure():
    html = jit_section.render_section(DOC, "/r")
    assert "4 at a time" in html and "compiler CPU s" in html
    assert html.count('class="plotly-graph-div"') == 1
    assert "none (reused)" in html and "worker ran past 300s" in html
    assert "400,000" in html  # decode_base: 20 s compile / 0.05 ms run
    assert "+DefaultAttention&lt;false, false, true, false&gt;" in html
    assert "MAX_JOBS=unset" in html and "WARM" not in html


def test_warm_results_are_labelled_and_no_data_leaves_the_placeholder_to_the_page():
    assert "WARM cache" in jit_section.render_section({**DOC, "warm": True}, "/r")
    assert jit_section.render_section(None, "/r") is None
    assert jit_section.render_section({**DOC, "variants": [DOC["variants"][-1]]}, "/r") is None
    assert jit_section.headline(None)["variants"] == 0
