"""Reading SGLang's profiler trace: kernels by category per forward pass, the idle between them, what is said."""
import dataclasses
import gzip
import json

import pytest

from llmhost.bench import kernel_profile


@pytest.mark.parametrize("name, expected", [
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "GEMM"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u>", "attention"),
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", "norm"),  # not attention
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>", "activation"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u>", "rope"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>", "sampling"),
    ("store_kvcache_kernel", "copy / KV write"),
    # as an H200 trace of SGLang 0.5.17 names them: split-K GEMMs and their reduce, split-KV attention's merge
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", "GEMM"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>", "GEMM"),
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16>", "attention"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>", "norm"),
    ("void (anonymous namespace)::fused_qknorm_warp<128l, true, __nv_bfloat16>", "norm"),
    ("void (anonymous namespace)::fused_rope_kernel<true, 128l, true, __nv_bfloat16>", "rope"),
    ("void (anonymous namespace)::store_kvcache<2048l, 2048l, 4, true, long>", "copy / KV write"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "other"),
    # torch.compile's kernels at batch 1, as an H200 trace of SGLang 0.5.17 with --enable-torch-compile names them:
    # a matrix-vector product fused with its neighbours is a GEMM, whatever else it fused (norm, SiLU, casts)
    ("triton_red_fused__to_copy_add_mean_mm_mul_pow_rsqrt_t_1", "GEMM"),
    ("triton_red_fused_mm_mul_silu_slice_t_2", "GEMM"),
    ("triton_red_fused_mm_t_0", "GEMM"),
    ("triton_red_fused_copy_copy__mm_permute_0", "GEMM"),
    ("triton_tem_fused_addmm_3", "GEMM"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm"),  # an RMSNorm on its own: mean + rsqrt
    ("triton_red_fused__to_copy_add_mean_pow_0", "norm"),  # residual add + variance: an RMSNorm's first half
    ("triton_poi_fused_summary_mmx_0", "other"),  # mm only as a whole op name, not inside another word
])
def test_kernels_fall_in_the_first_category_their_name_matches(name, expected):
    assert kernel_profile.category(name) == expected


def trace(tmp_path, events, gz=True):
    path = tmp_path / ("t.trace.json.gz" if gz else "t.json")
    raw = json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def kernel(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur}


def test_two_forward_passes_are_summed_per_pass_and_the_idle_between_kernels_is_the_span_left(tmp_path):
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 50},  # not a kernel
              {"ph": "f", "cat": "ac2g", "name": "flow", "ts": 1}]
    t = 100.0
    long_name = "nvjet_" + "x" * 200
    for _ in range(2):  # each pass: 1,200 µs of GEMM, 200 of attention, 300 of norm, then 700 µs idle
        for name, dur in (("RMSNormKernel", 300), ("BatchDecodeKernel", 200), (long_name, 500), ("nvjet_a", 700)):
            events.append(kernel(name, t, dur))
            t += dur
        t += 700
    kernels = kernel_profile.read_kernels(trace(tmp_path, events))
    assert len(kernels) == 8
    rec = kernel_profile.summarize("baseline", kernels, 2, "t.trace.json.gz")
    assert rec.status == "ok" and rec.kernel_ms == pytest.approx(1.7) and rec.trace_file == "t.trace.json.gz"
    assert rec.span_ms == pytest.approx((2 * 1700 + 700) / 2 / 1000)  # the last pass's idle is after its last kernel
    assert rec.by_category == pytest.approx({"GEMM": 1.2, "attention": 0.2, "norm": 0.3})
    assert list(rec.by_category) == ["GEMM", "norm", "attention"]  # largest first: not as first seen, nor by name
    assert [(k.name, k.ms_per_step, k.calls_per_step) for k in rec.top[:2]] == [("nvjet_a", 0.7, 1.0),
                                                                               (long_name[:120], 0.5, 1.0)]
    said = kernel_profile.lines(rec, floor_ms=0.9)
    assert said[0] == ("baseline: GPU kernels per forward pass (2 profiled by SGLang): 1.70 ms of kernels in a "
                       "2.05 ms span (0.35 ms idle between them) — GEMM 1.20, norm 0.30, attention 0.20 ms; the "
                       "GEMMs take 1.20 ms against the 0.90 ms weight-read floor (75% of peak bandwidth)")
    assert len(said) == 1 + 4 and "nvjet_a" in said[1]
    assert kernel_profile.lines(rec, floor_ms=None)[0].endswith("attention 0.20 ms")  # no datasheet: not guessed
    torn = dataclasses.replace(rec, span_ms=None, error="no span")
    assert kernel_profile.lines(torn, 0.9) == ["baseline: no kernel profile — no span"]


def test_a_plain_json_trace_reads_too_and_a_broken_one_says_so_in_a_line(tmp_path):
    nameless = {k: v for k, v in kernel("", 9, 1).items() if k != "name"}
    assert kernel_profile.read_kernels(trace(tmp_path, [kernel("k", 0, 5), nameless], gz=False)) == [
        ("k", 0.0, 5.0), ("", 9.0, 1.0)]
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(b"\x1f\x8bnot gzip")
    with pytest.raises(kernel_profile.TraceError, match="cannot read the trace bad.trace.json.gz"):
        kernel_profile.read_kernels(bad)
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(kernel_profile.TraceError, match="no traceEvents list"):
        kernel_profile.read_kernels(tmp_path / "list.json")
    empty = kernel_profile.summarize("baseline", [], 100, "x.trace.json.gz")
    assert empty.status == "failed" and "holds no GPU kernel" in empty.error and empty.steps == 0
    assert kernel_profile.lines(empty, 1.0) == [f"baseline: no kernel profile — {empty.error}"]


class FakeServer:
    def __init__(self, status, text=""):
        self.status, self.text, self.sent = status, text, []

    def post(self, path, payload=None, timeout=30.0):
        self.sent.append((path, payload))
        return type("Reply", (), {"status": self.status, "text": self.text})()


def test_the_profile_request_asks_for_gpu_kernels_only_and_a_refusal_is_said_in_a_line(tmp_path):
    ok = FakeServer(200, "Start profiling.\n")
    assert kernel_profile.start(ok, tmp_path / "p", 100) == ""
    (path, body), = ok.sent
    assert path == "/start_profile" and body == {
        "output_dir": str((tmp_path / "p").resolve()), "num_steps": 100, "activities": ["GPU"],
        "profile_prefix": "single-stream", "with_stack": False, "record_shapes": False}
    assert (tmp_path / "p").is_dir()  # made before the server writes into it
    assert kernel_profile.start(FakeServer(400, '{"detail": "profiling in progress"}'), tmp_path / "q", 100) == \
        '/start_profile answered 400: {"detail": "profiling in progress"}'
    assert kernel_profile.start(FakeServer(0), tmp_path / "r", 100) == "/start_profile answered 0: no body"


def test_the_trace_is_taken_once_its_size_holds_still_and_not_before(tmp_path, monkeypatch):
    sizes = iter([10, 20, 20])
    path = tmp_path / "single-stream-1-TP-0.trace.json.gz"

    def sleep(_):  # the server goes on writing between looks
        path.write_bytes(b"x" * next(sizes))

    monkeypatch.setattr(kernel_profile.time, "sleep", sleep)
    path.write_bytes(b"x" * 5)
    assert kernel_profile.wait_trace(tmp_path, timeout_s=60) == path and path.stat().st_size == 20
    monkeypatch.setattr(kernel_profile.time, "sleep", lambda _: None)
    assert kernel_profile.wait_trace(tmp_path / "nothing", timeout_s=0.05) is None


def test_a_profile_that_cannot_be_had_is_recorded_with_its_reason_and_never_fails_the_arm(tmp_path, monkeypatch):
    from llmhost.bench import single_stream, store

    run = store.RunStore.create(tmp_path)
    monkeypatch.setattr(single_stream, "wait_idle", lambda server: True)
    monkeypatch.setattr(kernel_profile, "start", lambda server, out_dir, steps: "")
    monkeypatch.setattr(kernel_profile, "wait_trace", lambda out_dir: None)
    sent = []
    ok = lambda: sent.append(1) or {"ok": True}  # noqa: E731
    rec = single_stream.profile_kernels(None, ok, run, "baseline")
    assert sent == [1] and rec.status == "failed" and rec.error.startswith("SGLang wrote no trace into ")
    rec = single_stream.profile_kernels(None, lambda: {"ok": False, "error": "HTTP 500"}, run, "baseline")
    assert rec.error == "the profiled request failed: HTTP 500"
    monkeypatch.setattr(kernel_profile, "start", lambda server, out_dir, steps: "/start_profile answered 404: x")
    assert single_stream.profile_kernels(None, ok, run, "baseline").error == "/start_profile answered 404: x"
    assert sent == [1]  # refused: no request sent for nothing
    monkeypatch.setattr(single_stream, "wait_idle", lambda server: False)
    assert "did not go idle" in single_stream.profile_kernels(None, ok, run, "baseline").error


def test_gemms_faster_than_the_weights_can_be_read_are_said_to_be_misnamed_not_given_a_share_over_100():
    # an H200 torch.compile trace before Inductor's fused GEMMs were named: 0.03 ms of "GEMM" against 1.68 ms
    assert kernel_profile.reach(0.03, 1.68) == ("; the GEMM kernels take 0.03 ms, less than the 1.68 ms weight-read "
                                                 "floor: most matrix multiplies ran in kernels not named as GEMMs "
                                                 "(see the top kernels)")
    assert kernel_profile.reach(2.41, 1.68).endswith("(70% of peak bandwidth)")
    assert kernel_profile.reach(None, 1.68) == kernel_profile.reach(2.0, None) == ""
