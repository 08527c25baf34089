"""Page tables for the paged-KV benchmark: CSR invariants, placements, byte accounting (pure, CPU)."""
from __future__ import annotations

import statistics

import pytest

from llmhost.fi import kv_layout as kv


PRIVATE = sorted(set(kv.PLACEMENTS) - set(kv.SHARED_PLACEMENTS))


@pytest.mark.parametrize("placement", PRIVATE)
@pytest.mark.parametrize("page_size", [1, 4, 16, 64])
def test_every_token_has_a_page_and_no_page_is_shared(placement, page_size):
    lens = [1, 63, 64, 65, 1000, 4096]
    needed = sum(kv.pages_needed(n, page_size) for n in lens)
    table = kv.place(placement, lens, page_size, pool_pages=needed * 2 + 64, seed=3)
    assert table.indptr[0] == 0 and len(table.indptr) == len(lens) + 1
    assert table.indptr[-1] == table.num_pages == needed
    for b, n in enumerate(lens):
        pages = table.pages_of(b)
        # all but the last page are full, the last holds the remainder: capacity covers exactly n tokens
        assert (len(pages) - 1) * page_size + table.last_page_len[b] == n
        assert 1 <= table.last_page_len[b] <= page_size
    assert len(set(table.indices)) == table.num_pages
    assert all(0 <= p < needed * 2 + 64 for p in table.indices)


def test_last_page_len_by_hand():
    assert [kv.last_len(n, 16) for n in (1, 15, 16, 17, 32, 33)] == [1, 15, 16, 1, 16, 1]
    assert [kv.pages_needed(n, 16) for n in (1, 15, 16, 17, 32, 33)] == [1, 1, 1, 2, 2, 3]


def test_contiguous_placement_is_one_run_per_request():
    table = kv.place("contiguous", [100, 200, 300], 16, pool_pages=100)
    assert kv.run_lengths(table) == [7, 13, 19]
    assert table.indices == tuple(range(39))


def test_random_placement_is_seeded_and_scattered():
    lens = [4096] * 8
    a = kv.place("random", lens, 1, pool_pages=65536, seed=1)
    assert a == kv.place("random", lens, 1, pool_pages=65536, seed=1)
    assert a != kv.place("random", lens, 1, pool_pages=65536, seed=2)
    assert statistics.mean(kv.run_lengths(a)) < 1.1  # 32K of 64K pages drawn at random: almost never adjacent


def test_churned_placement_sits_between_contiguous_and_random():
    lens = [4096] * 64
    needed = sum(lens)
    table = kv.place("churned", lens, 1, pool_pages=needed * 3 // 2 + 64, seed=0)
    runs = kv.run_lengths(table)
    assert sorted(table.indices) != list(range(needed))  # not the contiguous answer
    assert len(set(table.indices)) == needed  # a permutation of distinct pool pages
    # realistic: prompts land in holes several pages long, decode tokens interleave (runs of 1)
    assert 1.5 < statistics.mean(runs) < 100
    assert max(runs) > 16 and runs.count(1) > len(runs) // 4


def test_churned_placement_is_reproducible_for_a_seed():
    lens = [300, 500, 700]
    first = kv.place("churned", lens, 4, pool_pages=2000, seed=5)
    assert first == kv.place("churned", lens, 4, pool_pages=2000, seed=5)


def test_free_list_reuses_released_pages_in_sorted_order_once_exhausted():
    allocator = kv.FreeListAllocator(6)
    first = allocator.alloc(4)
    assert first == [0, 1, 2, 3]
    allocator.release_pages([3, 0])
    assert allocator.alloc(2) == [4, 5]  # the front of the free list first, release untouched
    assert allocator.alloc(2) == [0, 3]  # then release merged in and sorted
    assert allocator.alloc(1) is None


def test_a_batch_larger_than_the_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        kv.place("random", [100], 1, pool_pages=50)


def test_unknown_placement_is_named_in_the_error():
    with pytest.raises(ValueError, match="striped"):
        kv.place("striped", [1], 1, pool_pages=1)


def test_decode_bytes_by_hand():
    # Qwen3-4B, 2 requests of 4096 + 100 tokens, page size 16, bf16 KV:
    # KV  = 4196 tokens x 2 (K, V) x 8 heads x 128 dims x 2 bytes = 17,186,816
    # q/o = 2 requests x 32 heads x 128 dims x 2 bytes = 16,384 each
    # page table (int32): indptr 3 + indices 256 + 7 + last_page_len 2 = 268 ints = 1,072 bytes
    table = kv.place("contiguous", [4096, 100], 16, pool_pages=1000)
    got = kv.decode_bytes(table, num_qo_heads=32, num_kv_heads=8, head_dim=128, kv_dtype_bytes=2)
    assert got == {"kv_bytes": 17_186_816, "distinct_kv_bytes": 17_186_816, "q_bytes": 16_384, "o_bytes": 16_384,
                   "page_table_bytes": 1_072, "total_bytes": 17_186_816 + 2 * 16_384 + 1_072}
    assert kv.kv_bytes([4196], 8, 128, 1) == 17_186_816 // 2  # FP8 halves the KV bytes


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("placement", kv.SHARED_PLACEMENTS)
def test_every_four_requests_share_whole_pages_of_their_prompt_and_own_the_rest(placement, page_size):
    lens = [4096] * 16 + [1000] * 4  # 5 prompts; the last group shorter
    table = kv.place(placement, lens, page_size, pool_pages=sum(lens), seed=0)
    groups = {}
    for b in range(table.batch_size):
        groups.setdefault(kv.group_of(b, table.batch_size, placement == "shared-interleaved"), []).append(b)
    assert sorted(len(who) for who in groups.values()) == [4] * 5
    owner: dict[int, int] = {}
    for group, who in groups.items():
        shared = int(min(lens[b] for b in who) * kv.SHARED_FRACTION) // page_size
        prompt = table.pages_of(who[0])[:shared]
        for b in who:
            pages = table.pages_of(b)
            assert len(pages) == kv.pages_needed(lens[b], page_size) and pages[:shared] == prompt
            for page in pages[shared:]:  # the rest is the request's own: no other request reads it
                assert owner.setdefault(page, b) == b
        for page in prompt:
            assert owner.setdefault(page, -1 - group) == -1 - group  # a prompt page belongs to its group only
    assert set(owner) == set(table.indices) and max(owner) < len(owner)  # packed from page 0, no gaps


def test_grouped_puts_a_prompts_requests_side_by_side_and_interleaved_deals_them_round_robin():
    assert [kv.group_of(b, 8, interleaved=False) for b in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [kv.group_of(b, 8, interleaved=True) for b in range(8)] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [kv.group_of(b, 6, interleaved=True) for b in range(6)] == [0, 1, 0, 1, 0, 1]  # 2 groups (4 + 2)


def test_shared_pages_are_counted_once_in_the_distinct_bytes():
    # 4 requests of 160 tokens, page 16: the prompt is 150 tokens -> 9 whole pages (144 tokens) shared;
    # distinct tokens = 144 + 4 x 16 own = 208 (each request's 10th page holds its last 16 tokens)
    table = kv.place("shared", [160] * 4, 16, pool_pages=64)
    assert kv.distinct_tokens(table) == 144 + 4 * 16
    got = kv.decode_bytes(table, num_qo_heads=32, num_kv_heads=8, head_dim=128, kv_dtype_bytes=2)
    assert got["kv_bytes"] == kv.kv_bytes([640], 8, 128, 2)
    assert got["distinct_kv_bytes"] == kv.kv_bytes([208], 8, 128, 2)
    assert table.num_pages == 40 and len(set(table.indices)) == 9 + 4


def test_a_shared_batch_larger_than_the_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        kv.place("shared", [4096] * 8, 1, pool_pages=1000)
