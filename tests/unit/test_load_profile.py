"""--kernel-profile's pieces (llmhost.bench.load_profile): which points get a profile pass, the trigger that asks
SGLang to profile once a third of the pass's requests have finished, and a trace's passes told apart into decode
steps and extends by their attention kernels (CPU; the run end to end is in tests/integration)."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llmhost.bench import kernel_profile, load_profile, points
from llmhost.bench.workloads import REGISTRY as WORKLOADS

LAYERS = 2
# names as SGLang 0.5.17 runs them on an H200 (decode: the tensor-core paged kernel without a mask, and the split-KV
# merge); an extend inside the piecewise prefill graphs: the same kernel with a causal mask; on the ragged path:
# the ragged kernel over the new tokens, the paged one over the cached prefix, their merge
DECODE = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u>>"
MERGE = "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16>"
EXTEND = DECODE.replace("MaskMode)0", "MaskMode)1")
RAGGED = "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 16u>>"
# an extend as SGLang 0.5.17 ran it on an H200 (captured): FlashInfer's SM90 ragged kernel over the new tokens, a
# fill, the paged kernel (128-row tiles, no mask) over the cached prefix, and the merge of the two
SM90_RAGGED = ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<"
               "RaggedParams::AdditionalParams, "
               "flashinfer::AttentionKernelTraits<true, 128, 128, 128, 128, 2, cutlass::bfloat16_t>, true>>")
FILL = ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, "
        "std::array<char*, 1ul> >")
PREFIX = ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, "
          "128u, 2u>>")
MERGE_STATE = "void flashinfer::MergeStateKernel<8u, __nv_bfloat16, __nv_bfloat16>(__nv_bfloat16*, float*)"
GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"


def forward(attention: list[tuple[str, float]], t: float) -> tuple[list[tuple[str, float, float]], float]:
    """One pass of LAYERS layers: a 100 µs GEMM, then the attention kernels (and what runs between them); 10 µs
    idle after each kernel."""
    out = []
    for _ in range(LAYERS):
        for name, us in [(GEMM, 100.0), *attention]:
            out.append((name, t, us))
            t += us + 10.0
    return out, t


def test_only_the_first_repeat_of_a_closed_loop_load_is_profiled():
    plan = [points.make_point("baseline", "agent", "concurrency", 64, None, 384, r) for r in (1, 2)]
    plan += [points.make_point("baseline", "chat", "poisson", None, 4.0, 200, 1)]
    assert [p.point_id for p in load_profile.passes(plan)] == ["baseline.agent.concurrency.c64.r1.profile"]
    assert not load_profile.is_profiled(load_profile.profile_pass(plan[0]))  # a profile pass is not profiled again
    assert load_profile.after_requests(plan[0]) == plan[0].num_prompts // 3


def test_the_window_spans_a_whole_request_so_that_a_closed_loop_wave_of_extends_falls_inside():
    agent = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    output = WORKLOADS["agent"].output_len
    assert load_profile.profile_steps(agent) == max(load_profile.MIN_STEPS, -(-5 * output // 4)) >= output


def test_passes_are_split_into_decode_steps_and_extends_by_their_attention_kernels():
    kernels, t = [], 0.0
    for attention in ([(DECODE, 50.0), (MERGE, 5.0)], [(EXTEND, 200.0)], [(DECODE, 50.0), (MERGE, 5.0)],
                      [(RAGGED, 150.0), (DECODE, 40.0), (MERGE, 5.0)]):  # decode, extend, decode, ragged extend
        more, t = forward(attention, t)
        kernels += more
    # the order of the kernels in the trace, not in the list, decides the layer each belongs to
    extends, decode_us, extend_us = load_profile.attention_split(load_profile.layer_runs(kernels[::-1]), LAYERS)
    assert extends == 2
    assert extend_us == LAYERS * (200.0 + 150.0 + 40.0 + 5.0)  # the ragged path's prefix part and merge with it
    assert decode_us == LAYERS * (55.0 + 55.0)
    point = load_profile.profile_pass(points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1))
    rec = load_profile.summarize(point, kernels, 4, LAYERS, "t.trace.json.gz")
    assert (rec.status, rec.steps, rec.decode_steps, rec.extend_passes) == ("ok", 4, 2, 2)
    assert rec.decode_attention_ms == pytest.approx(LAYERS * 110.0 / 2 / 1000)
    assert rec.extend_attention_ms == pytest.approx(LAYERS * 395.0 / 2 / 1000)
    assert rec.by_category["GEMM"] == pytest.approx(LAYERS * 100.0 / 1000)  # per pass, both kinds
    assert rec.span_ms > rec.kernel_ms and (rec.point_id, rec.concurrency) == (point.point_id, 64)
    # each pass on the GPU's clock, idle included: GEMM 100 + 10 idle, then each attention kernel + 10, per layer
    assert rec.decode_step_ms == pytest.approx(LAYERS * (110 + 60 + 15) / 1000)
    # the last pass ends with the trace's last kernel (its trailing 10 µs of idle is not in the trace)
    assert rec.extend_pass_ms == pytest.approx((LAYERS * (110 + 210) + LAYERS * (110 + 160 + 50 + 15) - 10) / 2 / 1000)
    line = load_profile.line(rec)
    assert "4 forward passes (2 decode, 2 extend)" in line and "attention 0.11 ms a decode step" in line
    assert "on the GPU's clock 0.37 ms a decode step, 0.65 ms an extend" in line


def test_passes_cannot_be_told_apart_when_a_layers_attention_is_split():
    kernels, t = forward([(DECODE, 50.0)], 0.0)
    kernels += [(GEMM, t, 100.0), (DECODE, t + 110.0, 50.0)]  # a third attention run in a pass of two layers
    runs = load_profile.layer_runs(kernels)
    assert len(runs) == 3 and load_profile.pass_spans(runs, LAYERS, 1, 0.0, t + 160.0) == (None, None)
    assert load_profile.pass_spans(runs[:2], LAYERS, 1, 0.0, t - 10.0) == (pytest.approx((t - 10.0) / 1000), None)


def test_an_extend_as_captured_on_an_h200_counts_its_prefix_part_and_merge_but_not_the_fill_between():
    kernels, t = forward([(DECODE, 50.0), (MERGE, 5.0)], 0.0)
    more, t = forward([(SM90_RAGGED, 50.0), (FILL, 7.0), (PREFIX, 600.0), (MERGE_STATE, 15.0)], t)
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    rec = load_profile.summarize(point, kernels + more, 2, LAYERS, "t")
    assert (rec.decode_steps, rec.extend_passes) == (1, 1)
    assert rec.extend_attention_ms == pytest.approx(LAYERS * (50.0 + 600.0 + 15.0) / 1000)
    assert rec.decode_attention_ms == pytest.approx(LAYERS * 55.0 / 1000)
    assert kernel_profile.category(MERGE_STATE) == "attention" and kernel_profile.category(FILL) == "other"


def test_sglangs_triton_backend_is_told_apart_by_its_extend_kernel():
    kernels, t = forward([("_fwd_grouped_kernel_stage1", 40.0), ("_fwd_kernel_stage2", 5.0)], 0.0)  # decode
    more, t = forward([("_fwd_kernel", 700.0)], t)  # an extend (seen on an H200, --prefill-attention-backend triton)
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    rec = load_profile.summarize(point, kernels + more, 2, LAYERS, "t")
    assert (rec.decode_steps, rec.extend_passes) == (1, 1) and rec.extend_pass_ms is not None
    assert rec.extend_attention_ms == pytest.approx(LAYERS * 0.7)
    assert rec.decode_attention_ms == pytest.approx(LAYERS * 0.045)


def test_a_trace_of_decode_steps_only_has_no_extend_attention():
    kernels, _ = forward([(DECODE, 50.0)], 0.0)
    point = points.make_point("baseline", "agent", "concurrency", 8, None, 48, 1)
    rec = load_profile.summarize(point, kernels, 1, LAYERS, "t")
    assert (rec.decode_steps, rec.extend_passes, rec.extend_attention_ms) == (1, 0, None)
    assert load_profile.summarize(point, [], 1, LAYERS, "t").error.startswith("the trace t holds no GPU kernel")


@dataclass
class Reply:
    status: int
    text: str


@dataclass
class FakeServer:
    """What the trigger asks of the server: POST /start_profile, answered 200 as SGLang does, or refused."""

    status: int = 200
    asked: list[dict] = field(default_factory=list)

    def post(self, path: str, body: dict) -> Reply:
        self.asked.append({"path": path, **body})
        return Reply(self.status, "Start profiling.\n" if self.status == 200 else "profiler busy")


def test_the_trigger_asks_once_when_enough_requests_have_finished_and_counts_only_whole_lines(tmp_path: Path):
    completed, server = tmp_path / "p.completed.jsonl", FakeServer()
    trigger = load_profile.Trigger(server, tmp_path / "prof", completed, after=3, steps=7)
    assert trigger() == "" and not trigger.asked  # no file yet: nothing finished
    completed.write_text('{"a": 1}\n{"a": 2}\n{"a": 3')  # the third line is still being written
    assert trigger() == "" and not trigger.asked and trigger.finished() == 2
    with open(completed, "a") as fh:
        fh.write('}\n{"a": 4}\n')
    assert trigger() == "" and trigger.asked and trigger.error == ""
    trigger()
    assert [a["num_steps"] for a in server.asked] == [7]  # once
    assert server.asked[0]["path"] == "/start_profile" and server.asked[0]["output_dir"].endswith("prof")
    assert server.asked[0]["profile_prefix"] == "load" and server.asked[0]["activities"] == ["GPU"]


def test_collect_says_why_there_is_no_profile(tmp_path: Path):
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    early = load_profile.Trigger(FakeServer(), tmp_path / "a", tmp_path / "none.jsonl", after=128, steps=320)
    rec = load_profile.collect(point, early, 36, pass_error="load generator exceeded 300s")
    assert rec.status == "failed" and rec.error == ("not profiled: 0 of the 128 requests to wait for finished (load "
                                                    "generator exceeded 300s)")
    refused = load_profile.Trigger(FakeServer(status=400), tmp_path / "b", tmp_path / "c.jsonl", after=1, steps=320)
    (tmp_path / "c.jsonl").write_text("{}\n")
    refused()
    assert load_profile.collect(point, refused, 36).error.startswith("/start_profile answered 400: profiler busy")


def test_collect_reads_the_trace_sglang_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kernel_profile, "TRACE_WAIT_S", 5.0)
    point = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    trigger = load_profile.Trigger(FakeServer(), tmp_path / "prof", tmp_path / "c.jsonl", after=1, steps=2)
    (tmp_path / "c.jsonl").write_text("{}\n")
    trigger()
    kernels, t = forward([(DECODE, 50.0)], 0.0)
    more, _ = forward([(EXTEND, 80.0)], t)
    events = [{"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": d} for n, ts, d in kernels + more]
    (tmp_path / "prof" / "x-1-TP-0.trace.json.gz").write_bytes(gzip.compress(json.dumps(
        {"traceEvents": events}).encode()))
    rec = load_profile.collect(point, trigger, LAYERS)
    assert (rec.status, rec.decode_steps, rec.extend_passes, rec.trace_file) == ("ok", 1, 1, "x-1-TP-0.trace.json.gz")
