"""The GPU side of `fi_bench.py balance`: one (batch, length distribution) group planned four ways — the planner's
choice, split-KV off, a forced split where the planner declined, and SGLang's CUDA-graph planning through
fast_decode_plan — each checked against the float32 reference, then timed; plus the CPU cost of both planners.
llmhost.fi.balance drives the groups and summarises.
"""
from __future__ import annotations

from typing import Any

from llmhost.fi import checks, kv_layout, lengths, split_plan
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.sparse_kernels import WORKSPACE_BYTES
from llmhost.fi.timing import timed


class SplitBench:
    """The eager tensor-core wrapper, the KV pool and the split controls this FlashInfer offers."""

    def __init__(self, opts: Any, shape: AttentionShape) -> None:
        import flashinfer
        import torch

        self.torch, self.flashinfer, self.opts, self.shape = torch, flashinfer, opts, shape
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.eager = flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD", use_tensor_cores=True,
                                                                   backend="fa2")
        self.control = split_plan.split_control(split_plan.plan_parameters(self.eager.plan))
        self.errors: dict[str, str] = {}
        self.fast_decode_plan = getattr(getattr(flashinfer, "decode", None), "fast_decode_plan", None)
        if self.fast_decode_plan is None:
            self.errors["graph"] = ("flashinfer.decode.fast_decode_plan is missing in this FlashInfer: SGLang's "
                                    "CUDA-graph planning cannot be reproduced, only plan() is timed")
        self.pool_pages = kv_layout.pages_needed(opts.total_tokens, opts.page_size) + max(opts.batches)
        self.k_pages, self.v_pages = (torch.randn(self.pool_pages, opts.page_size, shape.num_kv_heads,
                                                  shape.head_dim, dtype=torch.bfloat16, device="cuda")
                                      for _ in range(2))
        self.sm_count = torch.cuda.get_device_properties(0).multi_processor_count

    def _args(self, table: kv_layout.PageTable) -> tuple:
        as_tensor = lambda values: self.torch.tensor(values, dtype=self.torch.int32, device="cuda")  # noqa: E731
        return (as_tensor(table.indptr), as_tensor(table.indices), as_tensor(table.last_page_len),
                self.shape.num_qo_heads, self.shape.num_kv_heads, self.shape.head_dim, table.page_size)

    def measure_group(self, batch: int, dist: str, seq_lens: list[int]) -> tuple[list[dict], list[dict]]:
        """auto, then off (only where auto split) or forced (only where it did not), then graph planning."""
        torch = self.torch
        table = kv_layout.place("contiguous", seq_lens, self.opts.page_size, self.pool_pages)
        q = torch.randn(batch, self.shape.num_qo_heads, self.shape.head_dim, dtype=torch.bfloat16, device="cuda")
        ref = checks.references(torch, q, self.k_pages, self.v_pages, table)
        args = self._args(table)
        base = {"batch": batch, "distribution": dist, "max_len": max(seq_lens),
                "imbalance": lengths.imbalance(seq_lens)}
        rows, found = [], []
        auto, check = self._eager_case("auto", {}, args, q, table, ref, base)
        found.append(check)
        if auto is not None:
            rows.append({**auto, **self._plan_costs(args, table)})
            other = self._contrast(auto["split_kv"], table)
            if other is not None:
                row, check = self._eager_case(*other, args, q, table, ref, base)
                found.append(check)
                rows += [row] if row is not None else []
        if self.fast_decode_plan is not None:
            try:
                row, check = self._graph_case(args, q, table, ref, base)
            except Exception as exc:  # an API this FlashInfer lacks: say so once, keep the eager measurements
                self.errors["graph"] = f"SGLang's graph planning not reproduced: {type(exc).__name__}: {exc}"[:300]
                self.fast_decode_plan = None
                return rows, found
            found.append(check)
            if row is not None:
                rows.append(row)
        return rows, found

    def _contrast(self, planner_split: bool, table: kv_layout.PageTable) -> tuple[str, dict] | None:
        """What to set the planner's choice against: off where it split, a forced split where it did not."""
        if planner_split and self.control["off"]:
            return "off", {"disable_split_kv": True}
        if not planner_split and self.control["forced"]:
            pages = [table.indptr[i + 1] - table.indptr[i] for i in range(table.batch_size)]
            return "forced", {"fixed_split_size": split_plan.forced_split_pages(pages)}
        return None

    def _eager_case(self, split: str, kwargs: dict, args: tuple, q: Any, table: kv_layout.PageTable,
                    ref: tuple, base: dict) -> tuple[dict | None, dict]:
        torch = self.torch
        self.eager.plan(*args, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, **kwargs)
        decision = split_plan.decision(self.eager, table.page_size)
        out = torch.empty_like(q)
        call = lambda: self.eager.run(q, (self.k_pages, self.v_pages), out=out)  # noqa: E731
        return self._checked_timing(split, call, out, ref, {**base, **decision, "plan_kwargs": kwargs})

    def _checked_timing(self, split: str, call: Any, out: Any, ref: tuple, row: dict) -> tuple[dict | None, dict]:
        """Run once, check against the reference (no timing when wrong), then time."""
        call()
        got = checks.verdict(out.float(), *ref)
        check = {"check": "torch reference (whole batch)", "split": split,
                 **{k: row[k] for k in ("batch", "distribution")}, **got}
        if not got["ok"]:
            return None, check
        timing = timed(call, repeat=self.opts.repeat, method=self.opts.timing, compare_events=True)
        return {**row, "split": split, **timing,
                "kernel_us_per_forward": timing["median_us"] * self.shape.num_layers}, check

    def _plan_costs(self, args: tuple, table: kv_layout.PageTable) -> dict:
        """plan() on the eager wrapper, as SGLang calls it for batches above its CUDA-graph sizes."""
        torch = self.torch
        cost = split_plan.cpu_us(lambda: self.eager.plan(*args, q_data_type=torch.bfloat16,
                                                         kv_data_type=torch.bfloat16, non_blocking=True),
                                 self.opts.plan_repeat, torch.cuda.synchronize)
        return {"plan_us": cost["median_us"], "plan_p10_us": cost["p10_us"], "plan_p90_us": cost["p90_us"],
                "plan_us_per_layer": cost["median_us"] / self.shape.num_layers}

    def _graph_case(self, args: tuple, q: Any, table: kv_layout.PageTable, ref: tuple,
                    base: dict) -> tuple[dict | None, dict]:
        """A use_cuda_graph wrapper planned once (as at capture), then replanned with fast_decode_plan and the
        host-side indptr, as SGLang's replays are: its split decision, kernel time and planning cost."""
        torch = self.torch
        indptr, indices, last, *dims = args
        buffers = (indptr.clone(), indices.clone(), last.clone())  # the graph's fixed inputs (SGLang's kv_indptr...)
        wrapper = self.flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True, backend="fa2",
            paged_kv_indptr_buffer=buffers[0], paged_kv_indices_buffer=buffers[1],
            paged_kv_last_page_len_buffer=buffers[2])
        wrapper.plan(indptr, indices, last, *dims, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        indptr_cpu = torch.tensor(table.indptr, dtype=torch.int32)  # SGLang: cumsum of seq_lens_cpu
        replan = lambda: self.fast_decode_plan(  # noqa: E731
            wrapper, *buffers, *dims, data_type=torch.bfloat16, q_data_type=torch.bfloat16, non_blocking=True,
            fixed_split_size=None, disable_split_kv=False, global_override_indptr_cpu=indptr_cpu)
        replan()
        decision = split_plan.decision(wrapper, table.page_size)
        cost = split_plan.cpu_us(replan, self.opts.plan_repeat, torch.cuda.synchronize)
        out = torch.empty_like(q)
        call = lambda: wrapper.run(q, (self.k_pages, self.v_pages), out=out)  # noqa: E731
        row, check = self._checked_timing("graph", call, out, ref, {**base, **decision})
        if row is not None:
            row.update(fast_plan_us=cost["median_us"], fast_plan_p10_us=cost["p10_us"],
                       fast_plan_p90_us=cost["p90_us"])
        return row, check
