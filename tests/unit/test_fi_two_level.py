"""The two-level decode's tables and query folding (llmhost.fi.two_level), checked by decoding in numpy: one level
over whole page lists against level 0 over folded queries + level 1 over the rest, merged by log-sum-exp (CPU)."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures_attention import attend, merge

from llmhost.fi import kv_layout as kv
from llmhost.fi import two_level

HQ, HKV, D = 8, 2, 4  # 4 query heads per KV head, as Qwen3's 32 on 8


def tokens(table: kv.PageTable, row: int, pool: np.ndarray) -> np.ndarray:
    """The row's valid tokens, read through its pages ([pages, page_size, kv_heads, D] pool)."""
    pages = pool[list(table.pages_of(row))].reshape(-1, HKV, D)
    return pages[:table.seq_lens[row]]


def one_level(table: kv.PageTable, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.stack([attend(q[b], tokens(table, b, k), tokens(table, b, v))[0] for b in range(table.batch_size)])


def two_levels(table: kv.PageTable, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    levels = two_level.split(table)
    rows = two_level.fold_rows(levels, HQ, HKV)
    folded = q.reshape(-1, D)[rows].reshape(levels.groups, levels.members * HQ, D)
    out0, lse0 = np.empty((len(rows), D)), np.empty(len(rows))
    for g in range(levels.groups):  # level 0: FlashInfer maps folded head j to KV head j // (M x 4)
        o, s = attend(folded[g], tokens(levels.prefix, g, k), tokens(levels.prefix, g, v))
        span = slice(g * levels.members * HQ, (g + 1) * levels.members * HQ)
        out0[rows[span]], lse0[rows[span]] = o, s
    out = np.empty_like(q)
    for i, b in enumerate(levels.order):  # level 1 rows follow `order`; merge by log-sum-exp
        o1, s1 = attend(q[b], tokens(levels.suffix, i, k), tokens(levels.suffix, i, v))
        out[b] = merge(out0.reshape(q.shape)[b], lse0.reshape(q.shape[:2])[b], o1, s1)
    return out


@pytest.mark.parametrize("placement", kv.SHARED_PLACEMENTS)
@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_two_levels_decode_exactly_what_one_level_decodes(placement, page_size):
    lens = [40 + 7 * b for b in range(12)]  # 3 prompts x 4 requests, ragged
    table = kv.place(placement, lens, page_size, pool_pages=600)
    rng = np.random.default_rng(page_size)
    k, v = (rng.standard_normal((600, page_size, HKV, D)) for _ in range(2))
    q = rng.standard_normal((len(lens), HQ, D))
    np.testing.assert_allclose(two_levels(table, q, k, v), one_level(table, q, k, v), rtol=1e-10, atol=1e-12)


def test_a_folded_query_that_kept_each_head_on_a_wrong_kv_head_would_not_match():
    table = kv.place("shared", [64] * 8, 1, pool_pages=200)
    rng = np.random.default_rng(0)
    k, v = (rng.standard_normal((200, 1, HKV, D)) for _ in range(2))
    q = rng.standard_normal((8, HQ, D))
    right = one_level(table, q, k, v)
    naive = two_level.fold_rows  # members' heads one after another: member 1's heads 0-3 land on KV head 1
    try:
        two_level.fold_rows = lambda levels, hq, hkv: [b * hq + h for b in levels.order for h in range(hq)]
        assert not np.allclose(two_levels(table, q, k, v), right, atol=1e-6)
    finally:
        two_level.fold_rows = naive


def test_groups_come_from_the_first_page_and_keep_every_member_a_page_of_its_own():
    table = kv.place("shared-interleaved", [100] * 8, 16, pool_pages=100)
    levels = two_level.split(table)
    assert levels.order == (0, 2, 4, 6, 1, 3, 5, 7)  # two prompts dealt round-robin
    assert levels.members == 4 and levels.groups == 2
    # 15/16 of 100 tokens -> 5 whole shared pages of 16; each request keeps 100 - 80 = 20 tokens (2 pages)
    assert levels.prefix.seq_lens == (80, 80) and set(levels.prefix.last_page_len) == {16}
    assert levels.suffix.seq_lens == (20,) * 8
    assert two_level.distinct_bytes(levels, HKV, D, 2) == (2 * 80 + 8 * 20) * 2 * HKV * D * 2
    # a request whose pages all lie in the shared run still keeps its last page in level 1
    same = kv.build_csr("shared", [32, 32], [[0, 1], [0, 1]], 16)
    assert two_level.shared_pages(same, [0, 1]) == 1


def test_batches_it_cannot_fold_say_why():
    with pytest.raises(two_level.NotFoldable, match="one size above 1"):
        two_level.split(kv.place("contiguous", [64] * 4, 16, pool_pages=32))  # nothing shared: groups of 1
    with pytest.raises(two_level.NotFoldable, match="one size above 1"):
        two_level.split(kv.place("shared", [64] * 6, 16, pool_pages=64))  # groups of 4 and 2
    with pytest.raises(two_level.NotFoldable, match="no whole page"):
        two_level.split(kv.build_csr("shared", [10, 10], [[3], [3]], 16))  # one shared page, the last of both


class FakeTwo:
    """What sparse._two_level calls: measure() returning a record or raising as the GPU side can."""

    def __init__(self, outcome):
        self.outcome = outcome

    def measure(self, *args):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_a_two_level_case_that_cannot_fold_is_wrong_or_fails_leaves_the_matrix_going():
    from llmhost.fi import sparse
    from llmhost.fi.sparse_kernels import KernelCase

    case = KernelCase("bf16", 1, 64, 4608, "shared", "tensor-core")
    opts = sparse.SparseOptions(page_sizes=(1,), batches=((64, 4608),), dtypes=("bf16",), paths=("tensor-core",),
                                placements=("shared",), repeat=3, timing="graph")
    table = kv.place("shared", [64] * 8, 1, pool_pages=600)
    lines: list[str] = []

    def run(outcome):
        return sparse._two_level(FakeTwo(outcome), case, table, (None, None), None, 150.0, opts, {}, lines.append)

    record = {"two_level_us": 110.0, "level0_us": 70.0, "level1_us": 30.0, "two_level_over_one_level": 0.73,
              "prefill_level0_over_one_level": 0.7, "one_launch_over_one_level": 0.65, "cascade_over_one_level": 2.4}
    assert run((record, [{"ok": True}])) == (record, [{"ok": True}], {})
    assert "two-level 110.0 us (level 0 70.0, level 1 30.0) = 0.73x" in lines[-1]
    assert "prefill kernel 0.70x; both levels in one launch 0.65x; FlashInfer's cascade wrapper 2.40x" in lines[-1]
    assert run(two_level.NotFoldable("group sizes [1]")) == (None, [], {})
    got, checks, errors = run(AssertionError("two-level differs"))
    assert got is None and checks[0]["ok"] is False and "differs" in checks[0]["error"] and not errors
    assert run(RuntimeError("capture failed\nmore")) == (
        None, [], {"two-level/bf16 tensor-core 64x4608 page 1 shared": "RuntimeError: capture failed"})
    assert sparse.two_level_applies(case)
    assert not sparse.two_level_applies(KernelCase("fp8", 1, 64, 4608, "shared", "tensor-core"))
    assert not sparse.two_level_applies(KernelCase("bf16", 1, 64, 4608, "random", "tensor-core"))


@pytest.mark.parametrize("page_size", [1, 16])
def test_both_levels_as_entries_of_one_launch_decode_what_one_level_decodes(page_size):
    lens = [40 + 7 * b for b in range(12)]
    table = kv.place("shared-interleaved", lens, page_size, pool_pages=600)
    rng = np.random.default_rng(page_size)
    k, v = (rng.standard_normal((600, page_size, HKV, D)) for _ in range(2))
    q = rng.standard_normal((len(lens), HQ, D))
    levels = two_level.split(table)
    one = two_level.one_launch(levels)
    doubled = q[list(levels.order) * 2]
    assert one.qo_indptr[-1] == len(doubled) and one.table.batch_size == len(one.qo_indptr) - 1 == 3 + 12
    out, lse = np.empty_like(doubled), np.empty(doubled.shape[:2])
    for e in range(one.table.batch_size):
        rows = slice(one.qo_indptr[e], one.qo_indptr[e + 1])
        keys, values = tokens(one.table, e, k), tokens(one.table, e, v)
        for r in range(rows.start, rows.stop):
            out[r], lse[r] = attend(doubled[r], keys, values)
    got = np.empty_like(q)
    for i, b in enumerate(levels.order):
        got[b] = merge(out[i], lse[i], out[len(lens) + i], lse[len(lens) + i])
    np.testing.assert_allclose(got, one_level(table, q, k, v), rtol=1e-10, atol=1e-12)
