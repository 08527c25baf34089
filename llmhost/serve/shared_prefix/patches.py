"""SGLang 0.5.17's FlashInfer attention backend, taught to decode shared prompts in two levels.

Runs inside the server's scheduler process (loaded by llmhost.serve.shared_prefix.register). ForwardBatch.init_new,
five methods of FlashInferAttnBackend (__init__ and init_cuda_graph_state add the levels' workspace and buffers) and
two of DecodeCudaGraphRunner are wrapped; everything else is SGLang's own:
- ForwardBatch.init_new, on the scheduler's thread with the batch's requests at hand, finds the decode batch's groups
  (llmhost.serve.shared_prefix.groups) and keeps them with the batch's lengths.
- DecodeCudaGraphRunner.capture_one_shape captures, for each batch size from MIN_GRAPH_BATCH up, a two-level graph
  (variant label TWO_LEVELS) after SGLang's own, on SGLang's decode wrappers of that size (the check's reference).
- init_forward_metadata_out_graph (before a decode graph is captured or replayed) and init_forward_metadata (an
  eager decode) always let SGLang plan its decode; when the batch's groups pay for the second level
  (groups.pays) they also plan level 0 on FlashInfer's FA2 prefill kernel (a group's members as the non-causal
  queries of one entry over the shared slots) and level 1 on the tensor-core decode kernel SGLang itself uses
  (each row over its own slots). DecodeCudaGraphRunner.load_batch then picks the two-level graph for that batch
  only; any other batch, or lengths that are not the batch's own (no groups kept for them), replays SGLang's.
- forward_decode gathers the rows into group order once, runs level 1 and level 0 on them, merges level 0 into level 1
  in place (FlashInfer's merge_state_in_place) and scatters the rows back.
LLMHOST_SHARED_PREFIX_CHECK=1 makes every two-level decode graph also run SGLang's own decode on layer 0 and keep the
largest difference, logged every 500 steps (a check, not for serving: it costs a layer's attention per step).
"""
from __future__ import annotations

import logging
import os
from typing import Any

from llmhost.serve.shared_prefix import groups as grouping

log = logging.getLogger("llmhost.shared_prefix")
STATS_EVERY = 1000  # decode steps between two log lines of what the groups saved
CHECK_EVERY = 500
TWO_LEVELS = "llmhost-shared-prefix"  # the decode graphs' variant label
# Smaller batches get no two-level graph: their groups seldom pay (8 rows on one prompt save groups.BREAK_EVEN_BYTES
# on Qwen3-4B only past 3.9k shared tokens), and each graph size adds ~0.1 s of start-up.
MIN_GRAPH_BATCH = 16
WORKSPACE_BYTES = 256 << 20  # FlashInfer's float workspace, shared by both levels and every graph


class _Stats:
    def __init__(self) -> None:
        self.steps = self.two_level = self.rows = self.grouped_rows = self.groups = self.saved = 0

    def count(self, found: list[grouping.Group], rows: int, two_level: bool) -> None:
        """One decode step; its groups count only when it ran in two levels."""
        self.steps += 1
        self.rows += rows
        if two_level:
            self.two_level += 1
            self.grouped_rows += sum(len(g.rows) for g in found)
            self.groups += len(found)
            self.saved += grouping.saved_tokens(found)
        if self.steps % STATS_EVERY == 0:
            log.warning("shared-prefix decode: %d decode steps, %.1f%% of rows in groups, %.2f groups a step, "
                        "%.0f prompt tokens a layer not read again per step; %.1f%% of steps in two levels",
                        self.steps, 100 * self.grouped_rows / max(1, self.rows), self.groups / self.steps,
                        self.saved / self.steps, 100 * self.two_level / self.steps)


_STATS = _Stats()
_KEPT: dict[str, Any] = {"lens": None, "groups": []}  # the last decode batch's lengths and groups


def _kept_groups(seq_lens: Any) -> list[grouping.Group]:
    """The groups found for the batch with these lengths (a graph's padding rows after them), else none."""
    lens = _KEPT["lens"]
    if not lens or seq_lens is None or len(seq_lens) < len(lens):
        return []
    return _KEPT["groups"] if [int(x) for x in seq_lens[:len(lens)]] == lens else []


def apply(sglang_version: str) -> None:
    import dataclasses

    import flashinfer
    import torch
    from sglang.srt.layers.attention import flashinfer_backend as fb
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    check = os.environ.get("LLMHOST_SHARED_PREFIX_CHECK", "") == "1"
    init_new = ForwardBatch.init_new.__func__
    backend = fb.FlashInferAttnBackend
    original = {name: getattr(backend, name) for name in ("__init__", "init_cuda_graph_state", "init_forward_metadata",
                                                          "init_forward_metadata_out_graph", "forward_decode")}
    runner = {name: getattr(DecodeCudaGraphRunner, name) for name in ("capture_one_shape", "load_batch")}
    capturing = {"two_levels": False}

    def init_new_keeping_groups(cls: Any, batch: Any, model_runner: Any, **kwargs: Any) -> Any:
        forward_batch = init_new(cls, batch, model_runner, **kwargs)
        _KEPT["lens"], _KEPT["groups"] = None, []
        if batch.forward_mode.is_decode() and batch.seq_lens_cpu is not None and batch.spec_info is None:
            lens = [int(x) for x in batch.seq_lens_cpu]
            _KEPT["lens"] = lens
            _KEPT["groups"] = grouping.find_groups([req.last_node for req in batch.reqs], lens)
        return forward_batch

    def __init__(self: Any, model_runner: Any, *args: Any, **kwargs: Any) -> None:
        original["__init__"](self, model_runner, *args, **kwargs)
        updater = self.indices_updater_decode
        self._sp_on = (self.num_wrappers == 1 and model_runner.page_size == 1 and self.decode_use_tensor_cores
                       and updater.data_type == updater.q_data_type and not model_runner.is_draft_worker
                       and model_runner.spec_algorithm.is_none()
                       and not getattr(self, "decode_uses_dequant_workspace", False)
                       and not self.use_sliding_window_kv_pool)
        self._sp, self._sp_graphs, self._sp_eager, self._sp_replay_bs = None, {}, None, None
        if not self._sp_on:
            log.warning("shared-prefix decode: off for this model runner (it needs page size 1, tensor-core decode "
                        "of a 16-bit KV cache, one attention wrapper and no speculative decoding)")
            return
        device = model_runner.device
        self._sp_kv_bytes = (2 * updater.num_kv_heads * updater.head_dim * updater.data_type.itemsize
                             * model_runner.model_config.num_hidden_layers)  # K and V of one token, every layer
        self._sp_workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self._sp_req_to_token = model_runner.req_to_token_pool.req_to_token
        x = torch.zeros(2, 2, 128, dtype=torch.bfloat16, device=device)
        s = torch.zeros(2, 2, dtype=torch.float32, device=device)
        flashinfer.merge_state_in_place(x, s, x.clone(), s.clone())  # load the merge kernel before any capture
        log.warning("shared-prefix decode: on (SGLang %s, FlashInfer %s)", sglang_version, flashinfer.__version__)

    def init_cuda_graph_state(self: Any, max_bs: int, max_num_tokens: int, kv_indices_buf: Any = None) -> None:
        original["init_cuda_graph_state"](self, max_bs, max_num_tokens, kv_indices_buf)
        if self._sp_on:
            size = max_num_tokens * self.max_context_len
            device = self._sp_workspace.device
            self._sp_indices = [torch.zeros(size, dtype=torch.int32, device=device) for _ in range(2)]

    def _plan(self: Any, levels: tuple, bs: int, req_pool_indices: Any, seq_lens: Any,
              found: list[grouping.Group], indices: tuple | None) -> Any:
        """Plan both levels for rows 0..bs-1 (host index pointers, page indices written on the GPU) and return the
        row order both levels take their queries in, on the GPU (the graph's own buffer when there is one)."""
        level0, level1, order_buf = levels
        updater = self.indices_updater_decode
        p = grouping.plan([int(x) for x in seq_lens[:bs]], found, bs if level0.is_cuda_graph_enabled else None)
        device, host, entries = req_pool_indices.device, dict(dtype=torch.int32), len(p.kv_lens)

        def on_gpu(values: Any, dtype: Any = torch.int32) -> Any:
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        kv = torch.zeros(entries + bs + 1, **host)  # level 0's entries, then level 1's rows
        kv[1:] = torch.cumsum(torch.tensor(p.kv_lens + p.own_lens, **host), 0)
        kv0, kv1 = kv[:entries + 1], kv[entries:] - kv[entries]
        if indices is None:
            indices = tuple(torch.empty(int(n[-1]), dtype=torch.int32, device=device) for n in (kv0, kv1))
        stride = self._sp_req_to_token.shape[1]
        leads = req_pool_indices[on_gpu(p.leads, torch.int64)]
        order = torch.tensor(p.order, dtype=torch.int64)
        if order_buf is None:
            order_buf = order.to(device, non_blocking=True)
        else:
            order_buf.copy_(order, non_blocking=True)
        fb.create_flashinfer_kv_indices_triton[(entries,)](
            self._sp_req_to_token, leads, on_gpu(p.kv_lens), kv0.to(device, non_blocking=True), None, indices[0],
            stride)
        fb.create_flashinfer_kv_indices_triton[(bs,)](  # level 1's rows in `order`, like level 0's
            self._sp_req_to_token, req_pool_indices[:bs].index_select(0, order_buf), on_gpu(p.own_lens),
            kv1.to(device, non_blocking=True), on_gpu(p.start), indices[1], stride)
        heads = (updater.num_qo_heads, updater.num_kv_heads, updater.head_dim, 1)
        types = dict(q_data_type=updater.q_data_type, kv_data_type=updater.data_type, non_blocking=True)
        level0.plan(torch.tensor(p.qo_indptr, **host), kv0, indices[0], torch.ones(entries, **host), *heads,
                    causal=False, **types)
        level1.plan(kv1, indices[1], torch.ones(bs, **host), *heads, **types)
        return order_buf

    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        self._sp, self._sp_replay_bs = None, None
        original["init_forward_metadata"](self, forward_batch)
        seq_lens = forward_batch.seq_lens_cpu
        if not self._sp_on or not forward_batch.forward_mode.is_decode() or seq_lens is None:
            return
        found = _kept_groups(seq_lens)
        two_level = grouping.pays(found, self._sp_kv_bytes)
        _STATS.count(found, len(seq_lens), two_level)
        if not two_level:
            return  # SGLang's own decode, already planned
        if self._sp_eager is None:
            self._sp_eager = (flashinfer.BatchPrefillWithPagedKVCacheWrapper(self._sp_workspace, "NHD", backend="fa2"),
                              flashinfer.BatchDecodeWithPagedKVCacheWrapper(self._sp_workspace, "NHD", backend="fa2",
                                                                            use_tensor_cores=True))
        levels = (*self._sp_eager, None)
        order = _plan(self, levels, len(seq_lens), forward_batch.req_pool_indices, seq_lens, found, None)
        self._sp = (self._sp_eager[0], self._sp_eager[1], order, None)

    def _graph_levels(self: Any, bs: int, device: Any) -> tuple:
        """Both levels' wrappers for the decode graph of batch size bs, on buffers of their own."""
        ints = dict(dtype=torch.int32, device=device)
        level0 = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self._sp_workspace, "NHD", use_cuda_graph=True, qo_indptr_buf=torch.zeros(bs + 1, **ints),
            paged_kv_indptr_buf=torch.zeros(bs + 1, **ints), paged_kv_indices_buf=self._sp_indices[0],
            paged_kv_last_page_len_buf=torch.ones(bs, **ints), backend="fa2")
        level1 = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self._sp_workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True,
            paged_kv_indptr_buffer=torch.zeros(bs + 1, **ints), paged_kv_indices_buffer=self._sp_indices[1],
            paged_kv_last_page_len_buffer=torch.ones(bs, **ints), backend="fa2")
        return (level0, level1, torch.arange(bs, dtype=torch.int64, device=device),
                torch.zeros((), dtype=torch.float32, device=device))

    def init_forward_metadata_out_graph(self: Any, forward_batch: Any, in_capture: bool = False) -> None:
        self._sp, self._sp_replay_bs = None, None
        bs = forward_batch.batch_size
        if in_capture and capturing["two_levels"]:
            # SGLang's own graph of this size was captured first: keep its wrappers (a second capture would make new
            # ones, and SGLang would plan those while its graph reads the first ones' plan)
            self.forward_metadata = fb.DecodeMetadata(self.decode_cuda_graph_metadata[bs])
        else:
            original["init_forward_metadata_out_graph"](self, forward_batch, in_capture)
        if not self._sp_on or not bs or not forward_batch.forward_mode.is_decode():
            return
        if in_capture:
            if not capturing["two_levels"]:
                return  # SGLang's own graph
            self._sp_graphs[bs] = _graph_levels(self, bs, forward_batch.req_pool_indices.device)
            seq_lens, found = [1] * bs, []  # every row a padding row
        else:
            seq_lens = forward_batch.seq_lens_cpu
            found = [] if seq_lens is None else _kept_groups(seq_lens)
            two_level = bs in self._sp_graphs and grouping.pays(found, self._sp_kv_bytes)
            _STATS.count(found, len(_KEPT["lens"]) if _KEPT["lens"] else bs, two_level)
            if not two_level:
                return  # SGLang's own graph replays, planned above
            largest = self._sp_graphs[bs][3]
            if check and _STATS.steps % CHECK_EVERY == 0:
                log.warning("shared-prefix decode check: largest |two levels - SGLang's decode| on layer 0 so far: "
                            "%.3g", largest.item())
            self._sp_replay_bs = bs
        level0, level1, order, largest = self._sp_graphs[bs]
        _plan(self, (level0, level1, order), bs, forward_batch.req_pool_indices, seq_lens, found,
              tuple(self._sp_indices))
        self._sp = (level0, level1, order, largest)

    def forward_decode(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                       save_kv_cache: bool = True) -> Any:
        if self._sp is None or layer.is_cross_attention or layer.logit_cap:
            return original["forward_decode"](self, q, k, v, layer, forward_batch, save_kv_cache)
        level0, level1, order, largest = self._sp
        if k is not None and save_kv_cache:
            where = fb.KVWriteLoc(forward_batch.out_cache_loc, self.forward_metadata.swa_out_cache_loc)
            self.token_to_kv_pool.set_kv_buffer(layer, where, k, v, *self._kv_write_scales(layer))
        kv = self.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        q = q.contiguous().view(-1, layer.tp_q_head_num, layer.head_dim)
        ordered = q.index_select(0, order)  # both levels read the rows in group order
        own, own_lse = level1.forward_return_lse(ordered, kv, sm_scale=layer.scaling)
        shared, shared_lse = level0.forward_return_lse(ordered, kv, causal=False, sm_scale=layer.scaling)
        flashinfer.merge_state_in_place(own, own_lse, shared, shared_lse)
        out = torch.empty_like(own).index_copy_(0, order, own)
        if check and largest is not None and layer.layer_id == 0:
            reference = self.forward_metadata.decode_wrappers[0].forward(q, kv, sm_scale=layer.scaling)
            torch.maximum(largest, (reference.float() - out.float()).abs().max(), out=largest)
        return out.view(-1, layer.tp_q_head_num * layer.head_dim)

    def capture_one_shape(self: Any, size: int, forward: Any, stream_idx: Any = None, variant_label: Any = None) -> Any:
        out = runner["capture_one_shape"](self, size, forward, stream_idx, variant_label)
        if (variant_label is None and size >= MIN_GRAPH_BATCH and getattr(self.attn_backend, "_sp_on", False)
                and self.capture_forward_mode.is_decode() and not self.enable_pdmux
                and self.captured_req_width == 1 and not self.ragged_verify_mode):
            capturing["two_levels"] = True
            try:
                runner["capture_one_shape"](self, size, forward, stream_idx, TWO_LEVELS)
            finally:
                capturing["two_levels"] = False
        return out

    def load_batch(self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> None:
        runner["load_batch"](self, forward_batch, *args, **kwargs)
        key = self._replay_graph_key
        if (key.variant_label is None and key.size == getattr(self.attn_backend, "_sp_replay_bs", None)
                and not self.enable_pdmux):
            self._replay_graph_key = dataclasses.replace(key, variant_label=TWO_LEVELS)

    ForwardBatch.init_new = classmethod(init_new_keeping_groups)
    DecodeCudaGraphRunner.capture_one_shape = capture_one_shape
    DecodeCudaGraphRunner.load_batch = load_batch
    for name, method in (("__init__", __init__), ("init_cuda_graph_state", init_cuda_graph_state),
                         ("init_forward_metadata", init_forward_metadata),
                         ("init_forward_metadata_out_graph", init_forward_metadata_out_graph),
                         ("forward_decode", forward_decode)):
        setattr(backend, name, method)
