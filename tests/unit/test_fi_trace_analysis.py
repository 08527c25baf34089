"""llmhost.fi.trace.analysis on hand-made page tables with known sharing and run lengths, and on shards the tracer
wrote."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmhost.fi.trace import analysis, hook
from llmhost.fi.trace.analysis import batch_metrics


def test_two_requests_sharing_a_four_page_prefix_have_known_ratios_and_runs():
    # request 0: pages 10..13 (shared prefix) then 20, 21; request 1: the same prefix then 30, 31
    indptr = np.array([0, 6, 12])
    indices = np.array([10, 11, 12, 13, 20, 21, 10, 11, 12, 13, 30, 31])
    m = batch_metrics(indptr, indices)
    assert m["requests"] == 2 and m["refs"] == 12
    assert m["unique_pages"] == 8 and m["shared_pages"] == 4
    assert m["sharing_ratio"] == pytest.approx(8 / 12)
    assert m["dedup_ratio"] == pytest.approx(1 - 8 / 12)
    assert m["runs"] == 4 and m["mean_run_len"] == pytest.approx(3.0)
    assert m["contiguous_pairs"] == pytest.approx(8 / 10)


def test_scattered_pages_without_sharing_have_run_length_one():
    indptr = np.array([0, 3, 6])
    indices = np.array([5, 9, 2, 7, 1, 3])
    m = batch_metrics(indptr, indices)
    assert m["sharing_ratio"] == 0.0 and m["shared_pages"] == 0
    assert m["runs"] == 6 and m["mean_run_len"] == 1.0 and m["contiguous_pairs"] == 0.0


def test_graph_padding_requests_of_length_one_are_excluded():
    indptr = np.array([0, 4, 8, 9, 10])  # two real requests, two padded slots of length 1
    indices = np.array([1, 2, 3, 4, 100, 101, 102, 103, 0, 0])
    padded = batch_metrics(indptr, indices, drop_padding=True)
    assert padded["requests"] == 2 and padded["padding"] == 2 and padded["sharing_ratio"] == 0.0
    naive = batch_metrics(indptr, indices)
    assert naive["sharing_ratio"] > 0  # the two dummy slots would look like sharing


def test_truncated_indices_drop_only_requests_past_the_copied_range():
    m = batch_metrics(np.array([0, 3, 6]), np.array([1, 2, 3, 4]))
    assert m["requests"] == 1 and m["refs"] == 3


def test_page_size_maps_token_slots_to_pages():
    m = batch_metrics(np.array([0, 4, 8]), np.array([0, 1, 2, 3, 2, 3, 8, 9]), page_size=2)
    # pages: req0 = 0,0,1,1 ; req1 = 1,1,4,4 -> page 1 is shared
    assert m["shared_pages"] == 1


def _recorder(tmp_path, every=1, slots=4):
    settings = hook.TraceSettings(trace_dir=str(tmp_path), every=every, slots=slots, max_bytes=4096)
    return hook.Recorder(settings)


def _meta(mode="decode", graph=True, fast=True):
    return {"mode": mode, "bs": 2, "graph": graph, "fast_plan": fast, "spec": False, "page_size": 1}


def test_recorded_shards_round_trip_into_trace_json_fields(tmp_path):
    rec = _recorder(tmp_path)
    arrays = {"indptr": np.array([0, 6, 12], np.int32), "last_page_len": np.ones(2, np.int32),
              "req_pool_indices": np.array([1, 2], np.int32),
              "indices": np.array([10, 11, 12, 13, 20, 21, 10, 11, 12, 13, 30, 31], np.int32)}
    for _ in range(3):
        rec.observe(_meta(), arrays)
    rec.observe(_meta(graph=False, fast=False), arrays)
    assert rec.drain() == 4
    rec.flush()
    samples, stats = analysis.load_trace(tmp_path)
    result = analysis.analyze(samples, stats)
    assert result["samples"] == 4
    assert result["graph_proof"]["decode_steps_graph"] == 3 and result["graph_proof"]["decode_steps_eager"] == 1
    assert result["summary"]["decode"]["sharing_ratio"] == pytest.approx(8 / 12)
    assert result["windows"] and result["windows"][0]["mode"] == "decode"


def test_full_staging_drops_and_counts_instead_of_blocking(tmp_path):
    rec = _recorder(tmp_path, slots=1)
    arrays = {"indptr": np.array([0, 2], np.int32), "indices": np.array([4, 5], np.int32)}
    rec.observe(_meta(), arrays)  # takes the only buffer; nothing drains it
    rec.observe(_meta(), arrays)
    assert rec.counters["dropped_busy"] == 1 and rec.counters["sampled"] == 1


def test_capture_time_plans_and_unsampled_steps_are_only_counted(tmp_path):
    rec = _recorder(tmp_path, every=2)
    arrays = {"indptr": np.array([0, 2], np.int32), "indices": np.array([4, 5], np.int32)}
    rec.observe(_meta(graph=True, fast=False), arrays)  # capture
    for _ in range(4):
        rec.observe(_meta(), arrays)
    assert rec.counters["decode_capture"] == 1 and rec.counters["decode_graph"] == 4
    assert rec.counters["sampled"] == 2


def test_oversized_sample_is_truncated_and_marked(tmp_path):
    rec = _recorder(tmp_path)  # 4096 bytes = 1024 int32
    arrays = {"indptr": np.array([0, 2000], np.int32), "indices": np.arange(2000, dtype=np.int32)}
    rec.observe(_meta(), arrays)
    buf, layout, wait, meta = rec._pending.get()
    assert meta["truncated"] and layout["indices"][1] == 1024 - 2


def test_empty_trace_dir_is_a_one_line_error(tmp_path):
    with pytest.raises(analysis.TraceFormatError, match="fi_trace.py capture"):
        analysis.load_trace(tmp_path)


def test_a_paused_tracer_calls_straight_through_and_reports_the_state(tmp_path):
    """The "tracer off" arm of the overhead measurement: while PAUSE exists nothing is counted or copied."""
    (tmp_path / "PAUSE").touch()
    rec = hook.Recorder(hook.TraceSettings(trace_dir=str(tmp_path), every=1))

    class Updater:
        def call_begin_forward(self, wrapper, req_pool_indices):
            return "planned"

    traced = hook._wrap(Updater.call_begin_forward, "decode", rec)
    assert traced(Updater(), None, [0]) == "planned" and not rec.counters and rec.stats()["paused"] is True
    (tmp_path / "PAUSE").unlink()
    rec.paused = False  # what the writer thread sets at its next look (every flush)
    assert traced(Updater(), None, [0]) == "planned"
    assert rec.counters["errors"] == 1  # the observer ran (and this fake updater lacks the arrays it reads)


def test_a_forked_child_gets_its_own_writer_so_a_paused_tracer_still_reports(tmp_path):
    import os
    import time

    (tmp_path / "PAUSE").touch()
    rec = hook.Recorder(hook.TraceSettings(trace_dir=str(tmp_path), every=1, flush_s=0.1))
    rec.start()
    child = os.fork()
    if child == 0:  # the child never calls observe(): only the at-fork writer can write its stats
        deadline = time.monotonic() + 10
        while not (tmp_path / f"stats-{os.getpid()}.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(0)
    os.waitpid(child, 0)
    stats = tmp_path / f"stats-{child}.json"
    assert stats.exists() and json.loads(stats.read_text())["paused"] is True
