"""JIT measurement, pure parts and the driver: the variant registry, the warm-cache refusal, the source diff, and
jit.json rewritten after every variant (workers replaced at the process boundary by a script that answers like one)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost.fi import jit, jit_variants

REPO = Path(__file__).resolve().parents[2]
QWEN3_4B = {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 2560,
            "num_hidden_layers": 36}

# Answers `python -m llmhost.fi.jit_variants ...` like the real worker: a cold run builds a module (a .so appears
# in the cache) and takes 12 s, a cached run 0.3 s; decode_softcap crashes. It also logs how many variants
# jit.json held when it was called, which shows the file is rewritten after every variant.
WORKER = r'''#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[sys.argv.index("-m") + 2:]
ops = Path(os.environ["FLASHINFER_WORKSPACE_BASE"]) / ".cache/flashinfer/0.6.15/90a/cached_ops"
if "--probe" in args:
    print(json.dumps({"jit_dir": str(ops), "generated_dir": str(ops.parent / "generated"), "aot_dir": "none",
                      "aot_modules": 0, "has_flashinfer_jit_cache": False, "cpu_cores": 16, "max_jobs": None,
                      "flashinfer_nvcc_threads": None}))
    raise SystemExit(0)
name = args[args.index("--variant") + 1]
cold = args[args.index("--repeat") + 1] != "0"
doc = Path(os.environ["JIT_JSON"])
with open(os.environ["SEEN_LOG"], "a") as log:
    log.write(f"{name} {len(json.loads(doc.read_text())['variants'])}\n")
if name == "decode_softcap":
    print("RuntimeError: Ninja build failed.", file=sys.stderr)
    raise SystemExit(1)
new = []
if cold:
    (ops / name).mkdir(parents=True, exist_ok=True)
    (ops / name / f"{name}.so").write_bytes(b"\0")
    new = [name]
print("flashinfer.jit: compiling")
print(json.dumps({"variant": name, "setup_s": 0.1, "first_call_s": 12.0 if cold else 0.3, "new_modules": new,
                  "steady": {"median_ms": 0.05, "p10_ms": 0.04, "p90_ms": 0.06, "n": 30} if cold else None}))
'''


def test_registry_has_at_least_ten_variants_with_builders_and_a_default_set():
    assert len(jit_variants.VARIANTS) >= 10
    assert all(v.builder in jit_variants.BUILDERS for v in jit_variants.VARIANTS.values())
    assert 8 <= len(jit_variants.DEFAULT_VARIANTS) <= 10
    # tensor-core decode reuses prefill's module, so prefill must be measured first (and waited for)
    order = list(jit_variants.DEFAULT_VARIANTS)
    assert order.index("prefill_paged") < order.index("decode_tensor_cores")
    assert jit_variants.VARIANTS["decode_tensor_cores"].needs == "prefill_paged"
    assert all(v.needs is None or v.needs in jit_variants.VARIANTS for v in jit_variants.VARIANTS.values())


def test_select_keeps_order_and_rejects_unknown_names():
    assert [v.name for v in jit_variants.select("decode_rope,decode_base")] == ["decode_rope", "decode_base"]
    assert len(jit_variants.select("all")) == len(jit_variants.VARIANTS)
    with pytest.raises(ValueError, match="nope"):
        jit_variants.select("decode_base,nope")


def test_cache_with_a_compiled_file_is_refused_unless_warm_is_allowed(tmp_path):
    plan = _plan(tmp_path, ["decode_base"])
    assert jit.check_cold(plan, None) is False
    so = tmp_path / "cache/.cache/flashinfer/0.6.15/90a/cached_ops/m/m.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\0")
    (tmp_path / "cache/.cache/flashinfer/0.6.15/90a/flashinfer_jit.log").write_text("log only\n")
    assert jit.cache_artifacts(tmp_path / "cache") == [so]
    with pytest.raises(jit.JitError, match="cache hits .*fi_jit_setup.sh"):
        jit.check_cold(plan, None)
    assert jit.check_cold(_plan(tmp_path, ["decode_base"], allow_warm=True), None) is True


def test_prebuilt_kernels_in_the_python_are_refused(tmp_path):
    with pytest.raises(jit.JitError, match="prebuilt"):
        jit.check_cold(_plan(tmp_path, ["decode_base"]), {"aot_modules": 3, "aot_dir": "/x/aot"})


def test_source_diff_shows_only_real_differences_and_trims(tmp_path):
    a, b = tmp_path / "mod_a", tmp_path / "mod_b"
    a.mkdir(), b.mkdir()
    (a / "config.inc").write_text("using V = DefaultAttention<false, false, false, false>;\n#define NAME mod_a\n")
    (b / "config.inc").write_text("using V = DefaultAttention<false, false, true, false>;\n#define NAME mod_b\n")
    (a / "kernel.cu").write_text("same\n")
    (b / "kernel.cu").write_text("same\n")
    diff = jit.source_diff(a, b, module_a="mod_a", module_b="mod_b")
    assert diff["changed_files"] == ["config.inc"] and diff["identical_files"] == ["kernel.cu"]
    assert "+using V = DefaultAttention<false, false, true, false>;" in diff["text"]
    assert "+#define NAME" not in diff["text"]  # the module names alone are not a difference
    (b / "config.inc").write_text("".join(f"line {i}\n" for i in range(300)))
    assert "more lines" in jit.source_diff(a, b, max_lines=20)["text"]


def test_jit_json_is_rewritten_after_every_variant_and_failures_are_rows(tmp_path):
    worker = tmp_path / "python"
    worker.write_text(WORKER.replace("{python}", sys.executable))
    worker.chmod(0o755)
    names = ["decode_base", "decode_softcap", "decode_rope"]
    plan = _plan(tmp_path, names, python=str(worker))
    out = plan.out_dir / "jit.json"
    doc = {"schema": 1, "variants": [], "probe": jit.run_worker(plan, ["--probe"])}
    jit.write_document(out, doc)
    os.environ.update(JIT_JSON=str(out), SEEN_LOG=str(tmp_path / "seen.log"))
    try:
        failures = jit.measure_all(plan, doc, out)
    finally:
        del os.environ["JIT_JSON"], os.environ["SEEN_LOG"]
    assert failures == 1
    rows = json.loads(out.read_text())["variants"]
    assert [r["ok"] for r in rows] == [True, False, True]
    assert rows[0]["compile_s"] == pytest.approx(11.7) and rows[0]["new_modules"] == ["decode_base"]
    assert "Ninja build failed" in rows[1]["error"]
    assert "Ninja build failed" in (plan.out_dir / "jit-logs" / "decode_softcap-cold.log").read_text()
    seen = (tmp_path / "seen.log").read_text().split("\n")
    assert seen[:5] == ["decode_base 0", "decode_base 0", "decode_softcap 1", "decode_rope 2", "decode_rope 2"]


def test_fi_bench_jit_refuses_a_warm_cache_in_one_line(tmp_path):
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_4B))
    so = tmp_path / "cache/.cache/flashinfer/x/cached_ops/m/m.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\0")
    env = {**os.environ, "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "cache"), "MODEL_DIR": str(model)}
    proc = subprocess.run([sys.executable, "fi_bench.py", "jit", "--out-dir", str(tmp_path / "out")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "--allow-warm" in proc.stderr
    listing = subprocess.run([sys.executable, "fi_bench.py", "jit", "--list"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and "decode_tensor_cores" in listing.stdout


def _plan(tmp_path: Path, names: list[str], allow_warm: bool = False, python: str = sys.executable,
          jobs: int = 1) -> jit.JitPlan:
    return jit.JitPlan(variants=tuple(names), out_dir=tmp_path / "out", cache_base=tmp_path / "cache",
                       allow_warm=allow_warm, repeat=5, timeout_s=60,
                       shape={"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}, diff_pair=("a", "b"),
                       python=python, jobs=jobs)


# A worker that takes 0.4 s per cold run and logs when it starts and ends, to see lanes overlap. prefill_paged's cold
# run, the first started, also waits (up to 10 s) for decode_base's to start: lanes in parallel overlap there however
# slowly a loaded box starts Python; lanes run one after the other would leave decode_base waiting for it to end.
TIMED_WORKER = r'''#!{python}
import json, os, sys, time
args = sys.argv[sys.argv.index("-m") + 2:]
name = args[args.index("--variant") + 1]
cold = args[args.index("--repeat") + 1] != "0"
with open(os.environ["LANE_LOG"], "a") as log:
    log.write(f"start {name} {cold} {time.monotonic()}\n")
time.sleep(0.4 if cold else 0.05)
deadline = time.monotonic() + 10
while name == "prefill_paged" and cold and time.monotonic() < deadline:
    with open(os.environ["LANE_LOG"]) as log:
        if "start decode_base True" in log.read():
            break
    time.sleep(0.02)
with open(os.environ["LANE_LOG"], "a") as log:
    log.write(f"end {name} {cold} {time.monotonic()}\n")
print(json.dumps({"variant": name, "setup_s": 0.1, "first_call_s": 0.4 if cold else 0.05,
                  "new_modules": [name] if cold else [], "compile_cpu_s": 1.5 if cold else 0.0}))
'''


def test_lanes_run_variants_in_parallel_but_tensor_core_decode_waits_for_prefill(tmp_path):
    worker = tmp_path / "python"
    worker.write_text(TIMED_WORKER.replace("{python}", sys.executable))
    worker.chmod(0o755)
    names = ["decode_base", "prefill_paged", "decode_tensor_cores", "decode_rope"]
    plan = _plan(tmp_path, names, python=str(worker), jobs=3)
    doc = {"variants": []}
    os.environ["LANE_LOG"] = str(tmp_path / "lanes.log")
    try:
        assert jit.measure_all(plan, doc, plan.out_dir / "jit.json") == 0
    finally:
        del os.environ["LANE_LOG"]
    events = [line.split() for line in (tmp_path / "lanes.log").read_text().splitlines()]
    when = {(kind, name, cold): float(t) for kind, name, cold, t in events}
    assert when[("start", "decode_tensor_cores", "True")] >= when[("end", "prefill_paged", "False")]
    assert when[("start", "decode_base", "True")] < when[("end", "prefill_paged", "True")]  # lanes overlap
    assert [r["variant"] for r in doc["variants"]] == names  # rows in registry order, whatever finished first
    assert max(r["lanes_busy_at_start"] for r in doc["variants"]) >= 2
    assert all(r["compile_cpu_s"] == 1.5 for r in doc["variants"])


def test_variants_others_reuse_start_first_and_those_that_wait_start_last():
    names = ("decode_base", "decode_tensor_cores", "prefill_paged", "single_decode")
    assert jit.start_order(names) == ["prefill_paged", "decode_base", "single_decode", "decode_tensor_cores"]
    assert jit.start_order(("decode_tensor_cores", "decode_base")) == ["decode_tensor_cores", "decode_base"]


def test_default_jobs_is_a_lane_per_four_cores_between_one_and_four():
    assert [jit.default_jobs(n) for n in (None, 2, 8, 16, 64)] == [1, 1, 2, 4, 4]
