"""Split-KV and planning: does splitting long requests across CTAs pay off, and what does planning cost per step?

Decode attention gives each request (x KV-head group) a CTA. With one 32K-token request among short ones, that CTA
walks 32K tokens while the others finish early: the GPU idles on the critical path. Split-KV cuts long KV into
chunks processed by separate CTAs and merges their partial softmax states afterwards. FlashInfer decides the split in
plan() on the CPU, from the lengths, and stops splitting once the split work exceeds 2 x SMs / KV heads work units
(llmhost.fi.split_plan); SGLang plans once per forward batch and every layer reuses the plan.

Cases: batch sizes x length distributions (llmhost.fi.lengths, equal total tokens) on the tensor-core decode path
SGLang uses for Qwen3, each with
- auto: the planner's choice (its split decision, work units and chunk length are recorded);
- off: plan(disable_split_kv=True);
- forced: plan(fixed_split_size = half the mean request in pages), only where the planner declined to split, so the
  report shows what splitting would have cost or saved there;
- graph: the same batch planned the way SGLang's CUDA-graph decode plans it (a use_cuda_graph wrapper, replanned
  with `fast_decode_plan` and the host-side indptr SGLang passes) — its decision and kernel time.
Every output is checked against a float32 reference (llmhost.fi.checks) before it is timed. Planning cost: plan() on
the eager wrapper (what SGLang pays for batches above its largest CUDA graph) and fast_decode_plan on the graph
wrapper (what it pays per step inside the graph range), both as the median of synchronized calls.
Run through `fi_bench.py balance`; writes <out-dir>/balance.json.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmhost.fi import lengths, split_plan
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.timing import Method, timer_comparison

PLANNING_NOTE = ("SGLang 0.5.17 plans once per forward batch (FlashInferAttnBackend.init_forward_metadata) and all "
                 "layers reuse that plan. Batches within its CUDA-graph sizes are replanned with fast_decode_plan "
                 "(begin_forward is swapped for partial(fast_decode_plan, wrapper) at capture) and the host-side "
                 "indptr from seq_lens_cpu; larger batches run eagerly and pay plan()")


@dataclass(frozen=True, slots=True)
class BalanceOptions:
    batches: tuple[int, ...]
    distributions: tuple[str, ...]
    total_tokens: int
    page_size: int
    repeat: int
    plan_repeat: int
    timing: Method
    seed: int = 0


def speedups(cases: list[dict], base: str = "off", split: str = "auto") -> dict[str, dict[str, float]]:
    """{distribution: {batch: time of `base` / time of `split`}} (> 1: `split` is faster). "off" exists only where
    the planner split and "forced" only where it did not, so off/auto is the planner's gain and auto/forced what a
    split it declined would have done."""
    times = {(c["distribution"], c["batch"], c["split"]): c["median_us"] for c in cases}
    out: dict[str, dict[str, float]] = {}
    for (dist, batch, kind), us in sorted(times.items()):
        base_us = times.get((dist, batch, base))
        if kind == split and base_us:
            out.setdefault(dist, {})[str(batch)] = base_us / us
    return out


def planner_table(cases: list[dict]) -> dict[str, dict[str, str]]:
    """{distribution: {batch: 'split N units' | 'no split'}} of the planner's own (auto) decisions."""
    out: dict[str, dict[str, str]] = {}
    for c in cases:
        if c["split"] == "auto":
            out.setdefault(c["distribution"], {})[str(c["batch"])] = (
                f"split, {c['work_units']} units" if c.get("split_kv") else "no split")
    return out


def headline(doc: dict) -> dict:
    """Numbers for fi_summary.json from balance.json: split-KV speedups, the planner's decisions, what a forced split
    does where it declined, and planning cost (eager plan() vs fast_decode_plan) next to the kernel."""
    auto = [c for c in doc.get("cases", []) if c["split"] == "auto"]
    if not auto:
        return {}
    cases = doc["cases"]
    graph = [c for c in cases if c["split"] == "graph"]
    fast = [c["fast_plan_us"] for c in graph if c.get("fast_plan_us")]
    by_batch = {f"batch {b}": {"plan_us": statistics.median(c["plan_us"] for c in auto if c["batch"] == b),
                               "fast_plan_us": _median([c.get("fast_plan_us") for c in graph if c["batch"] == b]),
                               "kernel_us_per_layer": statistics.median(c["median_us"] for c in auto
                                                                        if c["batch"] == b)}
                for b in sorted({c["batch"] for c in auto})}
    speedup = speedups(cases)
    return {"split_kv_speedup": {d: {f"batch {b}": x for b, x in per.items()} for d, per in speedup.items()},
            "split_kv_best": {dist: max(per.values()) for dist, per in speedup.items()},
            "planner_splits": planner_table(cases),
            "forced_split_speedup_where_declined": {d: {f"batch {b}": x for b, x in per.items()}
                                                    for d, per in speedups(cases, "auto", "forced").items()},
            "graph_planning_speedup": {d: {f"batch {b}": x for b, x in per.items()}
                                       for d, per in speedups(cases, "auto", "graph").items()},
            "planner_cap_work_units": split_plan.planner_cap(doc.get("sm_count"), doc.get("num_kv_heads")),
            "plan_us_per_call": statistics.median(c["plan_us"] for c in auto),
            "fast_plan_us_per_call": statistics.median(fast) if fast else None,
            "plan_us_per_layer": statistics.median(c["plan_us"] for c in auto) / doc["num_layers"],
            "sglang_graph_decode_pays": "fast_decode_plan" if fast else None,
            "timing": timer_comparison(cases, lambda c: f"batch {c['batch']} {c['distribution']} {c['split']}"),
            "num_layers": doc.get("num_layers"), "planning": doc.get("planning"), "by_batch": by_batch,
            "checks_failed": sum(1 for c in doc.get("checks", []) if not c.get("ok"))}


def _median(values: list) -> float | None:
    values = [v for v in values if v]
    return statistics.median(values) if values else None


def run(opts: BalanceOptions, shape: AttentionShape, progress: Callable[[str], None]) -> dict:
    """Run every (batch, distribution) group on GPU 0; returns the data for balance.json."""
    from llmhost.fi.balance_kernels import SplitBench

    bench = SplitBench(opts, shape)
    todo = [(b, d) for b in opts.batches for d in opts.distributions]
    cases: list[dict] = []
    found: list[dict] = []
    started = time.monotonic()
    for done, (batch, dist) in enumerate(todo, 1):
        seq_lens = lengths.make_lengths(dist, batch, opts.total_tokens, opts.seed)
        rows, checked = bench.measure_group(batch, dist, seq_lens)
        cases += rows
        found += checked
        eta = (time.monotonic() - started) / done * (len(todo) - done)
        timed = ", ".join(f"{r['split']} {r['median_us']:.1f} us" + (" (split)" if r.get("split_kv") else "")
                          for r in rows)
        costs = {r["split"]: r for r in rows}
        plans = (f"; plan() {costs['auto']['plan_us']:.0f} us" if "auto" in costs else "") + (
            f", fast_decode_plan {costs['graph']['fast_plan_us']:.0f} us" if "graph" in costs else "")
        progress(f"[balance {done}/{len(todo)}] batch {batch} {dist}: {timed}{plans} eta {eta:.0f}s")
    return {"split_control": bench.control, "path": "tensor-core", "planning": PLANNING_NOTE,
            "num_layers": shape.num_layers, "num_kv_heads": shape.num_kv_heads, "sm_count": bench.sm_count,
            "timing": opts.timing, "errors": bench.errors, "cases": cases, "checks": found,
            "speedup_by_distribution": speedups(cases)}
