"""Which running requests read the same prompt pages, and the two decode levels that read those pages once.

Pure Python over SGLang's radix tree as the scheduler holds it (each request's `last_node`, whose chain of parents up
to the root covers the request's cached prefix; page size 1, so one node value per token). Requests whose chains
share a node share the KV slots of that node and every node above it: a group reads them once (level 0), then each
member its own slots after them (level 1). llmhost.serve.shared_prefix.patches turns the plan into FlashInfer plans.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

MIN_SHARED_TOKENS = 64  # a shorter shared prefix is not worth a group
# Two levels cost a decode step ~0.9 ms more than SGLang's one on an H200 when nothing is shared (chat at c=64: 10.6%
# fewer output tok/s, 3 paired repeats): ~5 more small kernels a layer. That is the time FlashInfer's decode reads
# ~4 GB of KV in (88.6% of 4.8 TB/s), so a step replays the two-level graph only when its groups save more reads.
BREAK_EVEN_BYTES = 4 * 10**9


@dataclasses.dataclass(frozen=True)
class Group:
    shared: int  # prefix tokens every member holds in the same slots
    rows: tuple[int, ...]  # batch rows, two or more


def chain(node: Any) -> list[Any]:
    """The radix nodes from the root's child down to `node` (empty for the root or None)."""
    nodes = []
    while node is not None and getattr(node, "parent", None) is not None:
        nodes.append(node)
        node = node.parent
    return nodes[::-1]


def find_groups(last_nodes: Sequence[Any], seq_lens: Sequence[int],
                min_shared: int = MIN_SHARED_TOKENS) -> list[Group]:
    """Groups of rows sharing at least `min_shared` prefix tokens: each row joins the deepest node of its chain that
    another row's chain holds too. A group's shared length leaves every member at least its last token of its own."""
    chains = [chain(node) for node in last_nodes]
    holders: dict[int, int] = {}
    for nodes in chains:
        for node in nodes:
            holders[id(node)] = holders.get(id(node), 0) + 1
    by_node: dict[int, list] = {}
    for row, nodes in enumerate(chains):
        depth, deepest = 0, None
        for node in nodes:
            if node.value is None:  # evicted: nothing below it is on the GPU
                break
            depth += len(node.value)
            if holders[id(node)] >= 2:
                deepest = (id(node), depth)
        if deepest is None:
            continue
        shared = min(deepest[1], int(seq_lens[row]) - 1)
        if shared >= min_shared:
            entry = by_node.setdefault(deepest[0], [shared, []])
            entry[0] = min(entry[0], shared)
            entry[1].append(row)
    return [Group(shared, tuple(rows)) for shared, rows in by_node.values() if len(rows) >= 2]


@dataclasses.dataclass(frozen=True)
class LevelPlan:
    """Level 0: one entry per group (a row in no group is an entry of its own, all its tokens but the last), padded
    with empty entries to `entries`; level 1: every row from its `start`. `order` lists the rows entry by entry, and
    both levels take their query rows in that order (one gather before them, one scatter after the merge)."""

    qo_indptr: tuple[int, ...]  # level-0 query rows per entry, as offsets into `order`
    kv_lens: tuple[int, ...]  # level-0 tokens per entry (1 for an empty one)
    leads: tuple[int, ...]  # the row whose slots each entry reads (0 for an empty one)
    start: tuple[int, ...]  # per position in `order`: where that row's level-1 tokens begin
    own_lens: tuple[int, ...]  # per position in `order`: that row's level-1 tokens
    order: tuple[int, ...]  # a permutation of the rows


def plan(seq_lens: Sequence[int], groups: Sequence[Group], entries: int | None = None) -> LevelPlan:
    """The two levels of a batch. A row of length 1 (a CUDA graph's padding) reads one slot in each level: its
    output is never used. `entries` pads level 0 to a fixed count (CUDA graphs); None = as many as needed."""
    bs = len(seq_lens)
    start, grouped, items = [0] * bs, [False] * bs, []
    for group in groups:
        items.append((group.rows, group.shared))
        for row in group.rows:
            start[row], grouped[row] = group.shared, True
    for row in range(bs):
        if not grouped[row]:
            start[row] = max(1, int(seq_lens[row]) - 1)
            items.append(((row,), start[row]))
    count = len(items) if entries is None else entries
    if count < len(items):
        raise ValueError(f"{len(items)} level-0 entries do not fit in {count}")
    qo, kv_lens, leads, order = [0], [], [], []
    for rows, shared in items:
        qo.append(qo[-1] + len(rows))
        kv_lens.append(shared)
        leads.append(rows[0])
        order += rows
    pad = count - len(items)
    return LevelPlan(tuple(qo + [qo[-1]] * pad), tuple(kv_lens + [1] * pad), tuple(leads + [0] * pad),
                     tuple(start[r] for r in order), tuple(max(1, int(seq_lens[r]) - start[r]) for r in order),
                     tuple(order))


def saved_tokens(groups: Sequence[Group]) -> int:
    """Prompt tokens per layer a decode step no longer reads: each group's shared tokens once instead of per member."""
    return sum(g.shared * (len(g.rows) - 1) for g in groups)


def pays(groups: Sequence[Group], kv_bytes_per_token: int) -> bool:
    """Whether the KV reads the groups save (every layer's K and V of each token not read again) outweigh what the
    second level's kernels cost a step."""
    return saved_tokens(groups) * kv_bytes_per_token > BREAK_EVEN_BYTES
