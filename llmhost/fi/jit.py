"""`fi_bench.py jit`: what FlashInfer's just-in-time compilation costs, variant by variant.

For every attention variant (llmhost/fi/jit_variants.py) two fresh worker processes run against the same JIT cache:
  cold   - data setup, then the first call = generate sources + compile (ninja/nvcc) + load + first run, then the
           steady-state run time (the same kernel, compiled);
  cached - the first call again in a new process: now only the load of the cached .so + first run.
compile_s = cold first call - cached first call. Each worker also lists the modules it added to the cache.
A measurement over a warm cache sees only cache hits, so it is refused unless --allow-warm (results labelled warm).

    ./fi_jit_setup.sh                               # private empty cache + the Python to use (prints both)
    FLASHINFER_WORKSPACE_BASE=... $PY fi_bench.py jit                      # the default set (~10 variants)
    $PY fi_bench.py jit --variants decode_base,decode_softcap --out-dir results/fi
    fi_bench.py jit --list

Writes <out-dir>/jit.json after every variant (atomic rewrite), so a run cut short keeps what finished.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmhost.fi import jit_variants
from llmhost.fi.env import write_json_atomic

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
    return row


def eta_s(durations: list[float], remaining: int) -> float | None:
    """Remaining time from the mean duration of the variants done so far."""
    return sum(durations) / len(durations) * remaining if durations else None


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


def measure_all(plan: JitPlan, doc: dict[str, Any], out_path: Path) -> int:
    """Cold + cached worker per variant, rewriting jit.json after each; returns the number of failed variants."""
    failures, durations = 0, []
    total = len(plan.variants)
    for number, name in enumerate(plan.variants, 1):
        remaining = eta_s(durations, total - number + 1)
        eta = f", ETA {remaining:.0f}s" if remaining is not None else ""
        print(f"[jit {number}/{total}] {name}: cold compile + cached load{eta}", flush=True)
        start = time.monotonic()
        shape_arg = json.dumps(plan.shape)
        try:
            cold = run_worker(plan, ["--variant", name, "--shape", shape_arg, "--repeat", str(plan.repeat)],
                              f"{name}-cold")
            cached = run_worker(plan, ["--variant", name, "--shape", shape_arg, "--repeat", "0"], f"{name}-cached")
            row = derive(cold, cached)
        except JitError as exc:
            failures += 1
            row = {"ok": False, "error": str(exc)}
            print(f"[jit {number}/{total}] {name}: FAILED: {exc}", file=sys.stderr, flush=True)
        row.update(variant=name, what=jit_variants.VARIANTS[name].what, wall_s=time.monotonic() - start)
        durations.append(row["wall_s"])
        doc["variants"].append(row)
        write_json_atomic(out_path, doc)
        if row["ok"]:
            print(f"[jit {number}/{total}] {name}: first call {row['first_call_cold_s']:.1f}s cold, "
                  f"{row['first_call_cached_s']:.2f}s cached, modules built: {len(row['new_modules'])}", flush=True)
    return failures


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


# ------------------------------------------------------------------------------------------------- CLI
def register(subparsers: Any) -> None:
    """Add the `jit` subcommand to fi_bench.py's subparsers."""
    p = subparsers.add_parser("jit", help="JIT compile / cached-load / run cost per attention variant",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", help="comma-separated variant names, or 'all' (default: the default set, "
                   f"{len(jit_variants.DEFAULT_VARIANTS)} variants; estimated ~5 min on an H200 with 16 cores)")
    p.add_argument("--list", action="store_true", help="list the variants and exit")
    p.add_argument("--out-dir", help="output directory (default: $RESULTS_DIR/fi)")
    p.add_argument("--allow-warm", action="store_true", help="measure even over a non-empty JIT cache or "
                   "prebuilt kernels; results are labelled warm (default: refuse)")
    p.add_argument("--repeat", type=int, default=30, help="steady-state timed iterations per variant (default 30)")
    p.add_argument("--timeout-s", type=int, default=300, help="limit per worker process, seconds (default 300)")
    p.add_argument("--model-dir", help="model whose attention shape to use (default: MODEL_DIR)")
    p.add_argument("--diff", default="decode_base,decode_softcap", help="two variants whose generated sources "
                   "to diff (default: decode_base,decode_softcap)")
    p.set_defaults(func=run_command)


def make_plan(args: argparse.Namespace) -> JitPlan:
    """Validate the arguments into a JitPlan (ValueError: a usage mistake, one line)."""
    from llmhost import config
    from llmhost.fi import shapes

    cfg = config.load()
    variants = tuple(v.name for v in jit_variants.select(args.variants))
    diff_pair = tuple(n.strip() for n in args.diff.split(","))
    if len(diff_pair) != 2 or any(n not in jit_variants.VARIANTS for n in diff_pair):
        raise ValueError(f"--diff needs two variant names, got {args.diff!r}")
    if args.repeat < 0 or args.timeout_s < 1:
        raise ValueError("--repeat must be >= 0 and --timeout-s >= 1")
    try:
        shape = shapes.from_model_dir(args.model_dir or cfg.model_dir)
    except shapes.ShapeError as exc:
        raise JitError(str(exc)) from None
    out_dir = Path(args.out_dir) if args.out_dir else cfg.results_path / "fi"
    return JitPlan(variants=variants, out_dir=out_dir, cache_base=Path(cfg.flashinfer_workspace_base),
                   allow_warm=args.allow_warm, repeat=args.repeat, timeout_s=args.timeout_s,
                   shape=dataclasses.asdict(shape), diff_pair=diff_pair, python=sys.executable)  # type: ignore[arg-type]


def list_variants() -> None:
    for v in jit_variants.VARIANTS.values():
        mark = "*" if v.in_default else " "
        print(f"{mark} {v.name:<22} {v.what}")
    print("* = in the default set")


def run_command(args: argparse.Namespace) -> int:
    """Entry of `fi_bench.py jit`: refuse a warm cache, measure each variant, write jit.json, print a JSON line."""
    from llmhost.fi import env as fi_env

    if args.list:
        list_variants()
        return 0
    try:
        plan = make_plan(args)
    except ValueError as exc:
        print(f"fi_bench.py jit: {exc}", file=sys.stderr)
        return 2
    except JitError as exc:
        print(f"jit: {exc}", file=sys.stderr)
        return 1
    try:
        check_cold(plan, None)  # before spending seconds on imports
        probe = run_worker(plan, ["--probe"])
        warm = check_cold(plan, probe)
    except JitError as exc:
        print(f"jit: {exc}", file=sys.stderr)
        return 1
    out_path = plan.out_dir / "jit.json"
    doc: dict[str, Any] = fi_env.document({
        "stage": "jit", "warm": warm, "cache_base": str(plan.cache_base), "probe": probe, "shape": plan.shape,
        "workload": {"batch": jit_variants.BATCH, "kv_len": jit_variants.KV_LEN, "qo_len": jit_variants.QO_LEN,
                     "page_size": jit_variants.PAGE_SIZE, "repeat": plan.repeat},
        "variants": [], "diff": None, "complete": False,
    })
    write_json_atomic(out_path, doc)
    print(f"[jit] {len(plan.variants)} variants, cache {plan.cache_base}, {probe['cpu_cores']} cores, "
          f"MAX_JOBS={probe['max_jobs'] or 'unset'}, FLASHINFER_NVCC_THREADS={probe['flashinfer_nvcc_threads'] or 1}"
          f"{' (WARM cache: results are cache hits)' if warm else ''}", flush=True)
    failures = measure_all(plan, doc, out_path)
    attach_diff(plan, doc)
    doc["complete"] = True
    write_json_atomic(out_path, doc)
    ok = [r for r in doc["variants"] if r["ok"]]
    print(json.dumps({"jit_json": str(out_path), "variants": len(doc["variants"]), "failed": failures,
                      "compile_s_total": round(sum(r.get("compile_s") or 0 for r in ok), 1), "warm": warm}))
    return 1 if failures else 0
