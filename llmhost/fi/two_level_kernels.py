"""The GPU side of the two-level decode (llmhost.fi.two_level): a shared-prompt batch decoded by reading each prompt
once, four ways, against the one-level decode SGLang runs.

- two-level: level 0 is the tensor-core decode wrapper over the folded queries (one row per group, M x heads query
  heads), level 1 the same wrapper over each request's own pages, both returning their log-sum-exp, then
  flashinfer.merge_state. The gathers and scatters that fold and unfold the queries are part of the timed call.
- prefill-level0: level 0 as FlashInfer's prefill kernel (backend fa2) with the group's members as a query sequence
  of M tokens, level 1 and the merge as above: what the folding is worth against the kernel made for many queries.
- one-launch: levels 0 and 1 as the entries of one prefill plan (fa2) over the query gathered twice in group order
  (llmhost.fi.two_level.one_launch): one kernel launch where the levels take two, level 1's short rows filling the
  SMs beside level 0's long ones, then merge_state_in_place and one scatter. Its query tile is chosen for the
  average entry, so a group of more than 4 members (over 16 query rows a KV head) may read its prefix once per tile.
- cascade: FlashInfer's own MultiLevelCascadeAttentionWrapper over the same two levels. It builds its levels with
  the prefill wrapper's default backend, which on Hopper is fa3 (SM90): 128-row query tiles that do not fuse a KV
  head's query heads, and no KV split (scheduler.cuh, PrefillSM90Plan), so every query head reads the prefix again.

Each is checked against the float32 reference on the shared placement's check requests before they are timed; a
wrong output is recorded as a failed check and not timed. Levels 0 and 1 are also timed alone, which says where the
two-level time goes. Called by llmhost.fi.sparse after each BF16 tensor-core shared case.
"""
from __future__ import annotations

from typing import Any

from llmhost.fi import kv_layout, split_plan, two_level
from llmhost.fi.shapes import AttentionShape
from llmhost.fi.sparse_kernels import WORKSPACE_BYTES, KernelCase, bandwidth, check_shared, describe
from llmhost.fi.timing import Method, timed

VARIANTS = ("two-level", "prefill-level0", "one-launch", "cascade")


class TwoLevelBench:
    """Two decode wrappers (levels 0 and 1), two prefill wrappers (level 0 alone, both levels) and FlashInfer's cascade
    wrapper on one workspace, run one after another."""

    def __init__(self, shape: AttentionShape, method: Method) -> None:
        import flashinfer
        import torch

        self.torch, self.flashinfer, self.shape, self.method = torch, flashinfer, shape, method
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.levels = [flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True,
                                                                     backend="fa2") for _ in range(2)]
        self.prefill0 = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
        self.one = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
        self.cascade = flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace, "NHD")

    def _ints(self, values: Any, dtype: Any = None) -> Any:
        return self.torch.tensor(list(values), dtype=dtype or self.torch.int32, device="cuda")

    def _plan(self, levels: two_level.TwoLevel) -> dict:
        shape, torch = self.shape, self.torch
        for wrapper, table, heads in ((self.levels[0], levels.prefix, levels.members * shape.num_qo_heads),
                                      (self.levels[1], levels.suffix, shape.num_qo_heads)):
            wrapper.plan(self._ints(table.indptr), self._ints(table.indices), self._ints(table.last_page_len),
                         heads, shape.num_kv_heads, shape.head_dim, table.page_size,
                         q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        tables, by_group = (levels.prefix, levels.suffix), self._ints(range(0, len(levels.order) + 1, levels.members))
        self.prefill0.plan(by_group, self._ints(levels.prefix.indptr), self._ints(levels.prefix.indices),
                           self._ints(levels.prefix.last_page_len), shape.num_qo_heads, shape.num_kv_heads,
                           shape.head_dim, levels.prefix.page_size, causal=False, q_data_type=torch.bfloat16,
                           kv_data_type=torch.bfloat16)
        one = two_level.one_launch(levels)
        self.one.plan(self._ints(one.qo_indptr), self._ints(one.table.indptr), self._ints(one.table.indices),
                      self._ints(one.table.last_page_len), shape.num_qo_heads, shape.num_kv_heads, shape.head_dim,
                      one.table.page_size, causal=False, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        self.cascade.plan([by_group, self._ints(range(len(levels.order) + 1))],
                          [self._ints(t.indptr) for t in tables], [self._ints(t.indices) for t in tables],
                          [self._ints(t.last_page_len) for t in tables], shape.num_qo_heads, shape.num_kv_heads,
                          shape.head_dim, levels.prefix.page_size, causal=False, q_data_type=torch.bfloat16,
                          kv_data_type=torch.bfloat16)
        page = levels.prefix.page_size
        return {"level0_plan": split_plan.decision(self.levels[0], page),
                "level1_plan": split_plan.decision(self.levels[1], page),
                "prefill_level0_plan": split_plan.decision(self.prefill0, page),
                "one_launch_plan": split_plan.decision(self.one, page),
                "cascade_backend": getattr(self.cascade._batch_prefill_wrappers[0], "_backend", None)}

    def calls(self, levels: two_level.TwoLevel, query: Any, kv: tuple) -> dict[str, Any]:
        """The timed callables: the variants (each returns [batch, heads, dim] in batch order) and levels 0 and 1
        alone (over queries folded and ordered beforehand)."""
        torch, flashinfer, shape = self.torch, self.flashinfer, self.shape
        batch, heads, dim = query.shape
        rows = self._ints(two_level.fold_rows(levels, shape.num_qo_heads, shape.num_kv_heads), torch.int64)
        order = self._ints(levels.order, torch.int64)
        twice = self._ints(levels.order * 2, torch.int64)
        in_order = levels.order == tuple(range(batch))  # side by side: level 1 needs no gather
        folded_shape = (levels.groups, levels.members * heads, dim)
        out0, lse0 = torch.empty_like(query), torch.empty(batch, heads, dtype=torch.float32, device="cuda")
        out1, lse1 = torch.empty_like(out0), torch.empty_like(lse0)

        def ordered(x: Any) -> Any:
            return x if in_order else x.index_select(0, order)

        def two() -> Any:
            o, s = self.levels[0].run(query.view(-1, dim).index_select(0, rows).view(folded_shape), kv,
                                      return_lse=True)
            out0.view(-1, dim).index_copy_(0, rows, o.view(-1, dim))
            lse0.view(-1).index_copy_(0, rows, s.view(-1))
            o, s = self.levels[1].run(ordered(query), kv, return_lse=True)
            if in_order:
                return flashinfer.merge_state(out0, lse0, o, s)[0]
            out1.index_copy_(0, order, o)
            lse1.index_copy_(0, order, s)
            return flashinfer.merge_state(out0, lse0, out1, lse1)[0]

        def batch_order(o: Any) -> Any:
            if in_order:
                return o
            out1.index_copy_(0, order, o)
            return out1

        def prefill_level0() -> Any:
            grouped = ordered(query)
            o0, s0 = self.prefill0.run(grouped, kv, return_lse=True)
            o1, s1 = self.levels[1].run(grouped, kv, return_lse=True)
            return batch_order(flashinfer.merge_state(o0, s0, o1, s1)[0])

        def one_launch() -> Any:
            o, s = self.one.run(query.index_select(0, twice), kv, return_lse=True)
            flashinfer.merge_state_in_place(o[batch:], s[batch:], o[:batch], s[:batch])
            return batch_order(o[batch:])

        def cascade() -> Any:
            return batch_order(self.cascade.run(ordered(query), kv))

        folded, query1 = query.view(-1, dim).index_select(0, rows).view(folded_shape), ordered(query)
        return {"two-level": two, "prefill-level0": prefill_level0, "one-launch": one_launch, "cascade": cascade,
                "level0": lambda: self.levels[0].run(folded, kv, return_lse=True),
                "level1": lambda: self.levels[1].run(query1, kv, return_lse=True)}

    def measure(self, case: KernelCase, table: kv_layout.PageTable, k_flat: Any, v_flat: Any, query: Any,
                one_level_us: float, repeat: int, ceilings: dict) -> tuple[dict, list[dict]]:
        """Split, plan, check the variants (AssertionError names the wrong one), time them and the two levels."""
        shape = self.shape
        levels = two_level.split(table)
        kv = tuple(x.view(-1, case.page_size, shape.num_kv_heads, shape.head_dim) for x in (k_flat, v_flat))
        plans = self._plan(levels)
        calls = self.calls(levels, query, kv)
        found = []
        for variant in VARIANTS:
            got = check_shared(self.torch, calls[variant](), query, *kv, table, f"{variant} {describe(case)}")
            found.append({"check": f"{variant} decode == torch reference (two requests of one prompt, one of "
                          "another)", **_case_fields(case), "variant": variant, **got})
        times = {name: timed(call, repeat=repeat, method=self.method, compare_events=False)["median_us"]
                 for name, call in calls.items()}
        distinct = two_level.distinct_bytes(levels, shape.num_kv_heads, shape.head_dim, 2)
        record = {**_case_fields(case), "groups": levels.groups, "members": levels.members,
                  "prefix_tokens": sum(levels.prefix.seq_lens) // levels.groups,
                  "suffix_tokens_mean": sum(levels.suffix.seq_lens) / len(levels.order),
                  "one_level_us": one_level_us, **{f"{name.replace('-', '_')}_us": us for name, us in times.items()},
                  **{f"{name.replace('-', '_')}_over_one_level": times[name] / one_level_us for name in VARIANTS},
                  "distinct_kv_bytes": distinct,
                  **{f"two_level_{k}": v for k, v in bandwidth(distinct, times["two-level"] / 1e3,
                                                                ceilings.get("peak_gb_s"), None).items()
                     if k != "pct_copy"}, **plans}
        return record, found


def _case_fields(case: KernelCase) -> dict:
    return {"dtype": case.dtype, "batch": case.batch, "seq_len": case.seq_len, "page_size": case.page_size,
            "placement": case.placement}
