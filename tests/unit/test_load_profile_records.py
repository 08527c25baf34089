"""--kernel-profile's record and progress line (llmhost.bench.load_profile) checked whole: a trace that does not
start at zero still times its last pass to the trace's end, a window of extends only has no decode step, the line
says where the time went and leaves out what was not measured, a failed profile keeps its point and says why, the
trigger counts the finished requests across reads of a growing file, and a tiny point waits for one request."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.bench import kernel_profile, load_profile, points
from tests.unit.test_load_profile import DECODE, EXTEND, GEMM, LAYERS, MERGE, FakeServer, forward

POINT = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)


def test_the_last_pass_runs_to_the_traces_end_counted_from_where_the_trace_began():
    """Two decode passes from t = 1,000 µs; the trace's first kernel (a GEMM) starts 110 µs before the first
    attention, so the last pass is the trace's end plus that head."""
    kernels, end = forward([(DECODE, 50.0)], 1_000.0)
    more, end = forward([(DECODE, 50.0)], end)
    kernels += more
    runs = load_profile.layer_runs(kernels)
    last_end = end - 10.0  # the last kernel's end (no idle after it in the trace)
    decode_ms, extend_ms = load_profile.pass_spans(runs, LAYERS, 2, 1_000.0, last_end)
    assert extend_ms is None
    assert decode_ms == pytest.approx((last_end - 1_000.0) / 2 / 1000)


def test_a_window_of_extends_only_has_no_decode_step_and_the_record_names_its_point():
    kernels, _ = forward([(EXTEND, 80.0)], 0.0)
    rec = load_profile.summarize(POINT, kernels, 1, LAYERS, "x.trace.json.gz")
    assert (rec.arm, rec.workload, rec.concurrency, rec.point_id) == ("baseline", "agent", 64, POINT.point_id)
    assert (rec.decode_steps, rec.extend_passes, rec.decode_attention_ms, rec.decode_step_ms) == (0, 1, None, None)
    assert rec.extend_attention_ms == pytest.approx(LAYERS * 80.0 / 1000)
    assert rec.top and rec.top[0].name in (EXTEND, GEMM) and rec.trace_file == "x.trace.json.gz"
    assert load_profile.attention_split(load_profile.layer_runs(kernels), 0) == (0, 0.0, LAYERS * 80.0)


def test_the_line_says_where_the_time_went_and_leaves_out_what_was_not_measured():
    kernels, _ = forward([(DECODE, 50.0), (MERGE, 5.0)], 0.0)
    rec = load_profile.summarize(POINT, kernels, 1, LAYERS, "t")
    line = load_profile.line(rec)
    assert line.startswith("kernel profile baseline agent c=64: 1 forward passes (1 decode, 0 extend), per pass ")
    cats = ", ".join(f"{cat} {ms:.2f}" for cat, ms in rec.by_category.items())
    assert f" — {cats} ms; attention 0.11 ms a decode step; on the GPU's clock " in line and "," in cats
    assert "an extend" not in line
    bare = load_profile.line(rec.__class__(**{**rec.to_dict(), "top": rec.top, "decode_attention_ms": None,
                                              "decode_step_ms": None}))
    assert "a decode step" not in bare and "GPU's clock" not in bare and bare.endswith(f" — {cats} ms")
    failed = load_profile.failed(POINT, "the pass ended first")
    assert load_profile.line(failed) == "kernel profile baseline agent c=64: none — the pass ended first"
    assert (failed.point_id, failed.arm, failed.workload, failed.concurrency, failed.status) == (
        POINT.point_id, "baseline", "agent", 64, "failed")


def test_collect_without_a_trace_or_with_an_unreadable_one_keeps_the_point_and_says_why(tmp_path: Path,
                                                                                     monkeypatch):
    trigger = load_profile.Trigger(FakeServer(), tmp_path / "prof", tmp_path / "c.jsonl", after=1, steps=4)
    (tmp_path / "c.jsonl").write_text("{}\n")
    trigger()
    monkeypatch.setattr(kernel_profile, "wait_trace", lambda out_dir: None)
    rec = load_profile.collect(POINT, trigger, LAYERS)
    assert rec.error == f"SGLang wrote no trace into {tmp_path / 'prof'} within 120 s" and rec.arm == "baseline"
    bad = tmp_path / "prof" / "x.trace.json.gz"
    bad.write_bytes(b"\x1f\x8bnot gzip")
    monkeypatch.setattr(kernel_profile, "wait_trace", lambda out_dir: bad)
    rec = load_profile.collect(POINT, trigger, LAYERS)
    assert rec.status == "failed" and rec.error.startswith("cannot read the trace x.trace.json.gz: ")
    assert rec.point_id == POINT.point_id
    early = load_profile.Trigger(FakeServer(), tmp_path / "e", tmp_path / "none.jsonl", after=5, steps=4)
    assert load_profile.collect(POINT, early, LAYERS).error == ("not profiled: 0 of the 5 requests to wait for "
                                                                "finished (the pass ended first)")


def test_the_trigger_counts_finished_requests_across_reads_of_a_growing_file(tmp_path: Path):
    done = tmp_path / "c.jsonl"
    trigger = load_profile.Trigger(FakeServer(), tmp_path / "p", done, after=99, steps=4)
    assert not trigger.asked and trigger.error == ""
    done.write_text("{}\n{}\n{}\n{")
    assert trigger.finished() == 3  # three whole lines in one read, the fourth still being written
    with open(done, "a") as fh:
        fh.write("}\n{}\n")
    assert trigger.finished() == 5
    with open(done, "a") as fh:
        fh.write("{}\n")
    assert trigger.finished() == 6 and trigger.finished() == 6


def test_a_point_of_a_few_requests_waits_for_one():
    assert load_profile.after_requests(points.make_point("baseline", "chat", "concurrency", 2, None, 2, 1)) == 1


def test_a_failed_profile_has_nothing_measured():
    rec = load_profile.failed(POINT, "why")
    assert (rec.steps, rec.decode_steps, rec.extend_passes, rec.by_category, rec.top, rec.trace_file) == (
        0, 0, 0, {}, (), "")
    assert (rec.kernel_ms, rec.span_ms, rec.decode_attention_ms, rec.extend_attention_ms) == (None,) * 4
    assert rec.error == "why"


def test_the_line_gives_an_extends_attention_and_says_none_without_a_kernel_time():
    kernels, t = forward([(DECODE, 50.0)], 0.0)
    more, _ = forward([(EXTEND, 80.0)], t)
    rec = load_profile.summarize(POINT, kernels + more, 2, LAYERS, "t")
    assert "; attention 0.10 ms a decode step, 0.16 ms an extend; on the GPU's clock " in load_profile.line(rec)
    no_kernels = rec.__class__(**{**rec.to_dict(), "top": rec.top, "kernel_ms": None, "error": "no kernels"})
    assert load_profile.line(no_kernels) == "kernel profile baseline agent c=64: none — no kernels"
