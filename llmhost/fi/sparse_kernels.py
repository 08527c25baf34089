"""The GPU side of `fi_bench.py sparse`: the two decode wrappers, the KV data placed at each case's pages, the checks
and the timing of one case (llmhost.fi.sparse drives the matrix).

Per case: plan (the planner's split decision is recorded), one run, then the check — contiguous cases against the
float32 reference on their first two requests with the drop/duplicate controls (llmhost.fi.checks), scattered cases
bit for bit against their contiguous case under the same plan — and only then the timing: the precise timer
(CUDA-graph replay, or CUPTI where installed) and the event timer beside it, then a roofline line.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from llmhost.fi import checks, kv_layout, roofline, split_plan
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.timing import Method, timed

KV_DTYPES: dict[str, tuple[str, int]] = {  # name -> (torch dtype, bytes per element)
    "bf16": ("bfloat16", 2),
    "fp8": ("float8_e5m2", 1),  # e5m2: SGLang's --kv-cache-dtype fp8_e5m2; e4m3 would need its own JIT build
}
PATHS: dict[str, bool] = {"cuda-core": False, "tensor-core": True}  # -> use_tensor_cores
WORKSPACE_BYTES = 512 * 2**20  # SGLang's FlashInfer workspace for Qwen2/Qwen3 models
SMALL_CHECK_LENS = (1, 77, 300)  # ragged, short: a dropped token of 300 moves the output ~6%, far past REL_TOL


@dataclass(frozen=True, slots=True)
class KernelCase:
    dtype: str
    page_size: int
    batch: int
    seq_len: int
    placement: str
    path: str


def describe(case: KernelCase) -> str:
    return f"{case.dtype} {case.path} {case.batch}x{case.seq_len} page {case.page_size} {case.placement}"


def bandwidth(total_bytes: int, median_ms: float, peak_gb_s: float | None, copy_gb_s: float | None) -> dict:
    """GB/s achieved and its share of the datasheet peak and of the measured copy bandwidth (percent)."""
    gb_s = total_bytes / (median_ms / 1e3) / 1e9
    return {"gb_s": gb_s, "pct_peak": 100 * gb_s / peak_gb_s if peak_gb_s else None,
            "pct_copy": 100 * gb_s / copy_gb_s if copy_gb_s else None}


def distinct_bandwidth(moved: dict[str, int], median_ms: float, peak_gb_s: float | None) -> dict:
    """The step's bandwidth counting each shared KV page once (= the plain one where no page is shared)."""
    distinct = moved["total_bytes"] - moved["kv_bytes"] + moved["distinct_kv_bytes"]
    got = bandwidth(distinct, median_ms, peak_gb_s, None)
    return {"distinct_gb_s": got["gb_s"], "distinct_pct_peak": got["pct_peak"]}


class DecodeBench:
    """The two decode wrappers (sharing one workspace, as SGLang's do), the data copies, checks and timing."""

    def __init__(self, shape: AttentionShape, paths: tuple[str, ...], method: Method) -> None:
        import flashinfer
        import torch

        self.torch, self.shape, self.method = torch, shape, method
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.wrappers = {path: flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=PATHS[path], backend="fa2") for path in paths}
        self.l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or None
        self.first_call_s: dict[str, float] = {}
        self.contiguous: dict[tuple, tuple[Any, dict]] = {}  # (page, batch, len, path) -> (verified out, plan)
        self.logical: tuple | None = None  # (key, K pages, V pages) of the contiguous layout, copied to scatter
        self.placed: tuple | None = None  # (group, placement) whose pages currently hold the logical data
        self.query = self.out = None
        self.mean_run: dict[int, float] = {}  # id(page table) -> mean run of consecutive pages (tables live all run)

    def forget_pool(self) -> None:
        self.contiguous.clear()
        self.logical = self.placed = None

    def load(self, dtype: str, k_flat: Any, v_flat: Any, seed: int, found: list[dict],
             progress: Callable[[str], None]) -> dict[str, str]:
        """Load (or compile) each path's kernel for this dtype and check it; returns {dtype/path: error}."""
        errors = {}
        for path in self.wrappers:
            progress(f"[sparse] {dtype} {path}: loading the kernel (compiles first if not in the JIT cache)")
            try:
                found.append(self.check_small(dtype, path, k_flat, v_flat, seed))
            except Exception as exc:  # cannot build/run here, or wrong output: record it, keep the other paths
                errors[f"{dtype}/{path}"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                progress(f"[sparse] {dtype} {path}: skipped ({errors[f'{dtype}/{path}']})")
                continue
            last = found[-1]
            progress(f"[sparse] {dtype} {path}: ready in {self.first_call_s[f'{dtype}/{path}']:.1f} s, matches "
                     f"the torch reference (rel err {last['rel_err']:.1e}; a dropped token moves it "
                     f"{last['drop_change']:.1e}, a duplicated one {last['duplicate_change']:.1e})")
        return errors

    def plan(self, path: str, table: kv_layout.PageTable, dtype: str) -> dict:
        """plan() as SGLang calls it; returns the planner's split decision."""
        torch = self.torch
        as_tensor = lambda values: torch.tensor(values, dtype=torch.int32, device="cuda")  # noqa: E731
        wrapper = self.wrappers[path]
        wrapper.plan(as_tensor(table.indptr), as_tensor(table.indices), as_tensor(table.last_page_len),
                     self.shape.num_qo_heads, self.shape.num_kv_heads, self.shape.head_dim, table.page_size,
                     q_data_type=torch.bfloat16, kv_data_type=getattr(torch, KV_DTYPES[dtype][0]))
        return split_plan.decision(wrapper, table.page_size)

    def check_small(self, dtype: str, path: str, k_flat: Any, v_flat: Any, seed: int) -> dict:
        """A short ragged batch (1, 77, 300 tokens; page 16; random pages) against the float32 reference."""
        torch, shape = self.torch, self.shape
        page_size = 16
        table = kv_layout.place("random", SMALL_CHECK_LENS, page_size, k_flat.shape[0] // page_size, seed)
        k_pages, v_pages = (x.view(-1, page_size, shape.num_kv_heads, shape.head_dim) for x in (k_flat, v_flat))
        q = torch.randn(len(SMALL_CHECK_LENS), shape.num_qo_heads, shape.head_dim, dtype=torch.bfloat16,
                        device="cuda")
        # plan() builds or loads the kernel module (a JIT compile when it is not cached): time plan + first run
        start = time.monotonic()
        self.plan(path, table, dtype)
        out = self.wrappers[path].run(q, (k_pages, v_pages))
        torch.cuda.synchronize()
        self.first_call_s.setdefault(f"{dtype}/{path}", time.monotonic() - start)
        got = checks.check_reference(torch, out, q, k_pages, v_pages, table)
        if not got["ok"]:
            raise AssertionError(f"{dtype} {path} decode differs from the torch reference: rel err "
                                 f"{got['rel_err']:.3g} > {checks.REL_TOL}")
        return {"check": "torch reference (1/77/300 tokens, page 16, random)", "dtype": dtype, "path": path, **got}

    def _place(self, case: KernelCase, table: kv_layout.PageTable, k_pages: Any, v_pages: Any) -> None:
        """Contiguous pages 0..n-1 hold the logical data; scattered placements get a byte copy at their pages (a
        shared placement has fewer pages than requests read, so it has no contiguous twin and no copy)."""
        torch, shape = self.torch, self.shape
        group = (case.page_size, case.batch, case.seq_len)
        if self.logical is None or self.logical[0] != group:
            n = table.num_pages  # byte views make the copies dtype-agnostic (fp8 too)
            self.logical = (group, k_pages[:n].view(torch.uint8).clone(), v_pages[:n].view(torch.uint8).clone())
            torch.manual_seed(case.batch)
            self.query = torch.randn(case.batch, shape.num_qo_heads, shape.head_dim, dtype=torch.bfloat16,
                                     device="cuda")
            self.out = torch.empty_like(self.query)
        shared = case.placement in kv_layout.SHARED_PLACEMENTS  # reads the pool's pages as they are (checked below)
        if case.placement != "contiguous" and not shared and self.placed != (group, case.placement):
            self.placed = (group, case.placement)
            where = torch.tensor(table.indices, dtype=torch.int64, device="cuda")
            k_pages.view(torch.uint8).index_copy_(0, where, self.logical[1])
            v_pages.view(torch.uint8).index_copy_(0, where, self.logical[2])

    def measure(self, case: KernelCase, table: kv_layout.PageTable, k_flat: Any, v_flat: Any, repeat: int,
                ceilings: dict) -> tuple[dict, dict]:
        """Place, plan, run once, check (AssertionError when wrong), then time and add the roofline line."""
        shape = self.shape
        k_pages, v_pages = (x.view(-1, case.page_size, shape.num_kv_heads, shape.head_dim) for x in (k_flat, v_flat))
        self._place(case, table, k_pages, v_pages)
        plan = self.plan(case.path, table, case.dtype)
        wrapper = self.wrappers[case.path]
        call = lambda: wrapper.run(self.query, (k_pages, v_pages), out=self.out)  # noqa: E731
        call()
        check = self._check(case, table, k_pages, v_pages, plan)
        timing = timed(call, repeat=repeat, method=self.method, compare_events=True)
        moved = kv_layout.decode_bytes(table, shape.num_qo_heads, shape.num_kv_heads, shape.head_dim,
                                       KV_DTYPES[case.dtype][1])
        if id(table) not in self.mean_run:  # one pass over up to 256K pages: once per table, not per case
            runs = kv_layout.run_lengths(table)
            self.mean_run[id(table)] = sum(runs) / len(runs)
        peak_tflops = ceilings.get("bf16_tensor_tflops" if PATHS[case.path] else "fp32_tflops")
        line = roofline.decode_roofline(tokens=sum(table.seq_lens), num_qo_heads=shape.num_qo_heads,
                                        num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                                        moved_bytes=moved["total_bytes"], median_us=timing["median_us"],
                                        peak_gb_s=ceilings.get("peak_gb_s"), peak_tflops=peak_tflops)
        result = {**asdict(case), **timing, **moved, **plan,
                  **bandwidth(moved["total_bytes"], timing["median_us"] / 1e3, ceilings.get("peak_gb_s"),
                              ceilings.get("copy_gb_s")),
                  "roofline": line, "mean_run_pages": self.mean_run[id(table)],
                  "kv_over_l2": moved["kv_bytes"] / self.l2_bytes if self.l2_bytes else None,
                  **distinct_bandwidth(moved, timing["median_us"] / 1e3, ceilings.get("peak_gb_s"))}
        return result, check

    def _check(self, case: KernelCase, table: kv_layout.PageTable, k_pages: Any, v_pages: Any, plan: dict) -> dict:
        """Contiguous: reference on the first two requests (+ controls). Scattered: bitwise equal to contiguous.
        Shared: reference on two requests of one prompt and one of another."""
        key = (case.page_size, case.batch, case.seq_len, case.path)
        if case.placement in kv_layout.SHARED_PLACEMENTS:
            return self._check_shared(case, table, k_pages, v_pages)
        if case.placement == "contiguous":
            head = replace(table, seq_lens=table.seq_lens[:2], indptr=table.indptr[:3],
                           last_page_len=table.last_page_len[:2])
            got = checks.check_reference(self.torch, self.out[:2], self.query[:2], k_pages, v_pages, head)
            if not got["ok"]:
                raise AssertionError(f"{describe(case)}: differs from the float32 reference by rel err "
                                     f"{got['rel_err']:.3g} > {checks.REL_TOL} (first 2 requests)")
            self.contiguous[key] = (self.out.clone(), plan)
            return {"check": "contiguous == torch reference (first 2 requests)", **asdict(case), **got}
        if key not in self.contiguous:  # its contiguous case failed its reference check: nothing to compare with
            raise AssertionError(f"{describe(case)}: no verified contiguous output to compare with")
        expected, expected_plan = self.contiguous[key]
        same_plan = {k: plan[k] for k in ("split_kv", "work_units")} == \
            {k: expected_plan[k] for k in ("split_kv", "work_units")}
        got = checks.bitwise(self.out.view(self.torch.uint8), expected.view(self.torch.uint8))
        if not (got["bitwise_equal"] and same_plan):
            worst = float((self.out.float() - expected.float()).abs().max())
            raise AssertionError(f"{describe(case)}: not bit-identical to contiguous ({got['differing_bytes']} bytes "
                                 f"differ, max |diff| {worst:.3g}; same plan: {same_plan}): wrong pages read")
        return {"check": "scattered == contiguous, bitwise, same plan", **asdict(case), **got, "same_plan": same_plan,
                "ok": True}

    def _check_shared(self, case: KernelCase, table: kv_layout.PageTable, k_pages: Any, v_pages: Any) -> dict:
        got = check_shared(self.torch, self.out, self.query, k_pages, v_pages, table, describe(case))
        return {"check": "shared prompt pages == torch reference (two requests of one prompt, one of another)",
                **asdict(case), **got}


def check_shared(torch: Any, out: Any, query: Any, k_pages: Any, v_pages: Any, table: kv_layout.PageTable,
                 label: str) -> dict:
    """A shared placement's output against the float32 reference on its check requests (shared_check_requests);
    AssertionError naming `label` when it differs."""
    picks = shared_check_requests(table.batch_size, table.placement == "shared-interleaved")
    sub = kv_layout.build_csr(table.placement, [table.seq_lens[b] for b in picks],
                              [table.pages_of(b) for b in picks], table.page_size)
    where = torch.tensor(picks, device="cuda")
    got = checks.check_reference(torch, out[where], query[where], k_pages, v_pages, sub)
    if not got["ok"]:
        raise AssertionError(f"{label}: differs from the float32 reference by rel err {got['rel_err']:.3g} > "
                             f"{checks.REL_TOL} (requests {picks})")
    return got


def shared_check_requests(batch: int, interleaved: bool) -> list[int]:
    """Batch positions to check a shared placement on: the first request, another reading its prompt, and one
    reading another prompt (the same prompt twice at different positions, so a wrong page offset shows)."""
    own = kv_layout.group_of(0, batch, interleaved)
    partner = next((b for b in range(1, batch) if kv_layout.group_of(b, batch, interleaved) == own), None)
    other = next((b for b in range(1, batch) if kv_layout.group_of(b, batch, interleaved) != own), None)
    return [0, *(b for b in (partner, other) if b is not None)]
