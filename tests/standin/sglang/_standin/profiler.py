"""SGLang 0.5.17's /start_profile with num_steps, as the stand-in does it.

The real one (entrypoints/http_server.py, managers/scheduler_components/profiler_manager.py,
utils/profile_utils.py): POST /start_profile {"output_dir", "num_steps", "activities", "profile_prefix", ...} answers
200 "Start profiling.\\n"; the scheduler logs "Profiling starts. Traces will be saved to: <dir> (with profile id:
<id>)", runs torch.profiler over the next num_steps forward passes, then writes
<output_dir>/<prefix>-<id>-TP-0.trace.json.gz, a chrome trace whose CUDA kernels are {"ph": "X", "cat": "kernel"}
events (ts and dur in µs) among runtime and flow events.

The kernels here are Qwen3-4B's decode step as a Hopper build would name them (cuBLASLt nvjet GEMMs, FlashInfer
attention, norm, rope and activation kernels): their names follow those libraries, their durations are illustrative
(the GEMMs at ~70% of 4.8 TB/s on 8 GB of weights), not a captured trace. One forward pass is one token of any
request, as the stand-in has no batch.
"""
from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

LAYERS = 36
# (name, µs, calls per layer); None calls: once per forward pass
STEP_KERNELS: tuple[tuple[str, float, int | None], ...] = (
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*)", 2.5, 2),
    ("void flashinfer::norm::QKRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", 2.0, 1),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", 9.0, 1),  # qkv_proj
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>", 2.5, 1),
    ("store_kvcache_kernel", 1.8, 1),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u>",
     4.0, 1),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", 6.0, 1),  # o_proj
    ("nvjet_tst_128x8_64x16_2x1_v_bz_TNN", 24.0, 1),  # gate_up_proj
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*)", 2.2, 1),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", 12.5, 1),  # down_proj
    ("nvjet_tst_256x8_64x16_1x1_v_bz_TNN", 230.0, None),  # lm_head over the 151,936-token vocabulary
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>", 6.0,
     None),
)
GAP_US = 0.8  # between kernels replayed from a CUDA graph


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

    def step(self) -> None:
        with self.lock:
            if self.left <= 0 or self.path is None:
                return
            ts = self.clock_us = max(self.clock_us, time.time() * 1e6)
            for name, us, per_layer in STEP_KERNELS:
                for _ in range(LAYERS * per_layer if per_layer else 1):
                    self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                                        "dur": us, "args": {"stream": 7, "device": 0}})
                    ts += us + GAP_US
            self.left -= 1
            if self.left:
                return
            path, events, self.path = self.path, self.events, None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))
        self.log(f"Profiling done. Traces are saved to: {path.parent}")
