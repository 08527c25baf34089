"""SGLang 0.5.17's /start_profile with num_steps, as the stand-in does it.

The real one (entrypoints/http_server.py, managers/scheduler_components/profiler_manager.py,
utils/profile_utils.py): POST /start_profile {"output_dir", "num_steps", "activities", "profile_prefix", ...} answers
200 "Start profiling.\\n"; the scheduler logs "Profiling starts. Traces will be saved to: <dir> (with profile id:
<id>)", runs torch.profiler over the next num_steps forward passes, then writes
<output_dir>/<prefix>-<id>-TP-0.trace.json.gz, a chrome trace whose CUDA kernels are {"ph": "X", "cat": "kernel"}
events (ts and dur in µs) among runtime and flow events.

The kernels here are Qwen3-4B's decode step at batch 1 as an H200 trace of SGLang 0.5.17 recorded them (CUDA 13,
FlashInfer 0.6.15, dummy weights, one 4.5k-token request): the names as captured with their argument lists cut, each
kernel's mean duration over 99 passes, in the order one pass runs them. That pass ran 523 kernels, 3.42 ms of them in
a 3.61 ms span. One forward pass here is one token of any request, as the stand-in has no batch. A request's first
pass is its extend (prefill): there each layer's attention is what an H200 trace of SGLang 0.5.17 under agent load
(c=64, ~135 new tokens over a 4.3k-token cached prompt) ran for it, on the ragged path: FlashInfer's SM90 ragged
kernel over the new tokens, a fill, the paged kernel over the cached prefix (128-row tiles, no mask), their merge
(durations scaled to one request).
"""
from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

LAYERS = 36
Kernel = tuple[str, float]  # (name, µs)
PASS_HEAD: tuple[Kernel, ...] = (  # sampling of the last pass, then the batch's metadata, embedding and first norm
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
     "long, 4, 4> >", 8.1),
    ("void at::native::vectorized_elementwise_kernel<2, at::native::CUDAFunctorOnSelf_add<long>, "
     "std::array<char*, 2ul> >", 1.2),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl"
     "<at::native::OpaqueType<8> > > >", 1.8),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl"
     "<at::native::OpaqueType<8> > > >", 1.8),
    ("void (anonymous namespace)::clamp_position_kernel<long>", 1.2),
    ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<at_cuda_detail::cub::detail::scan::policy_hub<long, "
     "long, long, unsigned int, std::plus<long> > >", 1.4),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>", 2.8),
    ("create_flashinfer_kv_indices_triton", 1.7),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, unsigned int, 2, 2, -2>", 1.9),
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", 2.4),
)
PER_LAYER: tuple[Kernel, ...] = (
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 11.2),  # qkv_proj
    ("void (anonymous namespace)::fused_qknorm_warp<128l, true, __nv_bfloat16>", 1.4),
    ("void (anonymous namespace)::fused_rope_kernel<true, 128l, true, __nv_bfloat16, __nv_bfloat16, long, 16u>", 1.6),
    ("void (anonymous namespace)::store_kvcache<2048l, 2048l, 4, true, long>", 1.5),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u, 1u, "
     "2u, 8u, 8u, 1u, 4u> >", 9.1),  # decode through the tensor-core (prefill) kernel: 4 query heads per KV head
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>",
     1.8),  # the split-KV chunks' partial attention merged
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", 7.9),  # o_proj
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>", 1.8),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>", 2.7),
    ("nvjet_sm90_tst_192x8_64x8_4x1_v_bz_TNT", 29.2),  # gate_up_proj
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)0, true, "
     "false, false, false>", 1.3),
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", 15.1),  # down_proj
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>", 1.8),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>", 2.7),  # the next layer's input (or final) norm
)
PASS_TAIL: tuple[Kernel, ...] = (("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT", 183.7),)  # lm_head, 151,936 words
GAP_US = 0.37  # between kernels replayed from a CUDA graph: (3.61 - 3.42) ms over 523 kernels


DECODE_ATTENTION = PER_LAYER[4][0]
EXTEND_ATTENTION: tuple[Kernel, ...] = (
    ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<RaggedParams::AdditionalParams, "
     "flashinfer::AttentionKernelTraits<true, 128, 128, 128, 128, 2, cutlass::bfloat16_t, cutlass::bfloat16_t, "
     "cutlass::bfloat16_t, int, flashinfer::StandardAttention>, true> >", 10.0),  # the new tokens (causal)
    ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, "
     "std::array<char*, 1ul> >", 1.5),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 128u, 2u, "
     "4u, 8u, 8u, 4u, 1u> >", 120.0),  # the cached prefix
    ("void flashinfer::MergeStateKernel<8u, __nv_bfloat16, __nv_bfloat16>", 3.0),
)


def one_pass(extend: bool = False) -> list[Kernel]:
    layer: list[Kernel] = []
    for name, us in PER_LAYER:
        if extend and name == DECODE_ATTENTION:
            layer += EXTEND_ATTENTION
        elif not (extend and "MergeStates" in name):  # the decode's split-KV merge
            layer.append((name, us))
    return [*PASS_HEAD, *layer * LAYERS, *PASS_TAIL]


class Profiler:
    """Armed by /start_profile; the engine calls step() once per forward pass."""

    def __init__(self, log):
        self.log = log
        self.lock = threading.Lock()
        self.left = 0
        self.events: list[dict] = []
        self.path: Path | None = None
        self.clock_us = 0.0

    def start(self, body: dict) -> None:
        profile_id = str(time.time())
        out_dir = Path(body.get("output_dir") or "/tmp")
        prefix = body.get("profile_prefix")
        with self.lock:
            self.left = int(body.get("num_steps") or 0) or 10**9  # no num_steps: until /stop_profile
            self.events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
                            "ts": 0.0, "dur": 4.0}]
            self.path = out_dir / f"{prefix + '-' if prefix else ''}{profile_id}-TP-0.trace.json.gz"
            self.clock_us = time.time() * 1e6
        self.log(f"Profiling starts. Traces will be saved to: {out_dir} (with profile id: {profile_id})")

    def step(self, extend: bool = False) -> None:
        with self.lock:
            if self.left <= 0 or self.path is None:
                return
            ts = max(self.clock_us, time.time() * 1e6)
            for name, us in one_pass(extend):
                self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                                    "dur": us, "args": {"stream": 7, "device": 0}})
                ts += us + GAP_US
            self.clock_us = ts  # a pass starts after the last one's kernels: one stream never overlaps itself
            self.left -= 1
            if self.left:
                return
            path, events, self.path = self.path, self.events, None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))
        self.log(f"Profiling done. Traces are saved to: {path.parent}")
