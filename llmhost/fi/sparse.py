"""Decode attention over a paged KV cache: what page size, page placement, KV dtype and kernel path cost.

One case = one FlashInfer `BatchDecodeWithPagedKVCacheWrapper.run` over a batch with equal total tokens, called the
way SGLang 0.5.17 calls it (NHD layout, backend fa2, plan once then run; tensor cores when the GQA group is >= 4 or
the KV cache is FP8). Before any timing, outputs are checked against a float32 torch reference, and every scattered
placement against the contiguous one (same logical data, copied to the scattered pages). Times come from
llmhost.fi.timing with a cold L2; bandwidth counts the bytes a decode step must move (valid K/V tokens, q, o, page
table) and is stated against the GPU's datasheet peak and a measured device-to-device copy.

Run through `fi_bench.py sparse`; writes <out-dir>/sparse.json.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from llmhost.fi import kv_layout
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.timing import gpu_time_ms, summarize

KV_DTYPES: dict[str, tuple[str, int]] = {  # name -> (torch dtype, bytes per element)
    "bf16": ("bfloat16", 2),
    "fp8": ("float8_e5m2", 1),  # e5m2: SGLang's --kv-cache-dtype fp8_e5m2; e4m3 would need its own JIT build
}
PATHS: dict[str, bool] = {"cuda-core": False, "tensor-core": True}  # -> use_tensor_cores
WORKSPACE_BYTES = 512 * 2**20  # SGLang's FlashInfer workspace for Qwen2/Qwen3 models
POOL_HEADROOM = 1.5  # pool = 1.5 x the largest batch, so random/churned placements have somewhere to scatter to
REL_TOL = 2e-2  # bf16 output vs float32 reference: ~3 significant digits, max error relative to max |ref|


@dataclass(frozen=True, slots=True)
class SparseOptions:
    page_sizes: tuple[int, ...]
    batches: tuple[tuple[int, int], ...]  # (requests, tokens each)
    dtypes: tuple[str, ...]
    paths: tuple[str, ...]
    placements: tuple[str, ...]
    repeat: int
    seed: int = 0


@dataclass(frozen=True, slots=True)
class KernelCase:
    dtype: str
    page_size: int
    batch: int
    seq_len: int
    placement: str
    path: str


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


def bandwidth(total_bytes: int, median_ms: float, peak_gb_s: float | None, copy_gb_s: float | None) -> dict:
    """GB/s achieved and its share of the datasheet peak and of the measured copy bandwidth (percent)."""
    gb_s = total_bytes / (median_ms / 1e3) / 1e9
    return {"gb_s": gb_s, "pct_peak": 100 * gb_s / peak_gb_s if peak_gb_s else None,
            "pct_copy": 100 * gb_s / copy_gb_s if copy_gb_s else None}


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
    """Numbers for fi_summary.json from sparse.json: bandwidth, placement cost per page size, FP8 speedup."""
    cases = [c for c in doc.get("cases", []) if c.get("median_us")]
    if not cases:
        return {}
    best = max(cases, key=lambda c: c["gb_s"])
    # SGLang's own setting: bf16 KV, tensor cores (Qwen3's group 4), page size 1, a churned pool
    sglang = [c for c in cases if (c["dtype"], c["path"], c["page_size"], c["placement"]) ==
              ("bf16", "tensor-core", min(c2["page_size"] for c2 in cases), "churned")]
    ratios: dict[str, dict[str, float]] = {}
    for page_size in sorted({c["page_size"] for c in cases}):
        for placement in sorted({c["placement"] for c in cases} - {"contiguous"}):
            got = _median([c["vs_contiguous"] for c in cases if c["page_size"] == page_size
                           and c["placement"] == placement and c.get("vs_contiguous")])
            if got is not None:
                ratios.setdefault(f"page {page_size}", {})[placement] = got
    by_key = {(c["path"], c["page_size"], c["batch"], c["seq_len"], c["placement"], c["dtype"]): c["median_us"]
              for c in cases}
    fp8: dict[str, float] = {}
    for path in sorted({c["path"] for c in cases}):
        speedups = [us / by_key[key[:-1] + ("fp8",)] for key, us in by_key.items()
                    if key[0] == path and key[-1] == "bf16" and key[:-1] + ("fp8",) in by_key]
        if speedups:
            fp8[path] = statistics.median(speedups)
    return {"decode_gb_s_best": best["gb_s"], "decode_pct_peak_best": best["pct_peak"],
            "decode_pct_copy_best": best["pct_copy"],
            "best_case": f"{best['dtype']} {best['path']} {best['batch']}x{best['seq_len']} page {best['page_size']} "
                         f"{best['placement']}",
            "decode_gb_s_sglang_like": sglang[0]["gb_s"] if sglang else None,
            "decode_pct_peak_sglang_like": sglang[0]["pct_peak"] if sglang else None,
            "scattered_over_contiguous_time": ratios, "fp8_over_bf16_speedup": fp8,
            "checks_failed": sum(1 for c in doc.get("checks", []) if not c.get("ok"))}


def pool_tokens(opts: SparseOptions) -> int:
    """Tokens in the KV pool: headroom x the largest batch (+ one page per request), a multiple of every page size."""
    need = max(b * (n + max(opts.page_sizes)) for b, n in opts.batches)
    step = math.lcm(*opts.page_sizes, 16)  # 16: the reference check views the pool in pages of 16
    return -(-int(need * POOL_HEADROOM) // step) * step


def run(opts: SparseOptions, shape: AttentionShape, ceilings: dict, progress: Callable[[str], None]) -> dict:
    """Run the matrix on GPU 0; returns {"cases", "checks", "first_call_s", "errors"} for sparse.json."""
    import torch

    matrix = cases(opts)
    kernels = Kernels(shape, opts.paths)
    tables: dict[tuple, kv_layout.PageTable] = {}  # placements are dtype-independent: build once
    results, checks, errors = [], [], {}
    contiguous_us: dict[tuple, float] = {}
    done = 0
    started = time.monotonic()
    tokens = pool_tokens(opts)
    progress(f"[sparse] {len(matrix)} cases; KV pool {tokens} tokens per dtype; {opts.repeat} timed runs each")
    for dtype in opts.dtypes:
        torch_dtype = getattr(torch, KV_DTYPES[dtype][0])
        k_flat, v_flat = (torch.randn(tokens, shape.num_kv_heads, shape.head_dim, dtype=torch.bfloat16,
                                      device="cuda").to(torch_dtype) for _ in range(2))
        errors.update(kernels.load(dtype, k_flat, v_flat, opts.seed, checks, progress))
        group: list[KernelCase] = [c for c in matrix if c.dtype == dtype]
        for case in group:
            if f"{dtype}/{case.path}" in errors:
                continue
            table_key = (case.page_size, case.batch, case.seq_len, case.placement)
            if table_key not in tables:
                tables[table_key] = kv_layout.place(case.placement, [case.seq_len] * case.batch, case.page_size,
                                                    tokens // case.page_size, opts.seed)
            done += 1
            try:
                result, check = kernels.measure(case, tables[table_key], k_flat, v_flat, opts.repeat, ceilings)
            except AssertionError as exc:  # wrong output: no speed is reported for this case
                kind = "scattered == contiguous" if case.placement != "contiguous" else "contiguous == torch reference"
                checks.append({"check": kind, **asdict(case), "ok": False, "error": str(exc)})
                progress(f"[sparse {done}/{len(matrix)}] {_describe(case)}: WRONG OUTPUT, not timed ({exc})")
                continue
            results.append(result)
            if check:
                checks.append(check)
            group_key = (case.page_size, case.batch, case.seq_len, case.path, dtype)
            if case.placement == "contiguous":  # runs first in its group: the reference for the others
                contiguous_us[group_key] = result["median_us"]
            ratio = (f", x{result['median_us'] / contiguous_us[group_key]:.2f} vs contiguous"
                     if group_key in contiguous_us else "")
            eta = (time.monotonic() - started) / done * (len(matrix) - done)
            progress(f"[sparse {done}/{len(matrix)}] {_describe(case)}: {result['median_us']:.1f} us "
                     f"(p10 {result['p10_us']:.1f}, p90 {result['p90_us']:.1f}), {result['gb_s']:.0f} GB/s "
                     f"({result['pct_peak'] or 0:.0f}% of peak){ratio} eta {eta:.0f}s")
        del k_flat, v_flat
        kernels.forget_pool()
        torch.cuda.empty_cache()
    add_ratios(results)
    return {"cases": results, "checks": checks, "first_call_s": kernels.first_call_s, "errors": errors}


def _describe(case: KernelCase) -> str:
    return f"{case.dtype} {case.path} {case.batch}x{case.seq_len} page {case.page_size} {case.placement}"


class Kernels:
    """The two decode wrappers (sharing one workspace, as SGLang's do), the data copies and the checks."""

    def __init__(self, shape: AttentionShape, paths: tuple[str, ...]) -> None:
        import flashinfer
        import torch

        self.torch, self.shape = torch, shape
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.wrappers = {path: flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=PATHS[path], backend="fa2") for path in paths}
        self.first_call_s: dict[str, float] = {}
        self.contiguous_out: dict[tuple, Any] = {}
        self.logical: tuple | None = None  # (key, K pages, V pages) of the contiguous layout, copied to scatter
        self.placed: tuple | None = None  # (group, placement) whose pages currently hold the logical data
        self.query = self.out = None
        self.mean_run: dict[int, float] = {}  # id(page table) -> mean run of consecutive pages (tables live all run)

    def forget_pool(self) -> None:
        self.contiguous_out.clear()
        self.logical = self.placed = None

    def load(self, dtype: str, k_flat, v_flat, seed: int, checks: list[dict],
             progress: Callable[[str], None]) -> dict[str, str]:
        """Load (or compile) each path's kernel for this dtype and check it; returns {dtype/path: error}."""
        errors = {}
        for path in self.wrappers:
            progress(f"[sparse] {dtype} {path}: loading the kernel (compiles first if not in the JIT cache)")
            try:
                checks.append(self.check_reference(dtype, path, k_flat, v_flat, seed))
            except Exception as exc:  # cannot build/run here, or wrong output: record it, keep the other paths
                errors[f"{dtype}/{path}"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                progress(f"[sparse] {dtype} {path}: skipped ({errors[f'{dtype}/{path}']})")
                continue
            progress(f"[sparse] {dtype} {path}: ready in {self.first_call_s[f'{dtype}/{path}']:.1f} s, matches "
                     f"the torch reference (rel err {checks[-1]['rel_err']:.1e})")
        return errors

    def plan(self, path: str, table: kv_layout.PageTable, dtype: str) -> None:
        torch = self.torch
        as_tensor = lambda values: torch.tensor(values, dtype=torch.int32, device="cuda")  # noqa: E731
        self.wrappers[path].plan(
            as_tensor(table.indptr), as_tensor(table.indices), as_tensor(table.last_page_len),
            self.shape.num_qo_heads, self.shape.num_kv_heads, self.shape.head_dim, table.page_size,
            q_data_type=torch.bfloat16, kv_data_type=getattr(torch, KV_DTYPES[dtype][0]))

    def check_reference(self, dtype: str, path: str, k_flat, v_flat, seed: int) -> dict:
        """A small ragged batch (1, 77, 300 tokens; page 16; random pages) against a float32 torch decode."""
        torch, shape = self.torch, self.shape
        page_size, lens = 16, [1, 77, 300]
        table = kv_layout.place("random", lens, page_size, k_flat.shape[0] // page_size, seed)
        k_pages, v_pages = (x.view(-1, page_size, shape.num_kv_heads, shape.head_dim) for x in (k_flat, v_flat))
        q = torch.randn(len(lens), shape.num_qo_heads, shape.head_dim, dtype=torch.bfloat16, device="cuda")
        # plan() builds or loads the kernel module (a JIT compile when it is not cached): time plan + first run
        start = time.monotonic()
        self.plan(path, table, dtype)
        out = self.wrappers[path].run(q, (k_pages, v_pages)).float()
        torch.cuda.synchronize()
        self.first_call_s.setdefault(f"{dtype}/{path}", time.monotonic() - start)
        ref = reference_decode(torch, q, k_pages, v_pages, table)
        rel_err = float((out - ref).abs().max() / ref.abs().max())
        if not rel_err <= REL_TOL:
            raise AssertionError(f"{dtype} {path} decode differs from the torch reference: rel err {rel_err:.3g}")
        return {"check": "torch reference (1/77/300 tokens, page 16, random)", "dtype": dtype, "path": path,
                "rel_err": rel_err, "ok": True}

    def measure(self, case: KernelCase, table: kv_layout.PageTable, k_flat, v_flat, repeat: int,
                ceilings: dict) -> tuple[dict, dict | None]:
        """Place the logical KV at the table's pages, plan, check against contiguous, then time."""
        torch, shape = self.torch, self.shape
        k_pages, v_pages = (x.view(-1, case.page_size, shape.num_kv_heads, shape.head_dim) for x in (k_flat, v_flat))
        group = (case.page_size, case.batch, case.seq_len)
        if self.logical is None or self.logical[0] != group:
            # contiguous pages 0..n-1 hold the logical data; byte views make the copies dtype-agnostic (fp8 too)
            n = table.num_pages
            self.logical = (group, k_pages[:n].view(torch.uint8).clone(), v_pages[:n].view(torch.uint8).clone())
            torch.manual_seed(case.batch)
            self.query = torch.randn(case.batch, shape.num_qo_heads, shape.head_dim, dtype=torch.bfloat16,
                                     device="cuda")
            self.out = torch.empty_like(self.query)
        if case.placement != "contiguous" and self.placed != (group, case.placement):
            self.placed = (group, case.placement)
            where = torch.tensor(table.indices, dtype=torch.int64, device="cuda")
            k_pages.view(torch.uint8).index_copy_(0, where, self.logical[1])
            v_pages.view(torch.uint8).index_copy_(0, where, self.logical[2])
        self.plan(case.path, table, case.dtype)
        wrapper = self.wrappers[case.path]
        call = lambda: wrapper.run(self.query, (k_pages, v_pages), out=self.out)  # noqa: E731
        call()
        check = self._check_against_contiguous(case, table, k_pages, v_pages)
        stats = summarize(samples := gpu_time_ms(call, repeat=repeat, cold_l2=True))
        moved = kv_layout.decode_bytes(table, shape.num_qo_heads, shape.num_kv_heads, shape.head_dim,
                                       KV_DTYPES[case.dtype][1])
        if id(table) not in self.mean_run:  # one pass over up to 256K pages: once per table, not per case
            runs = kv_layout.run_lengths(table)
            self.mean_run[id(table)] = sum(runs) / len(runs)
        result = {**asdict(case), "median_us": stats["median_ms"] * 1e3, "p10_us": stats["p10_ms"] * 1e3,
                  "p90_us": stats["p90_ms"] * 1e3, "n": stats["n"], **moved,
                  **bandwidth(moved["total_bytes"], stats["median_ms"], ceilings.get("peak_gb_s"),
                              ceilings.get("copy_gb_s")),
                  "mean_run_pages": self.mean_run[id(table)], "samples_ms": samples}
        return result, check

    def _check_against_contiguous(self, case: KernelCase, table: kv_layout.PageTable, k_pages, v_pages) -> dict | None:
        """Scattered cases must equal their contiguous case; the contiguous case itself is checked against the
        float32 reference on its first two requests, so every page size and shape that is timed was verified."""
        key = (case.page_size, case.batch, case.seq_len, case.path)
        if case.placement == "contiguous":
            head = replace(table, seq_lens=table.seq_lens[:2], indptr=table.indptr[:3],
                           last_page_len=table.last_page_len[:2])
            ref = reference_decode(self.torch, self.query[:2], k_pages, v_pages, head)
            rel_err = float((self.out[:2].float() - ref).abs().max() / ref.abs().max())
            if not rel_err <= REL_TOL:
                raise AssertionError(f"{_describe(case)}: differs from the float32 reference by rel err "
                                     f"{rel_err:.3g} (first 2 requests)")
            self.contiguous_out[key] = self.out.clone()
            return {"check": "contiguous == torch reference (first 2 requests)", **asdict(case),
                    "rel_err": rel_err, "ok": True}
        ref = self.contiguous_out.get(key)
        if ref is None:  # its contiguous case failed its reference check: nothing verified to compare with
            raise AssertionError(f"{_describe(case)}: no verified contiguous output to compare with")
        diff = float((self.out.float() - ref.float()).abs().max())
        scale = float(ref.float().abs().max())
        if not diff <= REL_TOL * scale:
            raise AssertionError(f"{_describe(case)}: output differs from contiguous by {diff:.3g} "
                                 f"(max |out| {scale:.3g}): wrong pages read")
        return {"check": "scattered == contiguous", **asdict(case), "max_abs_diff": diff, "ok": True}


def reference_decode(torch, q, k_pages, v_pages, table: kv_layout.PageTable):
    """float32 single-query attention per request, GQA by head groups: softmax(q K^T / sqrt(d)) V."""
    outs = []
    num_kv, head_dim = k_pages.shape[2], k_pages.shape[3]
    group = q.shape[1] // num_kv
    for b, seq_len in enumerate(table.seq_lens):
        pages = torch.tensor(table.pages_of(b), dtype=torch.int64, device=q.device)
        # gather through a byte view: indexing kernels cover uint8 everywhere, FP8 dtypes not in every torch
        k, v = (x.view(torch.uint8)[pages].view(x.dtype).float().reshape(-1, num_kv, head_dim)[:seq_len]
                for x in (k_pages, v_pages))
        qb = q[b].float().view(num_kv, group, head_dim)
        probs = (torch.einsum("hgd,thd->hgt", qb, k) / math.sqrt(head_dim)).softmax(-1)
        outs.append(torch.einsum("hgt,thd->hgd", probs, v).reshape(-1, head_dim))
    return torch.stack(outs)
