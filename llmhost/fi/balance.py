"""Split-KV and planning: does splitting long requests across CTAs pay off, and what does plan() cost?

Decode attention gives each request (x KV-head group) a CTA. With one 32K-token request among short ones, that CTA
walks 32K tokens while the others finish early: the GPU idles on the critical path. Split-KV cuts long KV into
chunks processed by separate CTAs and merges their partial softmax states afterwards. FlashInfer decides the split in
plan() on the CPU, from the lengths; SGLang calls plan() once per forward batch (FlashInferAttnBackend.
init_forward_metadata -> indices_updater_decode.update) and every layer's forward_decode reuses that plan, so its
cost is paid once per step, not per layer.

Cases: batch sizes x length distributions (llmhost.fi.lengths, equal total tokens), split-KV on (the planner's
choice) vs off, on the tensor-core decode path SGLang uses for Qwen3 (the path whose plan() honours the switch).
Each output is checked against a float32 torch reference before it is timed. plan() is timed on the CPU over many
synchronized calls (median). Run through `fi_bench.py balance`; writes <out-dir>/balance.json.
"""
from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmhost.fi import kv_layout, lengths
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.sparse import REL_TOL, WORKSPACE_BYTES, reference_decode
from llmhost.fi.timing import gpu_time_ms, percentile, summarize

PLANNING_NOTE = ("SGLang 0.5.17 plans once per forward batch (FlashInferAttnBackend.init_forward_metadata) and "
                 "all layers reuse that plan (forward_decode reads forward_metadata.decode_wrappers)")


@dataclass(frozen=True, slots=True)
class BalanceOptions:
    batches: tuple[int, ...]
    distributions: tuple[str, ...]
    total_tokens: int
    page_size: int
    repeat: int
    plan_repeat: int
    seed: int = 0


def plan_parameters(plan: Callable) -> set[str]:
    """Keyword names a wrapper's plan() accepts, looking through a **kwargs forwarder to _plan_impl (0.6.x)."""
    names = set(inspect.signature(plan).parameters)
    impl = getattr(getattr(plan, "__self__", None), "_plan_impl", None)
    if impl is not None and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(plan).parameters.values()):
        names |= set(inspect.signature(impl).parameters)
    return names


def split_control(names: set[str]) -> dict:
    """How split-KV can be turned off with this FlashInfer, from plan()'s parameters."""
    if "disable_split_kv" in names:
        return {"method": "disable_split_kv", "off_kwargs": {"disable_split_kv": True},
                "note": "plan(disable_split_kv=True): one CTA per request and KV head, no merge"}
    if "fixed_split_size" in names:
        return {"method": "fixed_split_size", "off_kwargs": None,
                "note": "plan(fixed_split_size=<longest request in pages>): a single chunk per request"}
    return {"method": None, "off_kwargs": None,
            "note": "this FlashInfer's plan() has neither disable_split_kv nor fixed_split_size: split-KV on only"}


def speedups(cases: list[dict]) -> dict[str, dict[str, float]]:
    """{distribution: {batch: time without split / time with split}} (> 1: splitting helps)."""
    times = {(c["distribution"], c["batch"], c["split"]): c["median_us"] for c in cases}
    out: dict[str, dict[str, float]] = {}
    for (dist, batch, split), on_us in sorted(times.items()):
        off_us = times.get((dist, batch, "off"))
        if split == "on" and off_us:
            out.setdefault(dist, {})[str(batch)] = off_us / on_us
    return out


def headline(doc: dict) -> dict:
    """Numbers for fi_summary.json from balance.json: split-KV speedups, plan() cost next to the kernel."""
    on = [c for c in doc.get("cases", []) if c["split"] == "on"]
    if not on:
        return {}
    by_batch: dict[str, dict[str, float]] = {}
    for batch in sorted({c["batch"] for c in on}):
        rows = [c for c in on if c["batch"] == batch]
        by_batch[f"batch {batch}"] = {"plan_us": statistics.median(c["plan_us"] for c in rows),
                                "kernel_us_per_layer": statistics.median(c["median_us"] for c in rows)}
    speedup = doc.get("speedup_by_distribution") or speedups(doc["cases"])
    return {"split_kv_speedup": {dist: {f"batch {b}": x for b, x in per.items()} for dist, per in speedup.items()},
            "split_kv_best": {dist: max(per.values()) for dist, per in speedup.items()},
            "split_kv_control": (doc.get("split_control") or {}).get("method"),
            "plan_us_per_call": statistics.median(c["plan_us"] for c in on),
            "plan_us_per_layer": statistics.median(c["plan_us_per_layer"] for c in on),
            "num_layers": doc.get("num_layers"), "planning": doc.get("planning"), "by_batch": by_batch,
            "checks_failed": sum(1 for c in doc.get("checks", []) if not c.get("ok"))}


def run(opts: BalanceOptions, shape: AttentionShape, progress: Callable[[str], None]) -> dict:
    """Run every (batch, distribution, split) case on GPU 0; returns the data for balance.json."""
    import flashinfer
    import torch

    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True, backend="fa2")
    control = split_control(plan_parameters(wrapper.plan))
    splits = ("on", "off") if control["method"] else ("on",)
    pool_pages = kv_layout.pages_needed(opts.total_tokens, opts.page_size) + max(opts.batches)
    k_pages, v_pages = (torch.randn(pool_pages, opts.page_size, shape.num_kv_heads, shape.head_dim,
                                    dtype=torch.bfloat16, device="cuda") for _ in range(2))
    todo = [(b, d) for b in opts.batches for d in opts.distributions]
    cases, checks, started = [], [], time.monotonic()
    for done, (batch, dist) in enumerate(todo, 1):
        seq_lens = lengths.make_lengths(dist, batch, opts.total_tokens, opts.seed)
        table = kv_layout.place("contiguous", seq_lens, opts.page_size, pool_pages)
        q = torch.randn(batch, shape.num_qo_heads, shape.head_dim, dtype=torch.bfloat16, device="cuda")
        ref = reference_decode(torch, q, k_pages, v_pages, table)
        timed: list[str] = []
        for split in splits:
            extra = _split_kwargs(control, split, table)
            plan_us = _plan_us(wrapper, table, shape, extra, opts.plan_repeat, torch)
            out = wrapper.run(q, (k_pages, v_pages))
            rel_err = float((out.float() - ref).abs().max() / ref.abs().max())
            checks.append({"check": "torch reference", "batch": batch, "distribution": dist, "split": split,
                           "rel_err": rel_err, "ok": rel_err <= REL_TOL})
            if rel_err > REL_TOL:
                progress(f"[balance] {batch} x {dist} split {split}: WRONG OUTPUT (rel err {rel_err:.3g}), not timed")
                continue
            stats = summarize(samples := gpu_time_ms(lambda: wrapper.run(q, (k_pages, v_pages), out=out),
                                                     repeat=opts.repeat, cold_l2=True))
            cases.append({"batch": batch, "distribution": dist, "split": split, "max_len": max(seq_lens),
                          "imbalance": lengths.imbalance(seq_lens), "median_us": stats["median_ms"] * 1e3,
                          "p10_us": stats["p10_ms"] * 1e3, "p90_us": stats["p90_ms"] * 1e3, "n": stats["n"],
                          **plan_us, "plan_us_per_layer": plan_us["plan_us"] / shape.num_layers,
                          "kernel_us_per_forward": stats["median_ms"] * 1e3 * shape.num_layers,
                          "samples_ms": samples})
            timed.append(f"split {split} {cases[-1]['median_us']:.1f} us (plan {plan_us['plan_us']:.0f} us)")
        eta = (time.monotonic() - started) / done * (len(todo) - done)
        progress(f"[balance {done}/{len(todo)}] batch {batch} {dist}: {', '.join(timed)} eta {eta:.0f}s")
    return {"split_control": {k: v for k, v in control.items() if k != "off_kwargs"}, "path": "tensor-core",
            "planning": PLANNING_NOTE, "num_layers": shape.num_layers, "num_kv_heads": shape.num_kv_heads,
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count, "cases": cases, "checks": checks,
            "speedup_by_distribution": speedups(cases)}


def _split_kwargs(control: dict, split: str, table: kv_layout.PageTable) -> dict:
    if split == "on":
        return {}
    if control["method"] == "fixed_split_size":
        return {"fixed_split_size": max(table.indptr[i + 1] - table.indptr[i] for i in range(table.batch_size))}
    return dict(control["off_kwargs"])


def _plan_us(wrapper, table: kv_layout.PageTable, shape: AttentionShape, extra: dict, repeat: int, torch) -> dict:
    """CPU time of plan() as SGLang calls it (page table already on the GPU), median of synchronized calls."""
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int32, device="cuda")  # noqa: E731
    args = (as_tensor(table.indptr), as_tensor(table.indices), as_tensor(table.last_page_len),
            shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, table.page_size)
    kwargs = {"q_data_type": torch.bfloat16, "kv_data_type": torch.bfloat16, "non_blocking": True, **extra}
    samples = []
    for i in range(repeat + 3):  # 3 unmeasured: the first call loads the kernel module
        torch.cuda.synchronize()
        start = time.perf_counter()
        wrapper.plan(*args, **kwargs)
        torch.cuda.synchronize()
        if i >= 3:
            samples.append((time.perf_counter() - start) * 1e6)
    return {"plan_us": statistics.median(samples), "plan_p10_us": percentile(samples, 10),
            "plan_p90_us": percentile(samples, 90), "plan_n": len(samples)}
