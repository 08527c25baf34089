"""Numerical check of FlashInfer's GQA batch decode (paged KV) against a float32 reference, at the model's shapes.

Reads num_attention_heads / num_key_value_heads / head_dim from MODEL_DIR/config.json (Qwen3-4B: 32 / 8 / 128,
GQA group 4), builds a batch of requests with random KV lengths whose pages are scattered through the cache
(as a real page table is), runs BatchDecodeWithPagedKVCacheWrapper.plan()/run() in bf16 with the CUDA-core
kernel and with the tensor-core kernel (the one SGLang picks for GQA group >= 4), and compares each output with
a NumPy float32 reference. A negative control (the reference with the wrong query->KV head mapping) must fail
the same tolerance, so a pass means the check could tell.

    python -m llmhost.fi.verify --model-dir ~/llmhost/models/Qwen3-4B
    python -m llmhost.fi.verify --model-dir DIR --batch-size 16 --max-kv-len 4096 --page-sizes 1 16

Prints one line per case and a JSON summary last; exit 0 all pass, 1 on a mismatch or when CUDA/FlashInfer is
unusable. Writes nothing (FlashInfer may JIT-compile kernels into FLASHINFER_WORKSPACE_BASE on first use).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from llmhost.fi import shapes
from llmhost.fi.shapes import AttentionShape

# bf16 keeps 8 significant bits: unit roundoff 2^-8 = 3.9e-3. The kernel rounds the output once, and the
# tensor-core path also rounds the softmax probabilities to bf16 before P@V, so a correct kernel lands within a
# few ulps of the float32 reference; torch.testing uses rtol 1.6e-2 for bf16, which we adopt with atol 1e-2.
BF16_ATOL = 1e-2
BF16_RTOL = 1.6e-2
PATHS = {"cuda-cores": False, "tensor-cores": True}  # name -> use_tensor_cores


class VerifyError(RuntimeError):
    """An environment problem (no CUDA, no FlashInfer, bad config.json); the message is one line."""


@dataclasses.dataclass(frozen=True, slots=True)
class PageTable:
    indptr: tuple[int, ...]  # request b owns indices[indptr[b]:indptr[b+1]]
    indices: tuple[int, ...]  # page ids into the cache
    last_page_len: tuple[int, ...]  # 1..page_size tokens used in each request's last page
    page_size: int

    @property
    def kv_lens(self) -> tuple[int, ...]:
        return tuple((self.indptr[b + 1] - self.indptr[b] - 1) * self.page_size + self.last_page_len[b]
                     for b in range(len(self.last_page_len)))


@dataclasses.dataclass(frozen=True, slots=True)
class CaseResult:
    path: str
    page_size: int
    batch_size: int
    max_abs_err: float
    worst_excess: float  # max(|out-ref| - (atol + rtol*|ref|)); <= 0 means within tolerance
    control_excess: float  # same measure for the wrong-head-mapping control; must be > 0
    passed: bool


def read_head_shape(model_dir: str | Path) -> AttentionShape:
    """Attention head shape from MODEL_DIR/config.json (the same reader the kernel benchmarks use)."""
    try:
        return shapes.from_model_dir(model_dir)
    except shapes.ShapeError as exc:
        raise VerifyError(str(exc)) from None


def build_page_table(kv_lens: list[int], page_size: int, seed: int) -> PageTable:
    """Pages for each request, drawn from a shuffled pool so no request's pages are contiguous by accident."""
    if page_size < 1 or any(n < 1 for n in kv_lens):
        raise ValueError("page_size and every kv length must be >= 1")
    pages_per_req = [math.ceil(n / page_size) for n in kv_lens]
    pool = list(range(sum(pages_per_req)))
    random.Random(seed).shuffle(pool)
    indptr = [0]
    for count in pages_per_req:
        indptr.append(indptr[-1] + count)
    last = [n - (count - 1) * page_size for n, count in zip(kv_lens, pages_per_req)]
    return PageTable(tuple(indptr), tuple(pool), tuple(last), page_size)


def tolerance_excess(out: Any, ref: Any, atol: float = BF16_ATOL, rtol: float = BF16_RTOL) -> tuple[float, float]:
    """(max |out-ref|, max over elements of |out-ref| - (atol + rtol*|ref|)); pass when the second is <= 0."""
    import numpy as np

    diff = np.abs(np.asarray(out, dtype=np.float32) - np.asarray(ref, dtype=np.float32))
    excess = diff - (atol + rtol * np.abs(np.asarray(ref, dtype=np.float32)))
    return float(diff.max()), float(excess.max())


def reference_decode(q: Any, k_cache: Any, v_cache: Any, table: PageTable, sm_scale: float,
                     kv_head_of: Any = None) -> Any:
    """float32 decode attention. q [B, Hqo, D]; k/v caches [pages, page_size, Hkv, D] (NHD).

    Query head h reads KV head h // group (FlashInfer's GQA convention) unless kv_head_of maps it otherwise
    (the negative control passes a wrong mapping).
    """
    import numpy as np

    q = np.asarray(q, dtype=np.float32)
    batch, num_qo, _ = q.shape
    num_kv = k_cache.shape[2]
    mapping = np.arange(num_qo) // (num_qo // num_kv) if kv_head_of is None else np.asarray(kv_head_of)
    out = np.empty_like(q)
    for b in range(batch):
        pages = list(table.indices[table.indptr[b]:table.indptr[b + 1]])
        n = table.kv_lens[b]
        k = np.asarray(k_cache[pages], dtype=np.float32).reshape(-1, num_kv, q.shape[2])[:n][:, mapping]
        v = np.asarray(v_cache[pages], dtype=np.float32).reshape(-1, num_kv, q.shape[2])[:n][:, mapping]
        scores = np.einsum("hd,lhd->hl", q[b], k) * sm_scale
        scores -= scores.max(axis=1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=1, keepdims=True)
        out[b] = np.einsum("hl,lhd->hd", probs, v)
    return out


def control_reference(q: Any, k_cache: Any, v_cache: Any, table: PageTable, sm_scale: float,
                      shape: AttentionShape) -> Any:
    """What a kernel with the classic bug would return; a check that passes this too could not fail.

    GQA/MHA: query heads read the wrong KV head (round-robin instead of contiguous groups, or reversed when the
    group is 1). MQA (one KV head, no wrong head to read): each request reads the previous request's pages (a
    request-indexing bug). Reversing a request's own pages would not do: attention does not depend on token order,
    so at page size 1 that control matched the reference and the check could never pass.
    """
    if shape.num_kv_heads > 1:
        if shape.group_size > 1:
            mapping = [h % shape.num_kv_heads for h in range(shape.num_qo_heads)]
        else:
            mapping = list(reversed(range(shape.num_qo_heads)))
        return reference_decode(q, k_cache, v_cache, table, sm_scale, mapping)
    batch = len(table.last_page_len)
    source = [(b - 1) % batch for b in range(batch)]
    pages = [table.indices[table.indptr[s]:table.indptr[s + 1]] for s in source]
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + len(p))
    shifted = dataclasses.replace(table, indptr=tuple(indptr), indices=tuple(x for p in pages for x in p),
                                  last_page_len=tuple(table.last_page_len[s] for s in source))
    return reference_decode(q, k_cache, v_cache, shifted, sm_scale)


def run_case(shape: AttentionShape, path: str, page_size: int, kv_lens: list[int], seed: int) -> CaseResult:
    """One plan()/run() of BatchDecodeWithPagedKVCacheWrapper on the GPU, compared with the reference."""
    import torch
    import flashinfer

    table = build_page_table(kv_lens, page_size, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dims = (len(table.indices), page_size, shape.num_kv_heads, shape.head_dim)
    k_cache = torch.randn(dims, generator=gen, device="cuda").to(torch.bfloat16)
    v_cache = torch.randn(dims, generator=gen, device="cuda").to(torch.bfloat16)
    q = torch.randn((len(kv_lens), shape.num_qo_heads, shape.head_dim), generator=gen, device="cuda")
    q = q.to(torch.bfloat16)
    workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    # "fa2" + "NHD" is what SGLang 0.5.17's FlashInfer backend constructs, so the kernels match the server's.
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_tensor_cores=PATHS[path], backend="fa2")

    def as_i32(values: tuple[int, ...]) -> Any:
        return torch.tensor(values, dtype=torch.int32, device="cuda")

    wrapper.plan(as_i32(table.indptr), as_i32(table.indices), as_i32(table.last_page_len),
                 shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, page_size,
                 pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    out = wrapper.run(q, (k_cache, v_cache))
    torch.cuda.synchronize()
    host = [t.float().cpu().numpy() for t in (q, k_cache, v_cache, out)]
    sm_scale = 1.0 / math.sqrt(shape.head_dim)
    ref = reference_decode(host[0], host[1], host[2], table, sm_scale)
    control = control_reference(host[0], host[1], host[2], table, sm_scale, shape)
    max_err, excess = tolerance_excess(host[3], ref)
    _, control_excess = tolerance_excess(host[3], control)
    passed = excess <= 0 and control_excess > 0
    return CaseResult(path, page_size, len(kv_lens), max_err, excess, control_excess, passed)


def _environment() -> dict[str, str]:
    try:
        import torch
        import flashinfer
    except ImportError as exc:
        raise VerifyError(f"{exc.name} is not importable in {sys.executable} — run with the server's python "
                          "(SGLANG_PYTHON)") from None
    except Exception as exc:  # e.g. FlashInfer's RuntimeError for a flashinfer-cubin of another version
        raise VerifyError(f"flashinfer failed to import: {(str(exc).splitlines() or [type(exc).__name__])[0]} "
                          "— ./setup_host.sh --only flashinfer shows the package versions") from None
    if not torch.cuda.is_available():
        raise VerifyError("torch sees no CUDA device — check nvidia-smi and that torch is a CUDA build")
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "flashinfer": flashinfer.__version__}


def _line(shape: AttentionShape, result: CaseResult) -> str:
    verdict = "PASS" if result.passed else "FAIL"
    control = "control fails as it must" if result.control_excess > 0 else "CONTROL ALSO PASSES (check is blind)"
    return (f"[verify] {result.path:<12} page={result.page_size:<3} bs={result.batch_size} "
            f"heads {shape.num_qo_heads}/{shape.num_kv_heads} d{shape.head_dim}: max_abs_err "
            f"{result.max_abs_err:.2e} (tol {BF16_ATOL:g} + {BF16_RTOL:g}*|ref|; {control}) {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="directory with the model's config.json")
    parser.add_argument("--batch-size", type=int, default=7, help="requests in the decode batch (default 7)")
    parser.add_argument("--max-kv-len", type=int, default=1024, help="longest KV length in tokens (default 1024)")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16],
                        help="KV page sizes in tokens to test (default: 1 = SGLang's, and 16)")
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS),
                        help="decode kernels to check (default: both; SGLang uses tensor-cores for GQA group >= 4)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for lengths, pages and tensors (default 0)")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.max_kv_len < 1 or min(args.page_sizes) < 1:
        parser.error("--batch-size, --max-kv-len and --page-sizes must be >= 1")
    try:
        shape = read_head_shape(args.model_dir)
        env = _environment()
    except VerifyError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    kv_lens = [rng.randint(1, args.max_kv_len) for _ in range(args.batch_size - 1)] + [args.max_kv_len]
    print(f"[verify] {env['gpu']}, flashinfer {env['flashinfer']}, torch {env['torch']} (CUDA {env['cuda']}); "
          f"kv lengths {kv_lens}; a kernel not in the JIT cache compiles first (~1 min)", flush=True)
    results = []
    for path in args.paths:
        for page_size in args.page_sizes:
            try:
                result = run_case(shape, path, page_size, kv_lens, args.seed)
            except Exception as exc:  # a kernel that fails to build or launch is a failed check, stated in one line
                print(f"verify: {path} page={page_size} failed to run: {type(exc).__name__}: "
                      f"{(str(exc).splitlines() or [''])[0]}", file=sys.stderr)
                return 1
            results.append(result)
            print(_line(shape, result), flush=True)
    passed = all(r.passed for r in results)
    print(json.dumps({"passed": passed, "shape": dataclasses.asdict(shape), **env,
                      "cases": [dataclasses.asdict(r) for r in results]}))
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
