"""The output checks on numpy data: the tolerance passes bf16 rounding, rejects one dropped token of 300 and of 4K,
and the controls say when a request is too long for one token to show (16K)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost.fi import checks, verify

HEADS, KV_HEADS, DIM = 32, 8, 128


def batch(lengths: list[int], seed: int = 0):
    """Random q/K/V at Qwen3-4B's head shape in pages of 16, and its float32 reference."""
    rng = np.random.default_rng(seed)
    table = verify.build_page_table(lengths, 16, seed)
    shape = (len(table.indices), 16, KV_HEADS, DIM)
    k, v = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    q = rng.standard_normal((len(lengths), HEADS, DIM), dtype=np.float32)
    return q, k, v, table


def reference(q, k, v, table, lengths_delta: int = 0):
    """The reference, optionally reading one token fewer (-1) per request, as an off-by-one last_page_len would."""
    last = tuple(n + lengths_delta for n in table.last_page_len)
    return verify.reference_decode(q, k, v, table.__class__(table.indptr, table.indices, last, table.page_size),
                                   1 / math.sqrt(DIM))


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (8 significant bits, round to nearest even), back in float32."""
    bits = x.astype(np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.view(np.float32)


def test_bf16_rounding_of_the_output_passes_with_margin():
    q, k, v, table = batch([1, 77, 300])
    ref = reference(q, k, v, table)
    got = checks.rel_error(bf16_round(ref), ref)
    assert got < checks.REL_TOL / 3  # ~0.16% rms: a correct kernel is far inside 1%


def test_a_dropped_token_of_300_fails_the_tolerance_with_margin():
    q, k, v, table = batch([300, 300, 300])
    ref = reference(q, k, v, table)
    dropped = reference(q, k, v, table, lengths_delta=-1)
    assert checks.rel_error(dropped, ref) > 2 * checks.REL_TOL  # ~1/sqrt(300) = 5.8% of the norm


def test_verdict_reports_whether_each_control_would_have_been_caught():
    q, k, v, table = batch([300, 4096])
    ref = reference(q, k, v, table)
    got = checks.verdict(bf16_round(ref), ref, {"drop": reference(q, k, v, table, -1)})
    assert got["ok"] and got["detects_drop"] and got["drop_change"] > checks.REL_TOL
    blind = checks.verdict(ref, ref, {"drop": ref + 1e-6})
    assert blind["ok"] and not blind["detects_drop"]  # a control inside the tolerance: the check is blind


def test_a_wrong_output_fails_and_zero_norm_requests_do_not_divide_by_zero():
    ref = np.ones((2, 4, 8), dtype=np.float32)
    assert not checks.verdict(ref * 1.05, ref, {})["ok"]
    zero = np.zeros((1, 4, 8), dtype=np.float32)
    assert checks.rel_error(zero, zero) == 0.0
    assert checks.rel_error(zero + 1, zero) == math.inf


@pytest.mark.parametrize("length, caught", [(300, True), (4096, True), (16384, False)])
def test_drop_detection_follows_one_over_sqrt_n(length, caught):
    """One token of n moves the output ~1/sqrt(n) of its norm: 5.8%, 1.6%, 0.8% against a 1% tolerance."""
    q, k, v, table = batch([length], seed=length)
    ref = reference(q, k, v, table)
    change = checks.rel_error(reference(q, k, v, table, -1), ref)
    assert (change > checks.REL_TOL) is caught
    assert change == pytest.approx(1 / math.sqrt(length), rel=0.6)


def test_bitwise_compares_raw_bytes_and_counts_the_differences():
    out = np.linspace(-1, 1, 64, dtype=np.float16).reshape(2, 4, 8)
    same = checks.bitwise(out.view(np.uint8), out.copy().view(np.uint8))
    assert same == {"bitwise_equal": True, "differing_bytes": 0}
    nudged = out.copy()
    nudged[1, 2, 3] = np.nextafter(nudged[1, 2, 3], np.float16(2))  # one ulp: numerically "equal", not bitwise
    got = checks.bitwise(nudged.view(np.uint8), out.view(np.uint8))
    assert got["bitwise_equal"] is False and 1 <= got["differing_bytes"] <= 2
    assert checks.bitwise(out[:1].view(np.uint8), out.view(np.uint8))["bitwise_equal"] is False
