"""Reading a shared prompt once: the page tables of a two-level (cascade) decode, built from a one-level table.

One-level decode, as SGLang runs it, reads each request's whole page list, so a prompt shared by M requests is asked
for M times (the L2 cache serves part of the repeats). Two levels read it once per group:

- level 0, the prefix: one row per group over the pages all its members share, full pages only;
- level 1, the suffix: one row per request over the rest of its pages (at least one, so no row is empty);
- the two partial attentions are merged by their log-sum-exp (FlashInfer's merge_state), which is exact.

Groups and the shared length come from the page lists alone, as a server's attention backend would find them in its
token-to-KV table: requests whose first page is the same physical page form a group, and the prefix is the longest
run of pages every member has in common. Level 0 runs as a decode over "folded" queries: the M members' query heads
of one group become one row of M x heads query heads, ordered so that each folded head still maps to its KV head
(FlashInfer maps query head j to KV head j // (heads per KV head)); the decode kernel then reads the group's prefix
once for all M members. Folding needs the same M in every group.

Pure Python (no torch): llmhost.fi.two_level_kernels turns the lists into tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmhost.fi import kv_layout


@dataclass(frozen=True, slots=True)
class TwoLevel:
    order: tuple[int, ...]  # batch positions group by group: level 1's rows and the folded queries, in this order
    members: int  # requests per group (M)
    prefix: kv_layout.PageTable  # one row per group: its shared pages, every page full
    suffix: kv_layout.PageTable  # one row per request, in `order`: the pages after its group's prefix

    @property
    def groups(self) -> int:
        return self.prefix.batch_size


class NotFoldable(ValueError):
    """The batch has no shared prefix to read once, or groups of different sizes."""


def groups_by_first_page(table: kv_layout.PageTable) -> list[list[int]]:
    """Batch positions grouped by their first physical page, groups in order of their first member."""
    groups: dict[int, list[int]] = {}
    for b in range(table.batch_size):
        groups.setdefault(table.pages_of(b)[0], []).append(b)
    return list(groups.values())


def shared_pages(table: kv_layout.PageTable, members: list[int]) -> int:
    """Pages every member has in common from the start, leaving each member at least one page of its own."""
    lists = [table.pages_of(b) for b in members]
    common = 0
    for pages in zip(*lists):
        if any(p != pages[0] for p in pages):
            break
        common += 1
    return min(common, *(len(pages) - 1 for pages in lists))


def split(table: kv_layout.PageTable) -> TwoLevel:
    """The two levels of a batch whose requests share prompt pages (NotFoldable when folding cannot apply)."""
    groups = groups_by_first_page(table)
    sizes = {len(g) for g in groups}
    if len(sizes) != 1 or sizes == {1}:
        raise NotFoldable(f"group sizes {sorted(sizes)}: folding needs one size above 1 for every group")
    prefix_pages, prefix_lens, suffix_pages, suffix_lens, order = [], [], [], [], []
    page = table.page_size
    for members in groups:
        shared = shared_pages(table, members)
        if shared == 0:
            raise NotFoldable(f"requests {members} share a first page but no whole page before their last")
        prefix_pages.append(list(table.pages_of(members[0])[:shared]))
        prefix_lens.append(shared * page)
        for b in members:
            order.append(b)
            suffix_pages.append(list(table.pages_of(b)[shared:]))
            suffix_lens.append(table.seq_lens[b] - shared * page)
    return TwoLevel(order=tuple(order), members=sizes.pop(),
                    prefix=kv_layout.build_csr("prefix", prefix_lens, prefix_pages, page),
                    suffix=kv_layout.build_csr("suffix", suffix_lens, suffix_pages, page))


@dataclass(frozen=True, slots=True)
class OneLaunch:
    """Both levels as the entries of one prefill plan, over the query rows taken twice in `order`."""

    qo_indptr: tuple[int, ...]  # query rows per entry: each group's members (level 0), then each request alone
    table: kv_layout.PageTable  # each entry's pages: the groups' prefixes, then the requests' suffixes


def one_launch(levels: TwoLevel) -> OneLaunch:
    """Levels 0 and 1 in one kernel launch: the query gathered in `order` twice over (2 x batch rows), the first
    batch rows attending in groups over their prefix, the last each over its own suffix; merging row i's two partial
    outputs by log-sum-exp (i and batch + i) gives row order[i]'s attention."""
    batch = len(levels.order)
    qo = [g * levels.members for g in range(levels.groups + 1)] + [batch + i for i in range(1, batch + 1)]
    pages = [levels.prefix.pages_of(g) for g in range(levels.groups)]
    pages += [levels.suffix.pages_of(i) for i in range(batch)]
    table = kv_layout.build_csr("one-launch", levels.prefix.seq_lens + levels.suffix.seq_lens, pages,
                                levels.prefix.page_size)
    return OneLaunch(qo_indptr=tuple(qo), table=table)


def fold_rows(levels: TwoLevel, num_qo_heads: int, num_kv_heads: int) -> list[int]:
    """Rows of the flat query [batch x heads] that make up the folded query [groups x (M x heads)], in order.

    Folded head j of a group is member m's head h with j = (h // R) * M * R + m * R + h % R (R = heads per KV
    head), so j // (M * R) == h // R: the folded row keeps every head on its own KV head. Gather the query with
    these rows; scatter the folded output (and log-sum-exp) back with the same rows.
    """
    if num_qo_heads % num_kv_heads:
        raise ValueError(f"{num_qo_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    ratio, m_count = num_qo_heads // num_kv_heads, levels.members
    rows = []
    for g in range(levels.groups):
        members = levels.order[g * m_count:(g + 1) * m_count]
        for j in range(m_count * num_qo_heads):
            kv_head, rest = divmod(j, m_count * ratio)
            m, r = divmod(rest, ratio)
            rows.append(members[m] * num_qo_heads + kv_head * ratio + r)
    return rows


def distinct_bytes(levels: TwoLevel, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K + V bytes the two levels read in one layer: each group's prefix once, then every suffix."""
    tokens = sum(levels.prefix.seq_lens) + sum(levels.suffix.seq_lens)
    return kv_layout.kv_bytes([tokens], num_kv_heads, head_dim, dtype_bytes)
