"""run_bench.py --kernel-profile end to end against the SGLang stand-in: the closed-loop point runs once more,
unmeasured, SGLang's profiler is asked once a third of that pass's requests have finished, the trace's passes are
split into decode steps and extends, and the dashboard shows them under What bounds a decode step."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchrun import QWEN3_4B, REPO, bench
from benchrun import rows as _rows

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")
ARGS = ("--arms", "baseline", "--workloads", "agent", "--patterns", "concurrency", "--concurrency", "8", "--repeat",
        "1", "--kernel-profile")


def test_a_profiled_load_records_its_passes_by_kind_and_the_dashboard_shows_them(paced_env):
    (Path(paced_env["MODEL_DIR"]) / "config.json").write_text(json.dumps(QWEN3_4B))
    dry = bench(paced_env, *ARGS, "--dry-run", timeout=60)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "baseline.agent.concurrency.c8.r1.profile" in dry.stdout  # priced like a point

    proc = bench(paced_env, *ARGS, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    assert [p["point_id"] for p in _rows(run / "points.jsonl")] == ["baseline.agent.concurrency.c8.r1"]  # unmeasured
    [rec] = _rows(run / "point_kernels.jsonl")
    steps = 320  # a quarter more than the agent workload's 256 output tokens: one whole request of every slot
    assert (rec["point_id"], rec["status"], rec["steps"]) == ("baseline.agent.concurrency.c8.r1.profile", "ok", steps)
    assert rec["decode_steps"] + rec["extend_passes"] == steps and rec["decode_steps"] > steps // 2
    # the stand-in's decode step: 36 layers x (9.1 µs of tensor-core attention + its 1.8 µs merge)
    assert rec["decode_attention_ms"] == pytest.approx(36 * (9.1 + 1.8) / 1000, rel=1e-6)
    extend_ms = 36 * (10.0 + 120.0 + 3.0) / 1000  # the stand-in's extend: ragged, prefix, merge (the fill is not)
    assert rec["extend_attention_ms"] is None or rec["extend_attention_ms"] == pytest.approx(extend_ms)
    assert list((run / "raw" / "profile-baseline.agent.concurrency.c8.r1").glob("load-*-TP-0.trace.json.gz"))
    # each pass on the GPU's clock: the stand-in's decode step, 36 layers of its captured kernels and their gaps
    assert rec["decode_step_ms"] > 36 * (9.1 + 1.8) / 1000
    assert rec["extend_passes"] == 0 or rec["extend_pass_ms"] > rec["decode_step_ms"]
    assert f"[bench] kernel profile baseline agent c=8: {steps} forward passes" in proc.stdout

    dash = subprocess.run([sys.executable, str(REPO / "make_dashboard.py"), str(run)], env=paced_env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert dash.returncode == 0, dash.stderr[-2000:]
    written = json.loads(dash.stdout.strip().splitlines()[-1])
    html = Path(written["html"]).read_text()
    assert "GPU kernels under load" in html and "Attention ms per decode step" in html
    summary = json.loads(Path(written["summary_json"]).read_text())
    [row] = summary["point_kernels"]
    assert row["point_id"] == rec["point_id"] and "Decode-only bound, output tok/s" in html
    assert row["decode_only_tok_s"] == pytest.approx(8 * 1000 / rec["decode_step_ms"])  # c=8 tokens a decode step
    # the decode-bound row of the load (when its repeat was steady) carries the attention the profile measured
    bound = summary["decode_bound"]
    assert len(bound) == sum(1 for r in summary["steady"] if r["repeats_steady"])
    assert all(b["profiled_attention_ms"] == pytest.approx(rec["decode_attention_ms"]) for b in bound)
    assert all(b["reading"].startswith("profiled: a decode step took") for b in bound)  # measured, not from bytes
