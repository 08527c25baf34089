"""Trace metrics and summaries by hand: neighbour pairs counted inside a request only, sharing weighted by
references, time windows that keep the last batch, the graph-replay share and step counts from counters added
over processes, and which batches' length-1 requests count as padding."""
from __future__ import annotations

import numpy as np
import pytest

from llmhost.fi.trace import analysis


def test_adjacent_pages_of_two_requests_are_not_a_contiguous_pair():
    # request 0 on pages 0, 1, 2 and request 1 on 3, 4, 5: 4 neighbour pairs inside requests, all adjacent
    got = analysis.batch_metrics(np.array([0, 3, 6]), np.array([0, 1, 2, 3, 4, 5]))
    assert got["contiguous_pairs"] == pytest.approx(1.0) and got["runs"] == 2 and got["mean_run_len"] == 3.0


def row(t: float, refs: int, sharing: float, requests: int, mode: str = "decode") -> dict:
    return {"t": t, "mode": mode, "refs": refs, "requests": requests, "padding": 0, "mean_kv_len": 4.0,
            "sharing_ratio": sharing, "dedup_ratio": sharing / 2, "mean_run_len": 1.0, "contiguous_pairs": 0.0,
            "truncated": False}


def test_sharing_is_weighted_by_references_and_requests_are_plain_means():
    # 10 references unshared and 30 all shared: 30 / 40 = 0.75 of the references (the mean of ratios is 0.5)
    got = analysis.summarize_rows([row(0.0, 10, 0.0, 2), row(1.0, 30, 1.0, 4)])
    assert got["sharing_ratio"] == pytest.approx(0.75) and got["dedup_ratio"] == pytest.approx(0.375)
    assert got["mean_requests"] == pytest.approx(3.0)
    assert got["p90_requests"] == pytest.approx(3.8)  # 2 + 0.9 x (4 - 2)
    assert got["batches"] == 2


def test_the_last_window_keeps_the_batch_at_the_trace_end():
    rows = [row(0.0, 1, 0.0, 1), row(5.0, 1, 0.0, 1), row(10.0, 1, 0.0, 1)]
    got = analysis.windows(rows, count=2)
    assert [(w["window"], w["batches"]) for w in got] == [(0, 1), (1, 2)]
    assert (got[1]["start_s"], got[1]["end_s"]) == (5.0, 10.0)


def test_counters_add_over_processes_and_give_the_graph_share_and_prefill_steps():
    stats = [{"counters": {"decode_graph": 2, "prefill_eager": 1}},
             {"counters": {"decode_graph": 4, "decode_eager": 2, "prefill_eager": 1, "prefill_graph": 3}}]
    counters = analysis.merge_counters(stats)
    assert counters == {"decode_graph": 6, "prefill_eager": 2, "decode_eager": 2, "prefill_graph": 3}
    proof = analysis.graph_proof(counters, [])
    assert proof["graph_share"] == pytest.approx(6 / 8) and proof["prefill_steps"] == 5


def sample(mode: str, graph: bool, indptr: list[int], indices: list[int], qo_indptr: list[int]) -> analysis.Sample:
    meta = {"t": 0.0, "mode": mode, "bs": len(indptr) - 1, "graph": graph, "page_size": 1}
    return analysis.Sample(meta=meta, indptr=np.array(indptr), indices=np.array(indices),
                           qo_indptr=np.array(qo_indptr), req_pool_indices=np.arange(len(indptr) - 1),
                           last_page_len=np.ones(len(indptr) - 1))


def test_only_graph_decode_batches_drop_length_one_requests_as_padding():
    # requests of 2, 2 and 8 pages plus one of 1 page
    indptr, indices = [0, 2, 4, 12, 13], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 20]
    graph = analysis.sample_row(sample("decode", True, indptr, indices, [0, 1, 2, 3, 4]))
    assert graph["requests"] == 3 and graph["padding"] == 1
    assert graph["mean_kv_len"] == pytest.approx(4.0)  # (2 + 2 + 8) / 3
    eager = analysis.sample_row(sample("decode", False, indptr, indices, [0, 1, 2, 3, 4]))
    assert eager["requests"] == 4 and eager["padding"] == 0


def test_new_tokens_of_a_prefill_batch_are_the_query_rows_it_covers():
    got = analysis.sample_row(sample("prefill", False, [0, 5, 12], list(range(12)), [0, 5, 12]))
    assert got["new_tokens"] == 12
