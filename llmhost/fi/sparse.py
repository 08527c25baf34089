"""Decode attention over a paged KV cache: what page size, page placement, KV dtype and kernel path cost.

One case = one FlashInfer `BatchDecodeWithPagedKVCacheWrapper.run` over a batch with equal total tokens, called the
way SGLang 0.5.17 calls it (NHD layout, backend fa2, plan once then run; tensor cores when the GQA group is >= 4 or
the KV cache is FP8). Before any timing, contiguous outputs are checked against a float32 torch reference (a
tolerance a dropped token fails) and every scattered placement bit for bit against its contiguous case (same plan,
same data at other pages). Times come from llmhost.fi.timing — CUDA-graph replay (CUPTI where installed) — with the
plain event timer beside it; bandwidth counts the bytes a decode step must move (valid K/V tokens, q, o, page table)
against the GPU's datasheet peak and a measured device-to-device copy, and every case carries a roofline line.

Shared placements in SGLang's setting (BF16, tensor cores) are decoded again reading each prompt once
(llmhost.fi.two_level_kernels): the "two_level" records say what a shared-prefix decode would save.

Run through `fi_bench.py sparse`; writes <out-dir>/sparse.json. The GPU side is llmhost.fi.sparse_kernels.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from llmhost.fi import kv_layout, roofline
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.sparse_kernels import KV_DTYPES, KernelCase, describe
from llmhost.fi.timing import Method, timer_comparison

POOL_HEADROOM = 1.5  # pool = 1.5 x the largest batch, so random/churned placements have somewhere to scatter to


@dataclass(frozen=True, slots=True)
class SparseOptions:
    page_sizes: tuple[int, ...]
    batches: tuple[tuple[int, int], ...]  # (requests, tokens each)
    dtypes: tuple[str, ...]
    paths: tuple[str, ...]
    placements: tuple[str, ...]
    repeat: int
    timing: Method
    seed: int = 0


def parse_batches(text: str) -> tuple[tuple[int, int], ...]:
    """'64x4096,16x16384' -> ((64, 4096), (16, 16384)); ValueError naming the bad item."""
    out = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        left, sep, right = item.lower().partition("x")
        if not sep or not left.isdigit() or not right.isdigit() or int(left) < 1 or int(right) < 1:
            raise ValueError(f"batch {item!r} is not REQUESTSxTOKENS (e.g. 64x4096)")
        out.append((int(left), int(right)))
    if not out:
        raise ValueError("no batch shapes given")
    return tuple(out)


def cases(opts: SparseOptions) -> list[KernelCase]:
    """The matrix in execution order: one KV pool per dtype, contiguous first in each group (the reference)."""
    placements = sorted(opts.placements, key=lambda p: p != "contiguous")
    return [KernelCase(dtype, page_size, batch, seq_len, placement, path)
            for dtype in opts.dtypes for page_size in opts.page_sizes for batch, seq_len in opts.batches
            for placement in placements for path in opts.paths]


def add_ratios(results: list[dict]) -> None:
    """vs_contiguous = median time / the contiguous case's median (same dtype, path, batch, page size)."""
    key = ("dtype", "path", "batch", "seq_len", "page_size")
    base = {tuple(r[k] for k in key): r["median_us"] for r in results
            if r["placement"] == "contiguous" and r.get("median_us")}
    for r in results:
        ref = base.get(tuple(r[k] for k in key))
        r["vs_contiguous"] = r["median_us"] / ref if ref and r.get("median_us") else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def headline(doc: dict) -> dict:
    """Numbers for fi_summary.json from sparse.json: bandwidth, placement cost per page size, FP8 speedup and why,
    the timers' disagreement, the planner's decisions and the checks. Bandwidth and the FP8 evidence come from the
    cases whose requests read only their own pages; the shared placements are answered on their own."""
    timed_cases = [c for c in doc.get("cases", []) if c.get("median_us")]
    cases = [c for c in timed_cases if c["placement"] not in kv_layout.SHARED_PLACEMENTS]
    if not cases:
        return {}
    best = max(cases, key=lambda c: c["gb_s"])
    # SGLang's own setting: bf16 KV, tensor cores (Qwen3's group 4), page size 1, a churned pool
    sglang = [c for c in cases if (c["dtype"], c["path"], c["page_size"], c["placement"]) ==
              ("bf16", "tensor-core", min(c2["page_size"] for c2 in cases), "churned")]
    evidence = roofline.per_element_evidence(cases)
    return {"decode_gb_s_best": best["gb_s"], "decode_pct_peak_best": best["pct_peak"],
            "decode_pct_copy_best": best["pct_copy"], "best_case": _label(best),
            "decode_gb_s_sglang_like": sglang[0]["gb_s"] if sglang else None,
            "decode_pct_peak_sglang_like": sglang[0]["pct_peak"] if sglang else None,
            "scattered_over_contiguous_time": placement_ratios(cases),
            "fp8_over_bf16_speedup": {path: e["speedup"] for path, e in evidence.items()},
            "fp8_limit": {path: e["verdict"].split(":")[0] for path, e in evidence.items()},
            "pct_peak_by_kernel": pct_peak_by_kernel(cases), "timing": timer_comparison(cases, _label),
            **shared_prompt_headline(timed_cases), **two_level_headline(doc),
            "planner_split_cases": sum(1 for c in cases if c.get("split_kv")),
            "checks_failed": sum(1 for c in doc.get("checks", []) if not c.get("ok")),
            "checks_bitwise": sum(1 for c in doc.get("checks", []) if c.get("bitwise_equal")),
            "reference_checks_blind_to_a_dropped_token": sum(
                1 for c in doc.get("checks", []) if "detects_drop" in c and not c["detects_drop"])}


def _label(case: dict) -> str:
    return (f"{case['dtype']} {case['path']} {case['batch']}x{case['seq_len']} page {case['page_size']} "
            f"{case['placement']}")


def shared_prompt_headline(cases: list[dict]) -> dict:
    """What reading a shared prompt's pages once per request costs against private pages, in SGLang's setting where
    it was measured (bf16 tensor-core, the smallest page size): time / contiguous per shared placement, and the
    bandwidth that counts each shared page once (near the peak: the L2 cache served the repeated reads)."""
    shared = [c for c in cases if c["placement"] in kv_layout.SHARED_PLACEMENTS and c.get("vs_contiguous")]
    like = [c for c in shared if (c["dtype"], c["path"]) == ("bf16", "tensor-core")] or shared
    if not like:
        return {}
    like = [c for c in like if c["page_size"] == min(c2["page_size"] for c2 in like)]
    out: dict = {"shared_prompt_over_private_time": {}, "shared_prompt_distinct_pct_peak": {}}
    for placement in sorted({c["placement"] for c in like}):
        group = [c for c in like if c["placement"] == placement]
        out["shared_prompt_over_private_time"][placement] = _median([c["vs_contiguous"] for c in group])
        pct = [c["distinct_pct_peak"] for c in group if c.get("distinct_pct_peak")]
        if pct:
            out["shared_prompt_distinct_pct_peak"][placement] = _median(pct)
    out["shared_prompt_case"] = f"{like[0]['dtype']} {like[0]['path']} page {like[0]['page_size']}, " \
                                f"{kv_layout.SHARED_GROUP} requests per prompt"
    return out


def two_level_headline(doc: dict) -> dict:
    """What reading each shared prompt once saves, per batch and placement at the smallest page size measured (SGLang's
    is 1): two-level, level 0 on the prefill kernel, both levels in one launch and FlashInfer's cascade wrapper over
    the one-level time, and the decode step's saving in ms over the model's layers with the fastest two-level way
    (when the document carries the shape)."""
    records = doc.get("two_level") or []
    if not records:
        return {}
    like = [r for r in records if r["page_size"] == min(r2["page_size"] for r2 in records)]
    layers = (doc.get("shape") or {}).get("num_layers")
    out: dict = {"two_level_over_one_level": {}, "prefill_level0_over_one_level": {},
                 "one_launch_over_one_level": {}, "cascade_wrapper_over_one_level": {}}
    for r in sorted(like, key=lambda r: (r["batch"], r["seq_len"], r["placement"])):
        label = f"{r['batch']}x{r['seq_len']} {r['placement']}"
        out["two_level_over_one_level"][label] = r["two_level_over_one_level"]
        out["prefill_level0_over_one_level"][label] = r["prefill_level0_over_one_level"]
        if "one_launch_over_one_level" in r:  # measured since the one-launch way was added
            out["one_launch_over_one_level"][label] = r["one_launch_over_one_level"]
        out["cascade_wrapper_over_one_level"][label] = r["cascade_over_one_level"]
        if layers:
            out.setdefault("two_level_step_saving_ms", {})[label] = best_step_saving_ms(r, layers)
    out["two_level_case"] = f"bf16 tensor-core page {like[0]['page_size']}, {like[0]['members']} requests per prompt"
    return out


def best_step_saving_ms(record: dict, layers: int) -> float:
    """One-level minus the fastest two-level way, per layer in us, times the layers: ms saved per decode step."""
    best = min(record["two_level_us"], record["prefill_level0_us"], record.get("one_launch_us", math.inf))
    return (record["one_level_us"] - best) * layers / 1e3


def placement_ratios(cases: list[dict]) -> dict[str, dict[str, float]]:
    """{page size: {placement: median time / contiguous time}} over the scattered placements."""
    ratios: dict[str, dict[str, float]] = {}
    for page_size in sorted({c["page_size"] for c in cases}):
        for placement in sorted({c["placement"] for c in cases} - {"contiguous", *kv_layout.SHARED_PLACEMENTS}):
            got = _median([c["vs_contiguous"] for c in cases if c["page_size"] == page_size
                           and c["placement"] == placement and c.get("vs_contiguous")])
            if got is not None:
                ratios.setdefault(f"page {page_size}", {})[placement] = got
    return ratios


def pct_peak_by_kernel(cases: list[dict]) -> dict[str, str]:
    """'dtype path' -> 'min-max % of peak' over its cases: the ranges the report explains with the roofline."""
    out = {}
    for kernel in sorted({(c["dtype"], c["path"]) for c in cases}):
        values = [c["pct_peak"] for c in cases if (c["dtype"], c["path"]) == kernel and c.get("pct_peak")]
        if values:
            out[" ".join(kernel)] = f"{min(values):.0f}-{max(values):.0f}%"
    return out


def pool_tokens(opts: SparseOptions) -> int:
    """Tokens in the KV pool: headroom x the largest batch (+ one page per request), a multiple of every page size."""
    need = max(b * (n + max(opts.page_sizes)) for b, n in opts.batches)
    step = math.lcm(*opts.page_sizes, 16)  # 16: the reference check views the pool in pages of 16
    return -(-int(need * POOL_HEADROOM) // step) * step


def run(opts: SparseOptions, shape: AttentionShape, ceilings: dict, progress: Callable[[str], None]) -> dict:
    """Run the matrix on GPU 0; returns {"cases", "checks", "first_call_s", "errors", "two_level"} for sparse.json."""
    import torch

    from llmhost.fi.sparse_kernels import DecodeBench
    from llmhost.fi.two_level_kernels import TwoLevelBench

    matrix = cases(opts)
    bench = DecodeBench(shape, opts.paths, opts.timing)
    two = TwoLevelBench(shape, opts.timing) if any(two_level_applies(c) for c in matrix) else None
    two_levels: list[dict] = []
    tables: dict[tuple, kv_layout.PageTable] = {}  # placements are dtype-independent: build once
    results: list[dict] = []
    found: list[dict] = []
    errors: dict[str, str] = {}
    tokens = pool_tokens(opts)
    clock = _Progress(len(matrix), progress)
    progress(f"[sparse] {len(matrix)} cases; KV pool {tokens} tokens per dtype; {opts.repeat} timed runs each "
             f"({opts.timing} timer, event timer beside it)")
    for dtype in opts.dtypes:
        torch_dtype = getattr(torch, KV_DTYPES[dtype][0])
        k_flat, v_flat = (torch.randn(tokens, shape.num_kv_heads, shape.head_dim, dtype=torch.bfloat16,
                                      device="cuda").to(torch_dtype) for _ in range(2))
        errors.update(bench.load(dtype, k_flat, v_flat, opts.seed, found, progress))
        for case in (c for c in matrix if c.dtype == dtype and f"{dtype}/{c.path}" not in errors):
            key = (case.page_size, case.batch, case.seq_len, case.placement)
            if key not in tables:
                tables[key] = kv_layout.place(case.placement, [case.seq_len] * case.batch, case.page_size,
                                              tokens // case.page_size, opts.seed)
            try:
                result, check = bench.measure(case, tables[key], k_flat, v_flat, opts.repeat, ceilings)
            except AssertionError as exc:  # wrong output: no speed is reported for this case
                kind = "scattered == contiguous" if case.placement != "contiguous" else "contiguous == torch reference"
                found.append({"check": kind, **asdict(case), "ok": False, "error": str(exc)})
                clock.step(f"{describe(case)}: WRONG OUTPUT, not timed ({exc})")
                continue
            results.append(result)
            found.append(check)
            clock.step(_case_line(result))
            if two_level_applies(case):
                record, checked, error = _two_level(two, case, tables[key], (k_flat, v_flat), bench.query,
                                                    result["median_us"], opts, ceilings, progress)
                two_levels += [record] if record else []
                found += checked
                errors.update(error)
        del k_flat, v_flat
        bench.forget_pool()
        torch.cuda.empty_cache()
    add_ratios(results)
    return {"cases": results, "checks": found, "first_call_s": bench.first_call_s, "errors": errors,
            "two_level": two_levels}


def two_level_applies(case: KernelCase) -> bool:
    """A shared prompt decoded as SGLang does (BF16, tensor cores) is also decoded reading each prompt once."""
    return case.placement in kv_layout.SHARED_PLACEMENTS and (case.dtype, case.path) == ("bf16", "tensor-core")


def _two_level(two: Any, case: KernelCase, table: kv_layout.PageTable, kv: tuple[Any, Any], query: Any,
               one_level_us: float, opts: SparseOptions, ceilings: dict,
               progress: Callable[[str], None]) -> tuple[dict | None, list[dict], dict[str, str]]:
    """The case again, each prompt read once (llmhost.fi.two_level_kernels): (record, checks, {case: error}). A batch
    it cannot fold, a wrong output or a kernel that fails gives no record, and the matrix goes on."""
    from llmhost.fi.two_level import NotFoldable

    try:
        record, checked = two.measure(case, table, *kv, query, one_level_us, opts.repeat, ceilings)
    except NotFoldable as exc:
        progress(f"[sparse] {describe(case)}: no two-level decode ({exc})")
        return None, [], {}
    except AssertionError as exc:
        progress(f"[sparse] {describe(case)}: two-level WRONG OUTPUT, not timed ({exc})")
        return None, [{"check": "two-level decode == torch reference", **asdict(case), "ok": False,
                       "error": str(exc)}], {}
    except Exception as exc:  # a kernel this host cannot build or capture: the one-level numbers still stand
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        progress(f"[sparse] {describe(case)}: two-level skipped ({error})")
        return None, [], {f"two-level/{describe(case)}": error}
    progress(f"[sparse] {describe(case)}, each prompt read once: two-level {record['two_level_us']:.1f} us "
             f"(level 0 {record['level0_us']:.1f}, level 1 {record['level1_us']:.1f}) = "
             f"{record['two_level_over_one_level']:.2f}x one-level; level 0 on the prefill kernel "
             f"{record['prefill_level0_over_one_level']:.2f}x; both levels in one launch "
             f"{record['one_launch_over_one_level']:.2f}x; FlashInfer's cascade wrapper "
             f"{record['cascade_over_one_level']:.2f}x")
    return record, checked, {}


def _case_line(r: dict) -> str:
    split = f"split into {r['work_units']} units" if r.get("split_kv") else f"no split ({r.get('work_units')} units)"
    event = f", event timer {r['event_median_us']:.1f} us" if r.get("event_median_us") else ""
    return (f"{_label(r)}: {r['median_us']:.1f} us (p10 {r['p10_us']:.1f}, p90 {r['p90_us']:.1f}){event}, "
            f"{r['gb_s']:.0f} GB/s ({r['pct_peak'] or 0:.0f}% of peak), {split}")


class _Progress:
    """'[sparse i/n] line eta Ns' with the ETA from the mean time per case so far."""

    def __init__(self, total: int, sink: Callable[[str], None]) -> None:
        self.total, self.sink, self.done, self.started = total, sink, 0, time.monotonic()

    def step(self, line: str) -> None:
        self.done += 1
        eta = (time.monotonic() - self.started) / self.done * (self.total - self.done)
        self.sink(f"[sparse {self.done}/{self.total}] {line} eta {eta:.0f}s")
