"""The attention variants whose JIT cost `fi_bench.py jit` measures, and the worker that measures one of them.

FlashInfer compiles one CUDA module per combination of template parameters (dtypes, head_dim, position encoding,
sliding window, logits soft-cap, tensor-core or CUDA-core path); the module name (its "uri") spells those
parameters out, e.g. batch_decode_with_kv_cache_dtype_q_bf16_..._use_logits_cap_True. Each variant below differs
from `decode_base` in one such parameter, so each one is a separate compile a server pays on its first request of
that kind. The registry is pure data (CPU-testable); the builders run on the GPU inside the worker process:

    python -m llmhost.fi.jit_variants --probe                     # JSON: JIT cache paths, prebuilt kernels, archs
    python -m llmhost.fi.jit_variants --variant decode_base \\
        --shape '{"num_qo_heads": 32, ...}' --repeat 30          # JSON: setup / first call / steady times

The worker prints one JSON line; `llmhost.fi.jit` runs it in fresh subprocesses (cold, then cached) so FlashInfer's
in-process module cache (functools.cache) never hides a compile or a load.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    builder: str  # key of BUILDERS
    what: str  # one sentence for the report: what differs and who uses it
    options: dict[str, Any] = field(default_factory=dict)
    in_default: bool = True
    needs: str | None = None  # a variant whose module this one reuses: measured only after it has finished


# decode_tensor_cores needs prefill_paged: tensor-core decode is FlashInfer's prefill kernel with one query row per
# request, so it needs no module of its own once the prefill module exists; measured after it (also when variants run
# in parallel), its cold first call shows exactly that (nothing new built).
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("decode_base", "batch_decode", "Paged batch decode on CUDA cores, bf16, the reference module."),
    Variant("decode_softcap", "batch_decode", "Adds logits soft-capping (Gemma-2, Grok): tanh on every score.",
            {"logits_soft_cap": 30.0}),
    Variant("decode_rope", "batch_decode", "RoPE applied inside the kernel (pos_encoding_mode=ROPE_LLAMA).",
            {"pos_encoding_mode": "ROPE_LLAMA"}),
    Variant("decode_swa", "batch_decode", "Sliding-window attention (window_left=1023, Mistral/Gemma style).",
            {"window_left": 1023}),
    Variant("decode_fp8_kv", "batch_decode", "FP8 (e5m2) KV cache, as SGLang --kv-cache-dtype fp8_e5m2.",
            {"kv_dtype": "float8_e5m2"}),
    Variant("decode_hd64", "batch_decode", "head_dim 64 instead of the model's: head size is a template "
            "parameter.", {"head_dim": 64}),
    Variant("prefill_paged", "batch_prefill_paged", "Paged batch prefill (fa2, causal): SGLang's prefill over a "
            "cached prefix."),
    Variant("decode_tensor_cores", "batch_decode", "Decode on tensor cores (use_tensor_cores=True): SGLang's "
            "choice for GQA group >= 4 (Qwen3-4B); it is the prefill kernel, so it reuses prefill's module.",
            {"use_tensor_cores": True}, needs="prefill_paged"),
    Variant("single_decode", "single_decode", "single_decode_with_kv_cache: one request, no page table."),
    Variant("single_prefill", "single_prefill", "single_prefill_with_kv_cache (fa2, causal): one request."),
    Variant("prefill_ragged_auto", "batch_prefill_ragged", "Ragged prefill with backend=auto, which picks the "
            "FA3 (sm90) kernels on Hopper, as SGLang's ragged prefill does; a much longer compile.",
            in_default=False),
)}

DEFAULT_VARIANTS: tuple[str, ...] = tuple(name for name, v in VARIANTS.items() if v.in_default)

# Workload of every variant: large enough to be a real kernel launch, small enough to set up in well under 1 s.
BATCH = 16
KV_LEN = 1024
QO_LEN = 512
PAGE_SIZE = 16


def select(names: str | None) -> list[Variant]:
    """Variants for a comma-separated list ('all' = every registered one; None = the default set), in order."""
    if names is None:
        return [VARIANTS[n] for n in DEFAULT_VARIANTS]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if wanted == ["all"]:
        return list(VARIANTS.values())
    unknown = [n for n in wanted if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)} (see --list)")
    if not wanted:
        raise ValueError("no variant named")
    return [VARIANTS[n] for n in wanted]


# --------------------------------------------------------------------------------------------- GPU side (worker)
@dataclass(slots=True)
class Case:
    """One variant set up on the GPU: `first` plans + runs (this is where the module is built/loaded), `steady` runs."""
    first: Callable[[], Any]
    steady: Callable[[], Any]


def _workspace(torch: Any) -> Any:
    return torch.zeros(128 * 2**20, dtype=torch.uint8, device="cuda")  # FlashInfer: zeroed before first use


def _paged_kv(torch: Any, shape: dict, head_dim: int, kv_dtype: Any, batch: int, kv_len: int) -> tuple:
    """KV cache [pages, 2, page, kv_heads, head_dim] + the CSR page table of `batch` requests of kv_len tokens."""
    pages_per_req = -(-kv_len // PAGE_SIZE)
    num_pages = batch * pages_per_req
    kv = torch.randn(num_pages, 2, PAGE_SIZE, shape["num_kv_heads"], head_dim, dtype=torch.bfloat16,
                     device="cuda").to(kv_dtype)
    indptr = torch.arange(0, num_pages + 1, pages_per_req, dtype=torch.int32, device="cuda")
    indices = torch.randperm(num_pages, dtype=torch.int32, device="cuda")  # scattered pages, as in a live server
    last = torch.full((batch,), kv_len - (pages_per_req - 1) * PAGE_SIZE, dtype=torch.int32, device="cuda")
    return kv, indptr, indices, last


def build_batch_decode(torch: Any, flashinfer: Any, shape: dict, opts: dict) -> Case:
    head_dim = opts.get("head_dim", shape["head_dim"])
    kv_dtype = getattr(torch, opts.get("kv_dtype", "bfloat16"))
    kv, indptr, indices, last = _paged_kv(torch, shape, head_dim, kv_dtype, BATCH, KV_LEN)
    q = torch.randn(BATCH, shape["num_qo_heads"], head_dim, dtype=torch.bfloat16, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspace(torch), "NHD", backend="fa2",
                                                            use_tensor_cores=opts.get("use_tensor_cores", False))
    plan_kwargs = {k: opts[k] for k in ("pos_encoding_mode", "window_left", "logits_soft_cap") if k in opts}

    def first() -> Any:
        wrapper.plan(indptr, indices, last, shape["num_qo_heads"], shape["num_kv_heads"], head_dim, PAGE_SIZE,
                     q_data_type=torch.bfloat16, kv_data_type=kv_dtype, **plan_kwargs)
        return wrapper.run(q, kv)

    return Case(first=first, steady=lambda: wrapper.run(q, kv))


def build_batch_prefill_paged(torch: Any, flashinfer: Any, shape: dict, opts: dict) -> Case:
    batch = 4
    kv, kv_indptr, indices, last = _paged_kv(torch, shape, shape["head_dim"], torch.bfloat16, batch, KV_LEN)
    qo_indptr = torch.arange(0, (batch + 1) * QO_LEN, QO_LEN, dtype=torch.int32, device="cuda")
    q = torch.randn(batch * QO_LEN, shape["num_qo_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(torch), "NHD", backend="fa2")

    def first() -> Any:
        wrapper.plan(qo_indptr, kv_indptr, indices, last, shape["num_qo_heads"], shape["num_kv_heads"],
                     shape["head_dim"], PAGE_SIZE, causal=True, q_data_type=torch.bfloat16,
                     kv_data_type=torch.bfloat16)
        return wrapper.run(q, kv)

    return Case(first=first, steady=lambda: wrapper.run(q, kv))


def build_batch_prefill_ragged(torch: Any, flashinfer: Any, shape: dict, opts: dict) -> Case:
    batch = 4
    indptr = torch.arange(0, (batch + 1) * QO_LEN, QO_LEN, dtype=torch.int32, device="cuda")
    q = torch.randn(batch * QO_LEN, shape["num_qo_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    k = torch.randn(batch * QO_LEN, shape["num_kv_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(_workspace(torch), "NHD", backend="auto")

    def first() -> Any:
        wrapper.plan(indptr, indptr, shape["num_qo_heads"], shape["num_kv_heads"], shape["head_dim"], causal=True,
                     q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        return wrapper.run(q, k, v)

    return Case(first=first, steady=lambda: wrapper.run(q, k, v))


def build_single_decode(torch: Any, flashinfer: Any, shape: dict, opts: dict) -> Case:
    kv_len = 4 * KV_LEN
    q = torch.randn(shape["num_qo_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    k = torch.randn(kv_len, shape["num_kv_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)

    def call() -> Any:
        return flashinfer.single_decode_with_kv_cache(q, k, v)

    return Case(first=call, steady=call)


def build_single_prefill(torch: Any, flashinfer: Any, shape: dict, opts: dict) -> Case:
    q = torch.randn(KV_LEN, shape["num_qo_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    k = torch.randn(KV_LEN, shape["num_kv_heads"], shape["head_dim"], dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)

    def call() -> Any:
        return flashinfer.single_prefill_with_kv_cache(q, k, v, causal=True, backend="fa2")

    return Case(first=call, steady=call)


BUILDERS: dict[str, Callable[..., Case]] = {
    "batch_decode": build_batch_decode,
    "batch_prefill_paged": build_batch_prefill_paged,
    "batch_prefill_ragged": build_batch_prefill_ragged,
    "single_decode": build_single_decode,
    "single_prefill": build_single_prefill,
}


def built_modules(jit_dir: Path) -> list[str]:
    """Names of the compiled modules in a cached_ops dir: <jit_dir>/<name>/<name>.so."""
    if not jit_dir.is_dir():
        return []
    return sorted(d.name for d in jit_dir.iterdir() if (d / f"{d.name}.so").is_file())


def probe() -> dict[str, Any]:
    """Where this Python's FlashInfer keeps JIT output, whether prebuilt kernels would bypass the JIT, build knobs."""
    import flashinfer
    from flashinfer.compilation_context import CompilationContext
    from flashinfer.jit import env as jit_env

    aot_dir = Path(jit_env.FLASHINFER_AOT_DIR)
    return {
        "flashinfer": flashinfer.__version__,
        "jit_dir": str(jit_env.FLASHINFER_JIT_DIR),
        "generated_dir": str(jit_env.FLASHINFER_GEN_SRC_DIR),
        "aot_dir": str(aot_dir),
        "aot_modules": len(built_modules(aot_dir)),
        "has_flashinfer_jit_cache": jit_env.has_flashinfer_jit_cache(),
        "has_flashinfer_cubin": jit_env.has_flashinfer_cubin(),
        "built_modules": built_modules(Path(jit_env.FLASHINFER_JIT_DIR)),
        "cuda_archs": sorted(f"{major}{minor}" for major, minor in CompilationContext().TARGET_CUDA_ARCHS),
        "cpu_cores": os.cpu_count(),
        # What FlashInfer honours (jit/cpp_ext.py): MAX_JOBS -> ninja -j (unset: ninja's default, cores + 2);
        # FLASHINFER_NVCC_THREADS -> nvcc --threads (default 1).
        "max_jobs": os.environ.get("MAX_JOBS"),
        "flashinfer_nvcc_threads": os.environ.get("FLASHINFER_NVCC_THREADS"),
    }


def record_builds() -> list[str]:
    """Names of the JIT modules this process compiles from now on: JitSpec.build_and_load is wrapped to note every
    module whose library did not exist when it was asked for (exact per process, also with parallel workers)."""
    from flashinfer.jit import core

    spec_class = getattr(core, "JitSpec", None)
    original = getattr(spec_class, "build_and_load", None)
    if original is None:
        raise RuntimeError("flashinfer.jit.core.JitSpec.build_and_load is missing: this FlashInfer is not 0.6.x")
    built: list[str] = []

    def build_and_load(self: Any) -> Any:
        if not self.is_aot and not self.is_compiled:
            built.append(self.name)
        return original(self)

    spec_class.build_and_load = build_and_load
    return built


def children_cpu_s() -> float:
    """User + system CPU seconds of finished child processes (ninja, nvcc, cicc, ptxas...)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sync_time(torch: Any, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def measure(variant: Variant, shape: dict, repeat: int) -> dict[str, Any]:
    """Time one variant in this (fresh) process: imports, CUDA init, data setup, first call, steady runs."""
    start = time.perf_counter()
    import flashinfer
    import torch
    from flashinfer.jit import env as jit_env

    from llmhost.fi import timing

    import_s = time.perf_counter() - start
    built = record_builds()
    _, cuda_init_s = _sync_time(torch, lambda: torch.zeros(1, device="cuda"))
    case, setup_s = _sync_time(torch, lambda: BUILDERS[variant.builder](torch, flashinfer, shape, variant.options))
    cpu_before = children_cpu_s()
    out, first_s = _sync_time(torch, case.first)
    finite = bool(torch.isfinite(out.float()).all().item())
    result: dict[str, Any] = {"variant": variant.name, "import_s": import_s, "cuda_init_s": cuda_init_s,
                              "setup_s": setup_s, "first_call_s": first_s, "new_modules": sorted(set(built)),
                              "compile_cpu_s": children_cpu_s() - cpu_before, "output_finite": finite,
                              "jit_dir": str(jit_env.FLASHINFER_JIT_DIR), "pid": os.getpid()}
    if repeat > 0 and finite:
        samples = timing.gpu_time_ms(case.steady, repeat=repeat, method="event")
        result["steady"] = timing.summarize(samples)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", action="store_true", help="print the JIT cache layout as JSON and exit")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="variant to measure in this process")
    parser.add_argument("--shape", default="{}", help="attention shape as JSON (num_qo_heads, num_kv_heads, "
                        "head_dim)")
    parser.add_argument("--repeat", type=int, default=30, help="steady-state timed iterations; 0 = skip "
                        "(default 30)")
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    if not args.variant:
        parser.error("--variant or --probe is required")
    print(json.dumps(measure(VARIANTS[args.variant], json.loads(args.shape), args.repeat)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
