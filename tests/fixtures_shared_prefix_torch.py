"""Stand-ins, in torch on the CPU, of what the shared-prefix patches (llmhost.serve.shared_prefix.patches) patch
and call: SGLang 0.5.17's FlashInfer backend, decode CUDA graph runner and ForwardBatch, and FlashInfer's two paged
wrappers, its merge and SGLang's page-index kernel, each computing in plain torch what the real one does (their
semantics read from their sources); and a batch of agents on shared prompts with its radix nodes and page table.
tests/unit/test_shared_prefix_patches.py imports this module in the test that needs it, so only the worker that
runs it pays torch's import."""
from __future__ import annotations

import dataclasses
import sys
import types

import torch  # its CPU build, in the folder tests/run_cpu.sh installs it into (the test puts it on the path)

torch.set_num_threads(1)  # tensors of a few KB: threads only contend with the other test workers for the cores

from llmhost.serve.shared_prefix import patches

HQ, HK, D = 8, 2, 16  # query heads, KV heads (4 query heads each), head dim
SLOTS, MAX_CONTEXT = 4096, 512
SCALE = D ** -0.5


def attend(q, k_buf, v_buf, idx):
    """Softmax attention of query rows q [n, HQ, D] over the slots idx; (out, natural log-sum-exp [n, HQ])."""
    k = k_buf[idx].float().repeat_interleave(HQ // HK, dim=1)
    v = v_buf[idx].float().repeat_interleave(HQ // HK, dim=1)
    s = torch.einsum("nhd,lhd->nhl", q.float(), k) * SCALE
    return torch.einsum("nhl,lhd->nhd", torch.softmax(s, -1), v), torch.logsumexp(s, -1)


class KvIndices:
    """SGLang's create_flashinfer_kv_indices_triton: row i's slots req_to_token[req_pool_indices[i]][start:start+len]
    written at kv_indptr[i]."""

    def __getitem__(self, grid):
        def run(req_to_token, req_pool_indices, lens, indptr, start, out, stride):
            assert stride == req_to_token.shape[1]
            for i in range(grid[0]):
                first, n, at = (0 if start is None else int(start[i])), int(lens[i]), int(indptr[i])
                out[at:at + n] = req_to_token[int(req_pool_indices[i]), first:first + n]
        return run


class Wrapper:
    """FlashInfer's paged wrappers at page size 1: plan() takes index pointers (into the graph's own buffers when
    captured) and page indices; forward reads them. Prefill: query rows qo_indptr[e]..qo_indptr[e+1] of entry e attend
    non-causally over its pages; decode: row i over its own."""

    def __init__(self, workspace, layout, use_cuda_graph=False, use_tensor_cores=False, backend="auto", **buffers):
        # FlashInfer's default backend, auto, is fa3 on Hopper: SGLang's kernels (and the patches') are fa2's
        assert layout == "NHD" and backend == "fa2" and workspace.dtype == torch.uint8
        assert all(b.dtype == torch.int32 for b in buffers.values()), {k: b.dtype for k, b in buffers.items()}
        self.is_cuda_graph_enabled, self.buffers, self.plan_ = use_cuda_graph, buffers, None
        self.use_tensor_cores = use_tensor_cores

    @staticmethod
    def _check_types(types_, *indices):
        """Index arrays are int32, and the data types are given (FlashInfer's default is float16) as the model's."""
        assert all(x.dtype == torch.int32 for x in indices), [x.dtype for x in indices]
        assert types_.get("q_data_type") == types_.get("kv_data_type") == torch.float32, types_

    def _keep(self, name: str, values, last_page_len=None):
        """An index pointer as the kernel reads it. In a graph, FlashInfer fixes the batch at construction: the
        pointer and last-page buffers must have exactly the planned batch's size."""
        if not self.is_cuda_graph_enabled:
            return values.clone()
        buf = self.buffers[name]
        assert values.numel() == buf.numel(), (name, values.numel(), buf.numel())
        last = next(v for k, v in self.buffers.items() if k.startswith("paged_kv_last_page_len"))
        assert last_page_len is None or last_page_len.numel() == last.numel() == buf.numel() - 1
        buf.copy_(values)
        return buf

    def _pages(self, name: str, indices):
        if self.is_cuda_graph_enabled:  # the kernel the graph replays reads the buffer it was captured with
            assert indices.data_ptr() == self.buffers[name].data_ptr()
        return indices


class Prefill(Wrapper):
    def plan(self, qo_indptr, kv_indptr, kv_indices, last_page_len, hq, hk, d, page_size, causal=True, **types_):
        assert (hq, hk, d, page_size, causal) == (HQ, HK, D, 1, False) and bool((last_page_len == 1).all())
        self._check_types(types_, qo_indptr, kv_indptr, kv_indices, last_page_len)
        self.plan_ = (self._keep("qo_indptr_buf", qo_indptr, last_page_len),
                      self._keep("paged_kv_indptr_buf", kv_indptr),
                      self._pages("paged_kv_indices_buf", kv_indices))

    def forward_return_lse(self, q, kv, causal=False, sm_scale=None):
        assert sm_scale == SCALE and not causal
        qo, kv_indptr, pages = self.plan_
        out, lse = torch.zeros(q.shape), torch.full(q.shape[:2], -torch.inf)
        for e in range(qo.numel() - 1):
            a, b = int(qo[e]), int(qo[e + 1])
            if a < b:
                out[a:b], lse[a:b] = attend(q[a:b], *kv, pages[int(kv_indptr[e]):int(kv_indptr[e + 1])].long())
        return out.to(q.dtype), lse


class Decode(Wrapper):
    def plan(self, indptr, indices, last_page_len, hq, hk, d, page_size, **types_):
        assert (hq, hk, d, page_size) == (HQ, HK, D, 1) and bool((last_page_len == 1).all()) and self.use_tensor_cores
        self._check_types(types_, indptr, indices, last_page_len)
        self.plan_ = (self._keep("paged_kv_indptr_buffer", indptr, last_page_len),
                      self._pages("paged_kv_indices_buffer", indices))

    def forward_return_lse(self, q, kv, sm_scale=None):
        assert sm_scale == SCALE
        indptr, pages = self.plan_
        rows = [attend(q[i:i + 1], *kv, pages[int(indptr[i]):int(indptr[i + 1])].long()) for i in range(q.shape[0])]
        return torch.cat([o for o, _ in rows]).to(q.dtype), torch.cat([s for _, s in rows])

    def forward(self, q, kv, sm_scale=None):
        return self.forward_return_lse(q, kv, sm_scale=sm_scale)[0]


def merge_state_in_place(v, s, v_other, s_other):
    """FlashInfer's merge of two partial attentions by their log-sum-exps (here natural ones, as attend gives)."""
    top = torch.maximum(s, s_other)
    w, w_other = torch.exp(s - top), torch.exp(s_other - top)
    v.copy_((v.float() * w[..., None] + v_other.float() * w_other[..., None]) / (w + w_other)[..., None])
    s.copy_(top + torch.log(w + w_other))


class Pool:
    def __init__(self, generator):
        self.k = torch.randn(SLOTS, HK, D, generator=generator)
        self.v = torch.randn(SLOTS, HK, D, generator=generator)

    def set_kv_buffer(self, layer, loc, k, v, *scales):
        assert layer.layer_id == 0 and scales == () and loc.swa is None
        self.k[loc.loc], self.v[loc.loc] = k.view(-1, HK, D), v.view(-1, HK, D)

    def get_kv_buffer(self, layer_id):
        assert isinstance(layer_id, int)
        return self.k, self.v


class Backend:
    """SGLang 0.5.17's FlashInferAttnBackend as the patches use it: its own decode plans one wrapper over each row's
    whole context (a graph's wrapper per batch size, kept in decode_cuda_graph_metadata)."""

    def __init__(self, model_runner, *args, **kwargs):
        self.num_wrappers, self.decode_use_tensor_cores, self.use_sliding_window_kv_pool = 1, True, False
        self.indices_updater_decode = types.SimpleNamespace(num_qo_heads=HQ, num_kv_heads=HK, head_dim=D,
                                                            data_type=torch.float32, q_data_type=torch.float32)
        self.max_context_len, self.decode_cuda_graph_metadata = MAX_CONTEXT, {}
        self.workspace = torch.empty(1024, dtype=torch.uint8)
        self.token_to_kv_pool, self.req_to_token = model_runner.pool, model_runner.req_to_token_pool.req_to_token
        for name, value in getattr(model_runner, "backend_attrs", {}).items():  # a test's other backend
            setattr(self.indices_updater_decode if name == "data_type" else self, name, value)

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        self.graph_pages = torch.zeros(max_num_tokens * self.max_context_len, dtype=torch.int32)

    def _plan_own(self, wrapper, forward_batch, pages):
        bs = forward_batch.batch_size
        lens = torch.tensor([int(x) for x in forward_batch.seq_lens_cpu[:bs]], dtype=torch.int32)
        indptr = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lens, 0).to(torch.int32)])
        pages = torch.empty(int(indptr[-1]), dtype=torch.int32) if pages is None else pages
        KvIndices()[(bs,)](self.req_to_token, forward_batch.req_pool_indices, lens, indptr, None, pages,
                           self.req_to_token.shape[1])
        wrapper.plan(indptr, pages, torch.ones(bs, dtype=torch.int32), HQ, HK, D, 1, q_data_type=torch.float32,
                     kv_data_type=torch.float32)
        self.forward_metadata = DecodeMetadata([wrapper])

    def init_forward_metadata(self, forward_batch):
        self._plan_own(Decode(self.workspace, "NHD", use_tensor_cores=True, backend="fa2"), forward_batch, None)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        bs = forward_batch.batch_size
        if in_capture:
            ints = dict(dtype=torch.int32)
            self.decode_cuda_graph_metadata[bs] = [Decode(
                self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True, backend="fa2",
                paged_kv_indptr_buffer=torch.zeros(bs + 1, **ints), paged_kv_indices_buffer=self.graph_pages,
                paged_kv_last_page_len_buffer=torch.ones(bs, **ints))]
        self._plan_own(self.decode_cuda_graph_metadata[bs][0], forward_batch, self.graph_pages)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if k is not None and save_kv_cache:  # the step's token first, as SGLang's does
            where = types.SimpleNamespace(loc=forward_batch.out_cache_loc, swa=None)
            self.token_to_kv_pool.set_kv_buffer(layer, where, k, v, *self._kv_write_scales(layer))
        q = q.contiguous().view(-1, HQ, D)
        return self.forward_metadata.decode_wrappers[0].forward(q, self.token_to_kv_pool.get_kv_buffer(0),
                                                                sm_scale=layer.scaling).view(-1, HQ * D)

    def _kv_write_scales(self, layer):
        assert layer.layer_id == 0
        return ()


@dataclasses.dataclass(frozen=True)
class DecodeMetadata:
    decode_wrappers: list
    swa_out_cache_loc: object = None


@dataclasses.dataclass(frozen=True)
class ShapeKey:
    size: int
    variant_label: str | None = None


class GraphRunner:
    """SGLang's DecodeCudaGraphRunner: capturing a shape plans the backend for a batch of padding rows; loading a
    batch picks the key of its padded size."""

    def __init__(self, backend):
        self.attn_backend, self.captured, self.two_level_captured = backend, [], []
        self.capture_forward_mode = types.SimpleNamespace(is_decode=lambda: True)
        self.enable_pdmux, self.captured_req_width, self.ragged_verify_mode = False, 1, False

    def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
        self.attn_backend.init_forward_metadata_out_graph(forward(size), in_capture=True)
        self.captured.append(ShapeKey(size, variant_label))
        # what the captured forward ran: the two-level decode when the backend had planned it for the capture
        self.two_level_captured.append(getattr(self.attn_backend, "_sp", None) is not None)

    def load_batch(self, forward_batch, *args, **kwargs):
        self._replay_graph_key = ShapeKey(forward_batch.batch_size)


class ForwardBatch:
    @classmethod
    def init_new(cls, batch, model_runner):
        assert cls is ForwardBatch and model_runner.device is not None
        return batch.forward_batch


def install(monkeypatch, check: bool = True) -> None:
    """The stand-ins in sys.modules where patches.apply() imports them, and apply() run on them (the check on or
    off)."""
    fb = types.ModuleType("sglang.srt.layers.attention.flashinfer_backend")
    fb.FlashInferAttnBackend, fb.DecodeMetadata, fb.create_flashinfer_kv_indices_triton = Backend, DecodeMetadata, \
        KvIndices()
    fb.KVWriteLoc = lambda loc, swa: types.SimpleNamespace(loc=loc, swa=swa)
    flashinfer = types.ModuleType("flashinfer")
    flashinfer.__version__ = "0.6.15.post1"
    flashinfer.BatchPrefillWithPagedKVCacheWrapper, flashinfer.BatchDecodeWithPagedKVCacheWrapper = Prefill, Decode
    flashinfer.merge_state_in_place = merge_state_in_place
    modules = {"flashinfer": flashinfer, "sglang.srt.layers.attention.flashinfer_backend": fb,
               "sglang.srt.model_executor.forward_batch_info": types.SimpleNamespace(ForwardBatch=ForwardBatch),
               "sglang.srt.model_executor.runner.decode_cuda_graph_runner":
                   types.SimpleNamespace(DecodeCudaGraphRunner=GraphRunner)}
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
                 "sglang.srt.model_executor", "sglang.srt.model_executor.runner"):
        modules[name] = types.ModuleType(name)
    modules["sglang.srt.layers.attention"].flashinfer_backend = fb
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    for cls, names in ((Backend, ("__init__", "init_cuda_graph_state", "init_forward_metadata",
                                  "init_forward_metadata_out_graph", "forward_decode")),
                       (GraphRunner, ("capture_one_shape", "load_batch")), (ForwardBatch, ("init_new",))):
        for name in names:
            monkeypatch.setattr(cls, name, cls.__dict__[name])  # restored after the test
    monkeypatch.setenv("LLMHOST_SHARED_PREFIX_CHECK", "1" if check else "")
    monkeypatch.setattr(patches, "MIN_GRAPH_BATCH", 8)
    patches.apply("0.5.17")



class Node:
    def __init__(self, parent, tokens: int) -> None:
        self.parent, self.value = parent, list(range(tokens))


def agents(shared: bool):
    """Six requests, in an order that interleaves the groups (so group order is not the batch's): three on prompt A
    (300 tokens), two on prompt B (200), one on a prompt of its own; each with its own question and answer so far.
    With shared=False every request has a prompt of its own (nothing to group)."""
    g = torch.Generator().manual_seed(0)
    root = Node(None, 0)
    prompts = {"A": (Node(root, 300), torch.arange(0, 300)), "B": (Node(root, 200), torch.arange(300, 500))}
    req_to_token = torch.zeros(8, MAX_CONTEXT, dtype=torch.int32)
    free = iter(torch.randperm(SLOTS - 1000, generator=g) + 1000)
    last_nodes, lens = [], []
    for row, (name, own) in enumerate([("A", 40), ("B", 90), ("A", 71), (None, 120), ("B", 33), ("A", 55)]):
        if name is None or not shared:
            size = 300 if name is None else len(prompts[name][1])
            prompt = (Node(root, size), torch.tensor([int(next(free)) for _ in range(size)]))
        else:
            prompt = prompts[name]
        node, slots = prompt
        own_slots = torch.tensor([int(next(free)) for _ in range(own)])
        req_to_token[row + 1, :len(slots) + own] = torch.cat([slots, own_slots]).to(torch.int32)
        last_nodes.append(Node(node, own - 1))  # the cached part ends before the token being decoded
        lens.append(len(slots) + own)
    return req_to_token, last_nodes, lens, g


def batch(req_to_token, last_nodes, lens, pad_to: int | None = None):
    """The scheduler's batch (reqs, lengths) and its ForwardBatch, padded like a graph replay's (length 1, pool 0)."""
    bs = pad_to or len(lens)
    padded = lens + [1] * (bs - len(lens))
    forward_batch = types.SimpleNamespace(
        batch_size=bs, seq_lens_cpu=torch.tensor(padded), forward_mode=types.SimpleNamespace(is_decode=lambda: True),
        req_pool_indices=torch.tensor(list(range(1, len(lens) + 1)) + [0] * (bs - len(lens))),
        out_cache_loc=req_to_token[torch.arange(1, bs + 1).clamp(max=len(lens)), torch.tensor(padded) - 1])
    batch = types.SimpleNamespace(forward_mode=forward_batch.forward_mode, seq_lens_cpu=torch.tensor(lens),
                                  spec_info=None, reqs=[types.SimpleNamespace(last_node=n) for n in last_nodes],
                                  forward_batch=forward_batch)
    return batch, forward_batch


def setup(shared: bool):
    req_to_token, last_nodes, lens, g = agents(shared)
    runner = types.SimpleNamespace(device=torch.device("cpu"), page_size=1, is_draft_worker=False,
                                   spec_algorithm=types.SimpleNamespace(is_none=lambda: True),
                                   model_config=types.SimpleNamespace(num_hidden_layers=36),
                                   req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token), pool=Pool(g))
    return Backend(runner), runner, req_to_token, last_nodes, lens, g


def reference(backend, req_to_token, lens, q):
    k, v = backend.token_to_kv_pool.get_kv_buffer(0)
    return torch.cat([attend(q[i:i + 1].view(1, HQ, D), k, v, req_to_token[i + 1, :n].long())[0]
                      for i, n in enumerate(lens)]).view(len(lens), HQ * D)


LAYER = types.SimpleNamespace(layer_id=0, scaling=SCALE, tp_q_head_num=HQ, head_dim=D, is_cross_attention=False,
                              logit_cap=0)
