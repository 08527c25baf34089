"""Paged KV-cache page tables, built on the CPU: where each request's tokens live in the KV pool, and what a decode
step has to read.

FlashInfer describes a batch's KV cache in CSR form: request b owns physical pages indices[indptr[b]:indptr[b+1]],
all full except the last, which holds last_page_len[b] tokens. Three placements of the same logical batch:

- contiguous: request after request in ascending pages (the best case: one long sequential read per request);
- random: pages drawn uniformly from the whole pool (the worst case: every page is a separate, far-away read);
- churned: what a serving engine's pool looks like after a while, by simulating SGLang's token-to-KV allocator
  (a free list handed out from the front; freed pages go to a release list that is merged and sorted back in when
  the free list runs dry). Background requests come and go (prompt pages in one allocation, then one token per
  step for every running request, interleaved), then the benchmark batch is allocated the same way. Its prompts land
  in whatever holes the churn left; its decode tokens interleave with the batch's other requests.

Two more share pages between requests, as SGLang's radix cache does for a common system prompt: every SHARED_GROUP
requests read one copy of their prompt's pages. shared: a group's requests side by side in the batch;
shared-interleaved: groups dealt round-robin. Decode still reads the prompt once per request; whether the L2 cache
serves the repeats depends on the requests reading it at the same time, which the batch order decides.

Pure Python (no torch, no numpy): the GPU benchmark converts the lists to tensors.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PageTable:
    placement: str
    page_size: int
    seq_lens: tuple[int, ...]
    indptr: tuple[int, ...]
    indices: tuple[int, ...]
    last_page_len: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    @property
    def num_pages(self) -> int:
        return len(self.indices)

    def pages_of(self, request: int) -> tuple[int, ...]:
        return self.indices[self.indptr[request]:self.indptr[request + 1]]


def pages_needed(seq_len: int, page_size: int) -> int:
    """ceil(seq_len / page_size): pages one request occupies."""
    return -(-seq_len // page_size)


def last_len(seq_len: int, page_size: int) -> int:
    """Tokens in the request's last page, 1..page_size (FlashInfer's last_page_len)."""
    return seq_len - (pages_needed(seq_len, page_size) - 1) * page_size


def build_csr(placement: str, seq_lens: Sequence[int], pages: Sequence[Sequence[int]], page_size: int) -> PageTable:
    """CSR page table from per-request page lists; checks each list holds exactly the pages its tokens need."""
    if len(pages) != len(seq_lens):
        raise ValueError(f"{len(pages)} page lists for {len(seq_lens)} requests")
    indptr = [0]
    indices: list[int] = []
    for seq_len, request_pages in zip(seq_lens, pages):
        if seq_len < 1:
            raise ValueError(f"sequence length {seq_len} < 1")
        if len(request_pages) != pages_needed(seq_len, page_size):
            raise ValueError(f"{len(request_pages)} pages for {seq_len} tokens at page size {page_size}")
        indices.extend(request_pages)
        indptr.append(len(indices))
    return PageTable(placement=placement, page_size=page_size, seq_lens=tuple(seq_lens), indptr=tuple(indptr),
                     indices=tuple(indices), last_page_len=tuple(last_len(n, page_size) for n in seq_lens))


def _split(flat: Sequence[int], counts: Sequence[int]) -> list[list[int]]:
    out, start = [], 0
    for count in counts:
        out.append(list(flat[start:start + count]))
        start += count
    return out


def contiguous_pages(seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int) -> list[list[int]]:
    counts = [pages_needed(n, page_size) for n in seq_lens]
    _check_fits(sum(counts), pool_pages)
    return _split(range(sum(counts)), counts)


def random_pages(seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int) -> list[list[int]]:
    counts = [pages_needed(n, page_size) for n in seq_lens]
    _check_fits(sum(counts), pool_pages)
    return _split(random.Random(seed).sample(range(pool_pages), sum(counts)), counts)


def _check_fits(total: int, pool_pages: int) -> None:
    if total > pool_pages:
        raise ValueError(f"batch needs {total} pages but the pool has {pool_pages}")


class FreeListAllocator:
    """SGLang's TokenToKVPoolAllocator with need_sort: alloc from the front of free; free() appends to release;
    when free is too short, release is merged in and the whole list sorted (so holes get reused low-to-high)."""

    def __init__(self, pool_pages: int) -> None:
        self.free = list(range(pool_pages))
        self.head = 0  # free[head:] is the free list; slicing from the front each call would be O(pool)
        self.release: list[int] = []

    def available(self) -> int:
        return len(self.free) - self.head + len(self.release)

    def alloc(self, count: int) -> list[int] | None:
        if count > len(self.free) - self.head and self.release:
            self.free = sorted(self.free[self.head:] + self.release)
            self.head, self.release = 0, []
        if count > len(self.free) - self.head:
            return None
        out = self.free[self.head:self.head + count]
        self.head += count
        return out

    def release_pages(self, pages: Sequence[int]) -> None:
        self.release.extend(pages)


@dataclass(slots=True)
class _Request:
    pages: list[int]
    tokens: int
    target: int


class _Pool:
    """The allocator plus a prefix cache: finished requests keep their pages (as SGLang's radix cache does) until
    an allocation needs room, then the least recently finished are evicted to the release list. So the pool runs
    full, as a busy server's does, and new requests get the holes evictions leave."""

    def __init__(self, pool_pages: int) -> None:
        self.allocator = FreeListAllocator(pool_pages)
        self.cached: deque[list[int]] = deque()

    def alloc(self, count: int) -> list[int] | None:
        while (pages := self.allocator.alloc(count)) is None and self.cached:
            self.allocator.release_pages(self.cached.popleft())
        return pages


def _decode_step(pool: _Pool, running: list[_Request], page_size: int) -> bool:
    """One decode step: every request gains a token, and a page when its last page is full. False when full."""
    for request in running:
        if request.tokens % page_size == 0:
            page = pool.alloc(1)
            if page is None:
                return False
            request.pages.extend(page)
        request.tokens += 1
    return True


def churn(pool: _Pool, page_size: int, budget_pages: int, rng: random.Random, pool_pages: int,
          turnover: float = 2.0, max_running: int = 48) -> None:
    """Background traffic until `turnover` x the pool's pages have been allocated, then drained into the cache.

    The free list is handed out front to back and only re-sorted when it runs dry, so the pool has to be cycled
    through (turnover >= 1) before the holes that evictions leave are what new requests get. Prompts ~ lognormal
    (median 700 tokens), outputs uniform 32..512: a chat and tool-use mix. Running requests never hold more than
    budget_pages, so the benchmark batch always fits once the cache is evicted.
    """
    running: list[_Request] = []
    held = allocated = 0
    while allocated < turnover * pool_pages:
        while len(running) < max_running:
            prompt = max(1, int(rng.lognormvariate(6.55, 0.8)))
            need = pages_needed(prompt, page_size)
            if held + need + len(running) + 1 > budget_pages:
                break
            pages = pool.alloc(need)
            if pages is None:
                break
            running.append(_Request(pages, prompt, prompt + rng.randint(32, 512)))
            held, allocated = held + need, allocated + need
        if not running:
            break
        before = sum(len(r.pages) for r in running)
        if held + len(running) > budget_pages or not _decode_step(pool, running, page_size):
            victim = running.pop(rng.randrange(len(running)))  # retract one request, as SGLang does when full
            pool.allocator.release_pages(victim.pages)
            held -= len(victim.pages)
            continue
        grown = sum(len(r.pages) for r in running) - before
        held, allocated = held + grown, allocated + grown
        for request in [r for r in running if r.tokens >= r.target]:
            running.remove(request)
            pool.cached.append(request.pages)
            held -= len(request.pages)
    pool.cached.extend(r.pages for r in running)


def churned_pages(seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int,
                  decode_tokens: int = 256) -> list[list[int]]:
    """The batch allocated into a churned, full pool: prompts in one allocation each, then the last
    `decode_tokens` tokens of every request one step at a time, interleaved across the batch (continuous batching)."""
    total = sum(pages_needed(n, page_size) for n in seq_lens)
    _check_fits(total, pool_pages)
    rng = random.Random(seed)
    pool = _Pool(pool_pages)
    # Headroom: each request may straddle one extra page because its prompt and decode parts split differently.
    churn(pool, page_size, pool_pages - total - len(seq_lens), rng, pool_pages)
    batch = []
    for seq_len in seq_lens:
        prompt = max(1, seq_len - decode_tokens)
        pages = pool.alloc(pages_needed(prompt, page_size))
        if pages is None:
            raise RuntimeError("churned pool has too little room for the batch (pool sizing bug)")
        batch.append(_Request(pages, prompt, seq_len))
    while any(r.tokens < r.target for r in batch):
        if not _decode_step(pool, [r for r in batch if r.tokens < r.target], page_size):
            raise RuntimeError("churned pool has too little room for the batch's decode tokens (pool sizing bug)")
    return [r.pages for r in batch]


# Shared prompts, as the radix cache stores them: requests in groups of SHARED_GROUP whose first pages are one
# physical copy of their group's prompt (the agent workload: 64 agents over 16 system prompts, ~4.3k of ~4.6k tokens)
SHARED_GROUP = 4
SHARED_FRACTION = 15 / 16


def group_of(position: int, batch: int, interleaved: bool) -> int:
    """The shared prompt of the request at this batch position: side by side (grouped) or dealt round-robin, as
    requests that arrive one at a time in a busy server end up."""
    groups = -(-batch // SHARED_GROUP)
    return position % groups if interleaved else position // SHARED_GROUP


def shared_pages(seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int,
                 interleaved: bool = False) -> list[list[int]]:
    """Each group's prompt pages once (whole pages of SHARED_FRACTION of its shortest request), then each member's
    own pages, laid out in order: only the sharing differs from contiguous, not the scatter."""
    batch = len(seq_lens)
    members: dict[int, list[int]] = {}
    for position in range(batch):
        members.setdefault(group_of(position, batch, interleaved), []).append(position)
    pages: list[list[int]] = [[] for _ in seq_lens]
    next_page = 0
    for group in sorted(members):
        who = members[group]
        shared = int(min(seq_lens[b] for b in who) * SHARED_FRACTION) // page_size
        prompt = list(range(next_page, next_page + shared))
        next_page += shared
        for b in who:
            own = pages_needed(seq_lens[b], page_size) - shared
            pages[b] = prompt + list(range(next_page, next_page + own))
            next_page += own
    _check_fits(next_page, pool_pages)
    return pages


def shared_interleaved_pages(seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int) -> list[list[int]]:
    return shared_pages(seq_lens, page_size, pool_pages, seed, interleaved=True)


PLACEMENTS: dict[str, Callable[[Sequence[int], int, int, int], list[list[int]]]] = {
    "contiguous": contiguous_pages,
    "random": random_pages,
    "churned": churned_pages,
    "shared": shared_pages,
    "shared-interleaved": shared_interleaved_pages,
}
SHARED_PLACEMENTS = ("shared", "shared-interleaved")  # requests read pages other requests read too


def place(placement: str, seq_lens: Sequence[int], page_size: int, pool_pages: int, seed: int = 0) -> PageTable:
    """The batch's page table under a placement from PLACEMENTS."""
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r} (choose from {', '.join(PLACEMENTS)})")
    pages = PLACEMENTS[placement](seq_lens, page_size, pool_pages, seed)
    return build_csr(placement, seq_lens, pages, page_size)


def run_lengths(table: PageTable) -> list[int]:
    """Lengths of the maximal runs of physically consecutive pages inside each request (1 = every page scattered)."""
    runs: list[int] = []
    for request in range(table.batch_size):
        pages = table.pages_of(request)
        run = 1
        for prev, cur in zip(pages, pages[1:]):
            if cur == prev + 1:
                run += 1
            else:
                runs.append(run)
                run = 1
        runs.append(run)
    return runs


def kv_bytes(seq_lens: Sequence[int], num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K + V bytes of the valid tokens in one layer: tokens x 2 (K and V) x kv_heads x head_dim x dtype bytes."""
    return sum(seq_lens) * 2 * num_kv_heads * head_dim * dtype_bytes


def distinct_tokens(table: PageTable) -> int:
    """Valid tokens in distinct pages: what the pool holds for the batch (= sum of lengths unless pages are shared)."""
    tokens: dict[int, int] = {}
    for request in range(table.batch_size):
        pages = table.pages_of(request)
        for i, page in enumerate(pages):
            held = table.page_size if i < len(pages) - 1 else table.last_page_len[request]
            tokens[page] = max(tokens.get(page, 0), held)
    return sum(tokens.values())


def decode_bytes(table: PageTable, num_qo_heads: int, num_kv_heads: int, head_dim: int, kv_dtype_bytes: int,
                 q_dtype_bytes: int = 2) -> dict[str, int]:
    """Bytes one decode step moves in one layer: KV read, q read, o written, page table read (int32). kv_bytes
    counts every request's tokens (what the kernel reads); distinct_kv_bytes each shared page once (what HBM would
    have to deliver if every repeated read of a page hit the L2 cache)."""
    q = table.batch_size * num_qo_heads * head_dim * q_dtype_bytes
    table_bytes = 4 * (len(table.indptr) + len(table.indices) + len(table.last_page_len))
    kv = kv_bytes(table.seq_lens, num_kv_heads, head_dim, kv_dtype_bytes)
    distinct = kv_bytes([distinct_tokens(table)], num_kv_heads, head_dim, kv_dtype_bytes) \
        if table.placement in SHARED_PLACEMENTS else kv
    return {"kv_bytes": kv, "distinct_kv_bytes": distinct, "q_bytes": q, "o_bytes": q,
            "page_table_bytes": table_bytes, "total_bytes": kv + 2 * q + table_bytes}
