"""trace.json's numbers by hand, whole: one batch's metrics at their edges (no pages, one-page requests, a truncated
copy, padding), the graph-replay evidence from the counters, and analyze()'s document with every key it writes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmhost.fi.trace import analysis

EMPTY = {"requests": 0, "padding": 0, "refs": 0, "unique_pages": 0, "shared_pages": 0, "sharing_ratio": 0.0,
         "dedup_ratio": 0.0, "runs": 0, "mean_run_len": 0.0, "contiguous_pairs": 0.0, "mean_kv_len": 0.0,
         "max_kv_len": 0}


def test_a_table_without_pages_states_zeros_not_ratios():
    assert analysis.batch_metrics([0, 0, 0], []) == {**EMPTY}
    assert analysis.batch_metrics([0], []) == {**EMPTY}


def test_requests_of_one_page_each_have_no_neighbour_pairs_so_every_pair_is_contiguous():
    got = analysis.batch_metrics([0, 1, 2], [7, 7])
    assert got == {"requests": 2, "padding": 0, "refs": 2, "unique_pages": 1, "shared_pages": 1,
                   "sharing_ratio": 1.0, "dedup_ratio": 0.5, "runs": 2, "mean_run_len": 1.0,
                   "contiguous_pairs": 1.0, "mean_kv_len": 1.0, "max_kv_len": 1}


def test_an_empty_request_is_not_a_request():
    got = analysis.batch_metrics([0, 2, 2, 4], [1, 2, 1, 2])
    assert (got["requests"], got["refs"], got["mean_kv_len"], got["max_kv_len"]) == (2, 4, 2.0, 2)
    assert (got["sharing_ratio"], got["dedup_ratio"], got["runs"], got["contiguous_pairs"]) == (1.0, 0.5, 2, 1.0)


def test_padding_is_dropped_only_from_graph_steps_and_a_truncated_copy_still_drops_its_unknown_requests():
    indptr, indices = [0, 3, 4, 9], [10, 11, 13, 99, 5]  # the third request (5 pages) runs past the copied 5
    graph = analysis.batch_metrics(indptr, indices, drop_padding=True)
    assert (graph["requests"], graph["padding"], graph["refs"], graph["runs"]) == (1, 1, 3, 2)
    assert graph["contiguous_pairs"] == 0.5 and graph["mean_run_len"] == 1.5
    eager = analysis.batch_metrics(indptr, indices)
    assert (eager["requests"], eager["padding"], eager["refs"], eager["max_kv_len"]) == (2, 0, 4, 3)


def test_pages_are_counted_in_pages_of_the_table_s_page_size():
    got = analysis.batch_metrics([0, 2, 4], [0, 16, 0, 17], page_size=16)  # token slots 0,16 / 0,17: pages 0,1
    assert (got["unique_pages"], got["shared_pages"], got["sharing_ratio"], got["contiguous_pairs"]) == \
        (2, 2, 1.0, 1.0)


def test_the_graph_evidence_adds_both_prefill_kinds_and_says_none_without_decode_steps():
    rows = [{"mode": "decode", "kind": "graph"}, {"mode": "decode", "kind": "graph"},
            {"mode": "decode", "kind": "eager"}, {"mode": "prefill", "kind": "graph"}]
    got = analysis.graph_proof({"decode_graph": 30, "decode_eager": 10, "decode_capture": 12, "prefill_eager": 5,
                                "prefill_graph": 2}, rows)
    assert got == {"decode_steps_graph": 30, "decode_steps_eager": 10, "decode_graph_captures": 12,
                   "prefill_steps": 7, "sampled_graph": 2, "sampled_eager": 1, "graph_share": 0.75,
                   "sees_graph_replays": True}
    assert analysis.graph_proof({"prefill_graph": 3}, []) == {
        "decode_steps_graph": 0, "decode_steps_eager": 0, "decode_graph_captures": 0, "prefill_steps": 3,
        "sampled_graph": 0, "sampled_eager": 0, "graph_share": None, "sees_graph_replays": False}
    assert analysis.graph_proof({"decode_eager": 4}, [])["graph_share"] == 0.0


def test_thinning_keeps_a_trace_at_the_limit_whole_and_the_ends_of_a_longer_one():
    rows = [{"t": float(i)} for i in range(11)]
    assert analysis.thin(rows, 11) is rows
    thinned = analysis.thin(rows, 10)
    assert len(thinned) == 10 and thinned[0] is rows[0] and thinned[-1] is rows[-1]
    assert len(analysis.thin([{"t": 0.0}] * (analysis.MAX_BATCH_ROWS + 1))) == analysis.MAX_BATCH_ROWS


def sample(t: float, mode: str, graph: bool, indptr: list[int], indices: list[int]) -> analysis.Sample:
    arr = np.asarray
    return analysis.Sample(meta={"t": t, "mode": mode, "graph": graph, "kind": "graph" if graph else "eager",
                                 "bs": len(indptr) - 1},
                           indptr=arr(indptr), indices=arr(indices), qo_indptr=arr([0, 1]),
                           req_pool_indices=arr([0]), last_page_len=arr([1]))


def test_analyze_writes_every_part_of_the_document():
    samples = [sample(10.0, "prefill", False, [0, 2], [1, 2]), sample(12.0, "decode", True, [0, 3, 4], [1, 2, 3, 9]),
               sample(14.5, "decode", False, [0, 3], [1, 2, 3])]
    stats = [{"counters": {"decode_graph": 3}, "errors": [f"e{i}" for i in range(8)], "settings": {"every": 4}},
             {"counters": {"decode_graph": 1, "decode_eager": 2}, "errors": ["f0", "f1", "f2"]}]
    doc = analysis.analyze(samples, stats, n_windows=2)
    assert set(doc) == {"samples", "counters", "processes", "errors", "settings", "duration_s", "graph_proof",
                        "summary", "windows", "batches"}
    assert (doc["samples"], doc["processes"], doc["settings"], doc["duration_s"]) == (3, 2, {"every": 4}, 4.5)
    assert doc["counters"] == {"decode_graph": 4, "decode_eager": 2}
    assert doc["errors"] == [f"e{i}" for i in range(8)] + ["f0", "f1"]  # the first ten
    assert doc["graph_proof"]["decode_steps_graph"] == 4 and doc["graph_proof"]["sampled_graph"] == 1
    assert doc["summary"]["decode"]["batches"] == 2 and doc["summary"]["prefill"]["batches"] == 1
    assert doc["summary"]["decode"]["mean_padding"] == 0.5  # the graph step's one-page request
    assert [(w["window"], w["mode"]) for w in doc["windows"]] == [(0, "decode"), (0, "prefill"), (1, "decode")]
    assert [b["t"] for b in doc["batches"]] == [10.0, 12.0, 14.5] and doc["batches"][0]["new_tokens"] == 1


def test_analyze_of_an_empty_trace_is_zeros():
    doc = analysis.analyze([], [])
    assert (doc["samples"], doc["processes"], doc["errors"], doc["settings"]) == (0, 0, [], None)
    assert doc["duration_s"] == 0.0
    assert doc["summary"] == {"decode": {"batches": 0}, "prefill": {"batches": 0}}
    assert doc["windows"] == [] and doc["batches"] == []


def test_summaries_weight_sharing_by_references_and_fall_back_to_equal_weights():
    rows = [{"requests": 2, "padding": 0, "refs": 30, "mean_kv_len": 15.0, "sharing_ratio": 1.0, "dedup_ratio": 0.5,
             "mean_run_len": 3.0, "contiguous_pairs": 1.0, "truncated": True},
            {"requests": 4, "padding": 2, "refs": 10, "mean_kv_len": 2.5, "sharing_ratio": 0.0, "dedup_ratio": 0.0,
             "mean_run_len": 1.0, "contiguous_pairs": 0.0, "truncated": False}]
    got = analysis.summarize_rows(rows)
    assert got == {"batches": 2, "mean_requests": 3.0, "p90_requests": pytest.approx(3.8), "mean_padding": 1.0,
                   "mean_kv_len": 8.75, "sharing_ratio": 0.75, "dedup_ratio": 0.375, "mean_run_len": 2.5,
                   "contiguous_pairs": 0.75, "truncated": 1}
    empty = [{**r, "refs": 0} for r in rows]
    assert analysis.summarize_rows(empty)["sharing_ratio"] == 0.5


def test_a_sample_s_row_reads_its_page_size_and_drops_padding_only_where_the_step_says_graph():
    meta = {"t": 3.0, "mode": "decode", "bs": 2, "page_size": 16, "truncated": True}  # no graph, no kind: eager
    row = analysis.sample_row(analysis.Sample(meta, np.array([0, 2, 3]), np.array([0, 16, 32]), np.array([0, 1, 2]),
                                              np.array([0, 1]), np.array([1, 1])))
    keys = ("t", "mode", "kind", "bs", "truncated", "requests", "padding", "unique_pages", "runs")
    assert {k: row[k] for k in keys} == {"t": 3.0, "mode": "decode", "kind": "eager", "bs": 2, "truncated": True,
                                         "requests": 2, "padding": 0, "unique_pages": 3, "runs": 2}  # pages 0 1, 2
    assert row["new_tokens"] == 2
    plain = analysis.sample_row(analysis.Sample({"t": 4.0, "mode": "decode", "bs": 1, "graph": True, "kind": "graph"},
                                                np.array([0, 2, 3]), np.array([0, 1, 7]), np.array([0]),
                                                np.array([0]), np.array([1])))
    assert (plain["kind"], plain["truncated"], plain["requests"], plain["padding"], plain["runs"]) == \
        ("graph", False, 1, 1, 1)  # page size 1: slots 0 and 1 are one run
    assert "new_tokens" not in plain


def test_the_graph_evidence_at_its_edges():
    assert analysis.graph_proof({"prefill_eager": 2}, [])["prefill_steps"] == 2
    assert analysis.graph_proof({"decode_graph": 2, "decode_eager": 2}, [])["graph_share"] == 0.5
    assert analysis.graph_proof({"decode_graph": 1}, [])["sees_graph_replays"] is True


def _shard(path, times: list[float]) -> None:
    """A shard as the hook writes it: one request of two pages per sample."""
    n = len(times)
    arrays = {"indptr": [np.array([0, 2])] * n, "last_page_len": [np.array([1])] * n,
              "req_pool_indices": [np.array([0])] * n, "qo_indptr": [np.array([0, 1])] * n,
              "indices": [np.array([5, 6])] * n}
    metas = [{"t": t, "mode": "decode", "bs": 1} for t in times]
    data = {"meta": np.frombuffer(json.dumps(metas).encode(), np.uint8)}
    for name, parts in arrays.items():
        data[name] = np.concatenate(parts)
        data[f"{name}_off"] = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
    np.savez(path, **data)


def test_a_trace_is_every_shard_s_samples_in_time_order_with_or_without_stats(tmp_path):
    _shard(tmp_path / "shard-1-0.npz", [2.0, 5.0])
    _shard(tmp_path / "shard-2-0.npz", [1.0, 3.0])
    samples, stats = analysis.load_trace(tmp_path)
    assert [s.meta["t"] for s in samples] == [1.0, 2.0, 3.0, 5.0] and stats == []
    only_stats = tmp_path / "stats-only"
    only_stats.mkdir()
    (only_stats / "stats-7.json").write_text('{"counters": {"decode_graph": 1}}')
    assert analysis.load_trace(only_stats) == ([], [{"counters": {"decode_graph": 1}}])


def test_a_damaged_file_of_a_trace_is_named_with_its_reason(tmp_path):
    (tmp_path / "stats-1.json").write_text("{not json")
    with pytest.raises(analysis.TraceFormatError, match=r"stats-1.json is damaged \(Expecting property name"):
        analysis.load_trace(tmp_path)
    (tmp_path / "stats-1.json").write_text("{}")
    (tmp_path / "shard-1-0.npz").write_bytes(b"not a zip")
    with pytest.raises(analysis.TraceFormatError, match=r"shard-1-0.npz is damaged \(.+\) — move it aside"):
        analysis.load_trace(tmp_path)
