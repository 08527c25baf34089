"""Decode byte accounting with an FP8 KV cache (q and o stay BF16), and where a churned batch's decode pages land."""
from __future__ import annotations

import pytest

from llmhost.fi import kv_layout as kv


def test_fp8_kv_halves_the_kv_bytes_but_not_q_and_o():
    # one request of 100 tokens, page size 16, Qwen3-4B shapes 32/8/128, FP8 KV, BF16 q:
    # KV  = 100 tokens x 2 (K, V) x 8 heads x 128 dims x 1 byte = 204,800
    # q/o = 1 request x 32 heads x 128 dims x 2 bytes = 8,192 each
    # page table (int32): indptr 2 + indices 7 + last_page_len 1 = 10 ints = 40 bytes
    table = kv.place("contiguous", [100], 16, pool_pages=10)
    got = kv.decode_bytes(table, num_qo_heads=32, num_kv_heads=8, head_dim=128, kv_dtype_bytes=1)
    assert got == {"kv_bytes": 204_800, "distinct_kv_bytes": 204_800, "q_bytes": 8_192, "o_bytes": 8_192,
                   "page_table_bytes": 40, "total_bytes": 204_800 + 2 * 8_192 + 40}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_churned_decode_pages_interleave_across_the_batch(seed):
    """The last 256 tokens of each request are allocated one step at a time across the batch, so no request gets two
    physically adjacent pages for them (at page size 1, every step hands each request one page in turn)."""
    lens = [600, 600]
    table = kv.place("churned", lens, 1, pool_pages=3000, seed=seed)
    for b in range(len(lens)):
        tail = table.pages_of(b)[-256:]
        assert sum(cur == prev + 1 for prev, cur in zip(tail, tail[1:])) == 0
