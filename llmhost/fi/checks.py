"""Output checks of the decode benchmarks: a float32 reference, a tolerance that one dropped or duplicated token
fails, and the bitwise comparison of scattered with contiguous pages.

Tolerance. The error of a correct BF16 kernel is rounding: the output (relative rms ~0.16%: bf16 keeps 8
significant bits), and on tensor cores the scaled q and the probabilities before P.V (~0.16% each) — about 0.3% of
the request's output norm together. `REL_TOL` = 1% of ||ref_b|| (rule: ||out_b - ref_b|| / ||ref_b|| per request)
leaves 3x that. One token of n changes the output by ~1/sqrt(n) of its norm (n random values averaged): 5.8% at 300
tokens, 1.6% at 4K — rejected — and 0.8% at 16K, below the tolerance. The old rule (2% of max|ref|, element-wise)
had no such argument: whether it caught a token depended on that token's weight. Each reference check runs two
controls — the reference without each request's last token (last_page_len one short) and with its first token
counted twice — and records whether the tolerance rejects them (`detects_drop`, `detects_duplicate`): a check that
cannot tell (16K tokens) is reported as blind, not as passed.

Bitwise. Scattered and contiguous cases use the same lengths, so the same plan (the planner reads indptr and
lengths, not page ids), and the same bytes at other addresses: the kernel does identical arithmetic, so the outputs
must be equal bit for bit. Any difference means pages were read wrongly.
"""
from __future__ import annotations

import math
from typing import Any, Literal

from llmhost.fi import kv_layout

REL_TOL = 1e-2
Edit = Literal["drop_last", "dup_first"]


def rel_error(out: Any, ref: Any) -> float:
    """max over requests of ||out_b - ref_b|| / ||ref_b|| (torch or numpy arrays shaped [batch, ...])."""
    worst = 0.0
    for b in range(len(ref)):
        diff = float(((out[b] - ref[b]) ** 2).sum()) ** 0.5
        norm = float((ref[b] ** 2).sum()) ** 0.5
        worst = max(worst, diff / norm if norm else (math.inf if diff else 0.0))
    return worst


def verdict(out: Any, ref: Any, controls: dict[str, Any]) -> dict:
    """rel_err of out vs ref, and for each control (a wrong reference) whether the tolerance rejects it."""
    rel = rel_error(out, ref)
    result = {"rel_err": rel, "rel_tol": REL_TOL, "ok": rel <= REL_TOL}
    for name, wrong in controls.items():
        gap = rel_error(wrong, ref)
        result[f"{name}_change"] = gap
        result[f"detects_{name}"] = gap > REL_TOL
    return result


def reference_decode(torch: Any, q: Any, k_pages: Any, v_pages: Any, table: kv_layout.PageTable,
                     edit: Edit | None = None) -> Any:
    """float32 single-query attention per request, GQA by head groups: softmax(q K^T / sqrt(d)) V.

    edit: "drop_last" leaves out each request's last token, "dup_first" counts its first token twice — what a
    kernel with an off-by-one page table would compute (the negative controls).
    """
    outs = []
    num_kv, head_dim = k_pages.shape[2], k_pages.shape[3]
    group = q.shape[1] // num_kv
    for b, seq_len in enumerate(table.seq_lens):
        pages = torch.tensor(table.pages_of(b), dtype=torch.int64, device=q.device)
        # gather through a byte view: indexing kernels cover uint8 everywhere, FP8 dtypes not in every torch
        k, v = (x.view(torch.uint8)[pages].view(x.dtype).float().reshape(-1, num_kv, head_dim)[:seq_len]
                for x in (k_pages, v_pages))
        if edit == "drop_last" and seq_len > 1:
            k, v = k[:-1], v[:-1]
        elif edit == "dup_first":
            k, v = torch.cat([k[:1], k]), torch.cat([v[:1], v])
        qb = q[b].float().view(num_kv, group, head_dim)
        probs = (torch.einsum("hgd,thd->hgt", qb, k) / math.sqrt(head_dim)).softmax(-1)
        outs.append(torch.einsum("hgt,thd->hgd", probs, v).reshape(-1, head_dim))
    return torch.stack(outs)


def references(torch: Any, q: Any, k_pages: Any, v_pages: Any, table: kv_layout.PageTable) -> tuple[Any, dict]:
    """The float32 reference and the two controls (computed once, reused for every output of the same batch)."""
    controls = {"drop": reference_decode(torch, q, k_pages, v_pages, table, "drop_last"),
                "duplicate": reference_decode(torch, q, k_pages, v_pages, table, "dup_first")}
    return reference_decode(torch, q, k_pages, v_pages, table), controls


def check_reference(torch: Any, out: Any, q: Any, k_pages: Any, v_pages: Any, table: kv_layout.PageTable) -> dict:
    """out (the kernel's, [batch, heads, dim]) against the float32 reference, with both controls."""
    ref, controls = references(torch, q, k_pages, v_pages, table)
    return verdict(out.float(), ref, controls)


def bitwise(out_bytes: Any, expected_bytes: Any) -> dict:
    """Bit-for-bit equality of two outputs given as uint8 views (torch or numpy), and how many bytes differ."""
    if tuple(out_bytes.shape) != tuple(expected_bytes.shape):
        return {"bitwise_equal": False, "differing_bytes": None}
    differing = int((out_bytes != expected_bytes).sum())
    return {"bitwise_equal": differing == 0, "differing_bytes": differing}
