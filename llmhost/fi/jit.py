"""`fi_bench.py jit`: what FlashInfer's just-in-time compilation costs, variant by variant.

For every attention variant (llmhost/fi/jit_variants.py) two fresh worker processes run against the same JIT cache:
  cold   - data setup, then the first call = generate sources + compile (ninja/nvcc) + load + first run, then the
           steady-state run time (the same kernel, compiled);
  cached - the first call again in a new process: now only the load of the cached .so + first run.
compile_s = cold first call - cached first call; compile_cpu_s = CPU seconds of the compiler processes, which does
not depend on what else runs. Each worker names the modules it compiled itself.
Variants run `jobs` at a time (default: one lane per 4 cores, at most 4): one module compiles 2-4 source files, so
4 lanes keep 16 cores busy and the 10-variant set takes ~2 min instead of ~6. compile_s then includes the sharing
of cores (each row records how many lanes were busy when it started); --jobs 1 measures each alone.
A measurement over a warm cache sees only cache hits, so it is refused unless allow_warm (results labelled warm).

    ./fi_jit_setup.sh                               # private empty cache + the Python to use (prints both)
    FLASHINFER_WORKSPACE_BASE=... $PY fi_bench.py jit                      # the default set (10 variants)
    $PY fi_bench.py jit --variants decode_base,decode_softcap --jobs 1 --out-dir results/fi

Writes <out-dir>/jit.json after every variant (atomic rewrite), so a run cut short keeps what finished.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from llmhost.fi import jit_variants
from llmhost.fi.env import write_document

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACT_SUFFIXES = (".so", ".o")
DIFF_SUFFIXES = (".cu", ".inc", ".cuh", ".h", ".ninja")


@dataclasses.dataclass(frozen=True, slots=True)
class JitPlan:
    variants: tuple[str, ...]
    out_dir: Path
    cache_base: Path
    allow_warm: bool
    repeat: int
    timeout_s: int
    shape: dict[str, Any]
    diff_pair: tuple[str, str]
    python: str
    jobs: int


class JitError(RuntimeError):
    """A refusal or environment problem; the message is one line naming the next command."""


# ------------------------------------------------------------------------------------------------- pure helpers
def cache_artifacts(cache_base: Path) -> list[Path]:
    """Compiled files (.so/.o) under FlashInfer's cache root <base>/.cache/flashinfer (logs and sources ignored)."""
    root = cache_base / ".cache" / "flashinfer"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in ARTIFACT_SUFFIXES)


def source_diff(dir_a: Path, dir_b: Path, *, module_a: str = "", module_b: str = "",
                max_lines: int = 120) -> dict[str, Any]:
    """Unified diff of the generated sources of two modules (same file names), trimmed to max_lines.

    The module names are replaced by <module> first, so only real differences (template arguments, flags) show.
    """
    def read(path: Path, module: str) -> list[str]:
        text = path.read_text(errors="replace") if path.is_file() else ""
        return (text.replace(module, "<module>") if module else text).splitlines(keepends=True)

    names = sorted({p.name for d in (dir_a, dir_b) if d.is_dir() for p in d.iterdir()
                    if p.is_file() and p.suffix in DIFF_SUFFIXES})
    lines: list[str] = []
    changed, identical = [], []
    for name in names:
        delta = list(difflib.unified_diff(read(dir_a / name, module_a), read(dir_b / name, module_b),
                                          fromfile=f"a/{name}", tofile=f"b/{name}", n=1))
        (changed if delta else identical).append(name)
        lines.extend(line if line.endswith("\n") else line + "\n" for line in delta)
    trimmed = len(lines) - max_lines
    text = "".join(lines[:max_lines]) + (f"... ({trimmed} more lines)\n" if trimmed > 0 else "")
    return {"changed_files": changed, "identical_files": identical, "diff_lines": len(lines), "text": text}


def derive(cold: dict[str, Any], cached: dict[str, Any] | None) -> dict[str, Any]:
    """One variant's row: the raw worker records plus compile_s = cold first call - cached first call."""
    row: dict[str, Any] = {"ok": True, "cold": cold, "cached": cached,
                           "new_modules": cold.get("new_modules", []),
                           "setup_s": cold.get("setup_s"), "first_call_cold_s": cold.get("first_call_s")}
    if cached:
        row["first_call_cached_s"] = cached.get("first_call_s")
        row["compile_s"] = max(0.0, cold["first_call_s"] - cached["first_call_s"])
    steady = cold.get("steady")
    row["steady_median_ms"] = steady["median_ms"] if steady else None
    row["compile_cpu_s"] = cold.get("compile_cpu_s")
    return row


def default_jobs(cores: int | None) -> int:
    """One lane per 4 cores, 1..4: a module's 2-4 nvcc processes per lane fill the cores without oversubscribing."""
    return max(1, min(4, (cores or 1) // 4))


# ------------------------------------------------------------------------------------------------- processes
def worker_env(cache_base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["FLASHINFER_WORKSPACE_BASE"] = str(cache_base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_worker(plan: JitPlan, args: list[str], log_name: str | None = None) -> dict[str, Any]:
    """Run `python -m llmhost.fi.jit_variants ARGS` and parse its last stdout line as JSON.

    With log_name, the worker's full output (FlashInfer's build log, a ninja error) is kept in
    <out-dir>/jit-logs/<log_name>.log beside jit.json.
    """
    cmd = [plan.python, "-m", "llmhost.fi.jit_variants", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=plan.timeout_s,
                              env=worker_env(plan.cache_base), cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        raise JitError(f"{' '.join(args[:2])} ran past {plan.timeout_s}s (raise --timeout-s)") from None
    if log_name:
        logs = plan.out_dir / "jit-logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{log_name}.log").write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise JitError(f"{' '.join(args[:2])} failed (exit {proc.returncode}): {tail}")
    return json.loads(lines[-1])


def check_cold(plan: JitPlan, probe: dict[str, Any] | None) -> bool:
    """Raise JitError when the cache is warm or prebuilt kernels would be used; return True if warm but allowed."""
    artifacts = cache_artifacts(plan.cache_base)
    prebuilt = bool(probe and (probe.get("aot_modules") or probe.get("has_flashinfer_jit_cache")))
    if not artifacts and not prebuilt:
        return False
    if plan.allow_warm:
        return True
    if artifacts:
        raise JitError(f"the JIT cache under {plan.cache_base} already holds {len(artifacts)} compiled files "
                       f"(e.g. {artifacts[0].name}), so the measurement would only see cache hits — run "
                       "./fi_jit_setup.sh and use the environment it prints, or pass --allow-warm")
    raise JitError(f"this Python has prebuilt FlashInfer kernels ({probe.get('aot_dir')}), so nothing would be "
                   "compiled — run ./fi_jit_setup.sh (it hides flashinfer-jit-cache), or pass --allow-warm")


def measure_variant(plan: JitPlan, name: str) -> dict[str, Any]:
    """Cold then cached worker for one variant; a failure becomes a row with its error."""
    start = time.monotonic()
    shape_arg = json.dumps(plan.shape)
    try:
        cold = run_worker(plan, ["--variant", name, "--shape", shape_arg, "--repeat", str(plan.repeat)],
                          f"{name}-cold")
        cached = run_worker(plan, ["--variant", name, "--shape", shape_arg, "--repeat", "0"], f"{name}-cached")
        row = derive(cold, cached)
    except JitError as exc:
        row = {"ok": False, "error": str(exc)}
    row.update(variant=name, what=jit_variants.VARIANTS[name].what, wall_s=time.monotonic() - start)
    return row


class Lanes:
    """Runs variants `jobs` at a time; a variant that reuses another's module waits until that one has finished."""

    def __init__(self, plan: JitPlan, doc: dict[str, Any], out_path: Path) -> None:
        self.plan, self.doc, self.out_path = plan, doc, out_path
        self.finished = {name: threading.Event() for name in plan.variants}
        self.lock = threading.Lock()
        self.busy = 0
        self.started = time.monotonic()

    def run_one(self, number: int, name: str) -> dict[str, Any]:
        needs = jit_variants.VARIANTS[name].needs
        if needs in self.finished:
            self.finished[needs].wait()
        with self.lock:
            self.busy += 1
            lanes = self.busy
        print(f"[jit {number}/{len(self.plan.variants)}] {name}: cold compile + cached load ({lanes} lane(s) busy)",
              flush=True)
        try:
            row = measure_variant(self.plan, name)
        finally:
            with self.lock:
                self.busy -= 1
            self.finished[name].set()
        row["lanes_busy_at_start"] = lanes
        with self.lock:
            self.doc["variants"].append(row)
            write_document(self.out_path, self.doc)
            self._report(number, row)
        return row

    def _report(self, number: int, row: dict[str, Any]) -> None:
        total, done = len(self.plan.variants), len(self.doc["variants"])
        elapsed = time.monotonic() - self.started
        eta = f", ETA {elapsed / done * (total - done):.0f}s" if done < total else ""
        head = f"[jit {number}/{total}] {row['variant']}"
        if not row["ok"]:
            print(f"{head}: FAILED: {row['error']}", file=sys.stderr, flush=True)
            return
        print(f"{head}: first call {row['first_call_cold_s']:.1f}s cold, {row['first_call_cached_s']:.2f}s cached, "
              f"compiler CPU {row.get('compile_cpu_s') or 0:.0f}s, modules built: {len(row['new_modules'])}"
              f"{eta}", flush=True)


def start_order(names: tuple[str, ...]) -> list[str]:
    """Variants others reuse first (prefill: also the longest compile), those that wait for one last, so a waiting
    variant never holds a lane while the one it needs is still queued."""
    needed = {jit_variants.VARIANTS[n].needs for n in names}
    rank = {n: 0 if n in needed else 2 if jit_variants.VARIANTS[n].needs in names else 1 for n in names}
    return sorted(names, key=lambda n: (rank[n], names.index(n)))


def measure_all(plan: JitPlan, doc: dict[str, Any], out_path: Path) -> int:
    """Every variant through the lanes, jit.json rewritten after each; returns the number of failed variants."""
    lanes = Lanes(plan, doc, out_path)
    number = {name: i for i, name in enumerate(plan.variants, 1)}
    with concurrent.futures.ThreadPoolExecutor(plan.jobs) as pool:
        rows = list(pool.map(lambda name: lanes.run_one(number[name], name), start_order(plan.variants)))
    order = {name: i for i, name in enumerate(plan.variants)}
    doc["variants"].sort(key=lambda r: order[r["variant"]])
    return sum(1 for r in rows if not r["ok"])


def attach_diff(plan: JitPlan, doc: dict[str, Any]) -> None:
    """Diff the generated sources of the two --diff variants when both built a module of their own."""
    rows = {r["variant"]: r for r in doc["variants"] if r.get("ok") and r.get("new_modules")}
    name_a, name_b = plan.diff_pair
    if name_a not in rows or name_b not in rows or not doc.get("probe"):
        return
    module_a, module_b = rows[name_a]["new_modules"][0], rows[name_b]["new_modules"][0]
    gen, ops = Path(doc["probe"]["generated_dir"]), Path(doc["probe"]["jit_dir"])
    diff = source_diff(gen / module_a, gen / module_b, module_a=module_a, module_b=module_b)
    ninja = source_diff(ops / module_a, ops / module_b, module_a=module_a, module_b=module_b, max_lines=40)
    doc["diff"] = {"a": name_a, "b": name_b, "module_a": module_a, "module_b": module_b, "sources": diff,
                   "build_ninja": ninja}


# ------------------------------------------------------------------------------------------------- entry
def list_variants() -> None:
    for v in jit_variants.VARIANTS.values():
        mark = "*" if v.in_default else " "
        print(f"{mark} {v.name:<22} {v.what}")
    print("* = in the default set")


def run(plan: JitPlan) -> int:
    """`fi_bench.py jit`: refuse a warm cache, measure each variant, write jit.json, print a JSON line."""
    from llmhost.fi import env as fi_env

    check_cold(plan, None)  # before spending seconds on imports
    probe = run_worker(plan, ["--probe"])
    warm = check_cold(plan, probe)
    out_path = plan.out_dir / "jit.json"
    doc: dict[str, Any] = fi_env.document({
        "stage": "jit", "warm": warm, "cache_base": str(plan.cache_base), "probe": probe, "shape": plan.shape,
        "jobs": plan.jobs,
        "workload": {"batch": jit_variants.BATCH, "kv_len": jit_variants.KV_LEN, "qo_len": jit_variants.QO_LEN,
                     "page_size": jit_variants.PAGE_SIZE, "repeat": plan.repeat},
        "variants": [], "diff": None, "complete": False,
    })
    write_document(out_path, doc)
    print(f"[jit] {len(plan.variants)} variants, {plan.jobs} at a time, cache {plan.cache_base}, "
          f"{probe['cpu_cores']} cores, MAX_JOBS={probe['max_jobs'] or 'unset'}, FLASHINFER_NVCC_THREADS="
          f"{probe['flashinfer_nvcc_threads'] or 1}{' (WARM cache: results are cache hits)' if warm else ''}",
          flush=True)
    started = time.monotonic()
    failures = measure_all(plan, doc, out_path)
    attach_diff(plan, doc)
    doc.update(complete=True, wall_s=time.monotonic() - started)
    write_document(out_path, doc)
    ok = [r for r in doc["variants"] if r["ok"]]
    print(json.dumps({"jit_json": str(out_path), "variants": len(doc["variants"]), "failed": failures,
                      "jobs": plan.jobs, "wall_s": round(doc["wall_s"], 1),
                      "compile_s_total": round(sum(r.get("compile_s") or 0 for r in ok), 1), "warm": warm}))
    return 1 if failures else 0
