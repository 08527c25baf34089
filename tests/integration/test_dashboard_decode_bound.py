"""A stand-in run of a model whose config.json gives its shape records that shape in its manifest, and its dashboard
sets each steady closed-loop point's step against the bytes it reads (What bounds a decode step)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchrun import QWEN3_4B, REPO, bench
from llmhost.fi import gpu_specs

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")


def test_the_run_records_the_models_shape_and_the_dashboard_says_what_bounds_its_steps(paced_env):
    (Path(paced_env["MODEL_DIR"]) / "config.json").write_text(json.dumps(QWEN3_4B))
    proc = bench(paced_env, "--arms", "baseline", "--workloads", "chat", "--patterns", "concurrency",
                 "--concurrency", "8", "--repeat", "1", "--duration-s", "12", timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model_shape"] == {"num_layers": 36, "num_kv_heads": 8, "head_dim": 128, "dtype_bytes": 2,
                                       "weight_bytes": 8_044_544_000, "weight_bytes_fp8": 4_411_228_160}
    assert manifest["model_shape_note"] == ""
    dash = subprocess.run([sys.executable, str(REPO / "make_dashboard.py"), str(run)], env=paced_env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert dash.returncode == 0, dash.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    (steady,), (row,) = summary["steady"], summary["decode_bound"]
    assert steady["repeats_steady"] == 1, summary["not_steady"]
    assert (row["load"], row["concurrency"], row["kv_cache_dtype"]) == ("c=8", 8, "auto")
    assert row["context_tokens"] == pytest.approx(steady["prompt_tokens_mean"] + steady["output_tokens_mean"] / 2)
    # the requests a step carries: SGLang's gauge over the window, a tick's sampling may catch one between requests
    assert row["running_by"] == "SGLang" and 6.0 <= row["running"] <= 8.0
    assert row["kv_bytes"] == pytest.approx(row["running"] * row["context_tokens"] * 147_456)
    assert row["measured_by"] == "SGLang" and 4.0 <= row["measured_ms"] <= 10.0  # the stand-in's 5 ms a token
    html = (run / "dashboard.html").read_text()
    section = html[html.index("<section id=bound>"):]
    assert "What bounds a decode step" in section and "<table>" in section
    gpu = manifest["gpu"]["name"]
    if gpu_specs.lookup(gpu) is None:  # no GPU here (or one without a datasheet figure): bytes, no milliseconds
        assert row["kv_ms"] is None and "has no datasheet bandwidth" in section
    else:
        assert row["kv_ms"] > 0 and row["roofline_ms"] == pytest.approx(row["kv_ms"] + row["weights_ms"])
