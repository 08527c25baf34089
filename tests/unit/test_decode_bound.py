"""What bounds a decode step: the KV and weight bytes a step reads at the GPU's peak bandwidth against the measured
step, with Qwen3-4B's shape on an H200 (agent c=64: 41 GB of KV, 8.55 ms; 8.04 GB of weights, 1.68 ms), the
reading's three cases, and what the page says when the shape or the GPU's bandwidth is missing."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from fixtures_bench import make_run
from llmhost import stats
from llmhost.bench import model_shape
from llmhost.bench.model_shape import ModelShape
from llmhost.provenance import Gpu
from llmhost.report import decode_bound, decode_bound_page, load, steady, tables

QWEN3_4B = ModelShape(num_layers=36, num_kv_heads=8, head_dim=128, dtype_bytes=2, weight_bytes=8_044_544_000,
                      weight_bytes_fp8=4_411_228_160)
H200_GB_S = 4800.0
# agent c=64 on the H200: ~4.1k-token system prompt + question = 4,222 prompt tokens, 256 output: 4,350 context
AGENT_C64 = {"arm": "baseline", "workload": "agent", "pattern": "concurrency", "load": "c=64", "concurrency": 64,
             "repeats_steady": 2, "prompt_tokens_mean": 4222.0, "output_tokens_mean": 256.0,
             "server_itl_mean_ms": 10.09, "client_itl_mean_ms": 10.6}


def test_qwen3_4b_at_agent_c64_reads_41_gb_of_kv_a_step_and_that_binds_it() -> None:
    assert QWEN3_4B.kv_bytes_per_token(2) == 147_456  # 36 layers x 2 (K, V) x 8 heads x 128 x 2 bytes
    row = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    assert row["context_tokens"] == 4350.0 and row["kv_bytes"] == pytest.approx(41.05e9, rel=1e-3)
    assert row["kv_ms"] == pytest.approx(8.55, abs=0.01) and row["weights_ms"] == pytest.approx(1.68, abs=0.01)
    assert row["roofline_ms"] == pytest.approx(10.23, abs=0.01)
    assert (row["measured_ms"], row["measured_by"]) == (10.09, "SGLang")
    assert row["kv_share_pct"] == pytest.approx(84.7, abs=0.1)
    assert row["reading"] == ("the step (10.1 ms) beat its byte floor (10.2 ms, 8.6 of it KV): L2 served part of "
                              "the shared prefix pages: fewer KV bytes per step (FP8 KV) would do more here than "
                              "scheduling")


def test_sglangs_running_gauge_counts_the_requests_a_step_carries_when_it_was_sampled() -> None:
    # with no gauge the closed loop's c stands in, and says so
    assert decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)["running_by"] == "c"
    row = decode_bound.bound_row({**AGENT_C64, "running_reqs_mean": 48.0}, QWEN3_4B, "auto", H200_GB_S)
    assert (row["running"], row["running_by"]) == (48.0, "SGLang")
    assert row["kv_bytes"] == pytest.approx(48 * 4350 * 147_456) and row["kv_ms"] == pytest.approx(8.55 * 48 / 64,
                                                                                                    abs=0.01)
    assert decode_bound.bound_row({**AGENT_C64, "running_reqs_mean": math.nan}, QWEN3_4B, "auto",
                                  H200_GB_S)["running_by"] == "c"


def test_an_fp8_kv_cache_halves_the_kv_reads_and_the_weights_stay() -> None:
    bf16 = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    fp8 = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "fp8_e4m3", H200_GB_S)
    assert fp8["kv_bytes_per_token"] == 73_728 and fp8["kv_ms"] == pytest.approx(bf16["kv_ms"] / 2)
    assert fp8["weights_ms"] == bf16["weights_ms"]
    assert "FP8 KV" not in fp8["reading"] and "shorter contexts" in fp8["reading"]  # already one byte


def test_weights_the_server_quantizes_to_fp8_are_read_at_their_own_size_and_others_are_not_guessed() -> None:
    bf16 = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    fp8 = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S, "fp8")
    assert fp8["quantization"] == "fp8" and fp8["weight_bytes"] == 4_411_228_160
    assert fp8["weights_ms"] == pytest.approx(0.919, abs=0.001) and fp8["kv_ms"] == bf16["kv_ms"]
    awq = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S, "awq")
    assert awq["weight_bytes"] is None and math.isnan(awq["weights_ms"]) and math.isnan(awq["roofline_ms"])
    assert awq["reading"] == "weights quantized with awq are not counted here"
    older = ModelShape(36, 8, 128, 2, 8_044_544_000)  # a manifest written before the fp8 count
    assert older.weights_read(None) == 8_044_544_000 and older.weights_read("fp8") is None


def test_a_kv_dtype_the_count_does_not_cover_says_so_instead_of_guessing() -> None:
    row = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "fp4_e2m1", H200_GB_S)
    assert row["kv_bytes_per_token"] is None and math.isnan(row["kv_ms"])
    assert row["reading"] == "KV cache dtype fp4_e2m1 is not counted here"


def test_without_sglangs_step_time_the_clients_is_used_and_named() -> None:
    row = decode_bound.bound_row({**AGENT_C64, "server_itl_mean_ms": math.nan}, QWEN3_4B, "auto", H200_GB_S)
    assert (row["measured_ms"], row["measured_by"]) == (10.6, "client")
    none = decode_bound.bound_row({**AGENT_C64, "server_itl_mean_ms": None, "client_itl_mean_ms": math.nan},
                                  QWEN3_4B, "auto", H200_GB_S)
    assert none["measured_by"] == "" and none["reading"] == "no step time to compare"


def test_an_unknown_gpu_keeps_the_bytes_and_gives_no_milliseconds() -> None:
    row = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", None)
    assert row["kv_bytes"] == pytest.approx(41.05e9, rel=1e-3) and math.isnan(row["kv_ms"])
    assert row["reading"] == "no peak bandwidth for this GPU"


def test_a_step_below_its_byte_floor_says_the_l2_served_part_of_it():
    # the H200's defaults at agent c=128: 118 running, floor 18.27 ms (16.59 of KV), measured 16.58 ms
    assert decode_bound.reading(16.59, 1.68, 16.58, kv_bytes_each=2) == (
        "the step (16.6 ms) beat its byte floor (18.3 ms, 16.6 of it KV): L2 served part of the shared prefix "
        "pages: fewer KV bytes per step (FP8 KV) would do more here than scheduling")


@pytest.mark.parametrize("kv_ms,weights_ms,measured_ms,kv_bytes_each,reading", [
    (8.0, 2.0, 10.0, 2, "KV reads 8.0 of 10.0 ms: fewer KV bytes per step (FP8 KV) would do more here than "
                        "scheduling"),  # a step exactly at its floor did not beat it
    (8.0, 2.0, 10.0, 1, "KV reads 8.0 of 10.0 ms: fewer KV bytes per step (shorter contexts or fewer running "
                        "requests) would do more here than scheduling"),  # FP8 KV already
    (1.0, 4.0, 10.0, 2, "weight reads 4.0 of 10.0 ms bound it: a larger batch shares them over more tokens"),
    (4.0, 4.0, 9.0, 2, "weight reads 4.0 of 9.0 ms bound it: a larger batch shares them over more tokens"),
    (0.3, 0.5, 0.9, 2, "weight reads 0.5 of 0.9 ms bound it: a larger batch shares them over more tokens"),
    (8.0, 2.0, 0.0, 2, "no step time to compare"),
])
def test_the_readings_edges(kv_ms, weights_ms, measured_ms, kv_bytes_each, reading) -> None:
    assert decode_bound.reading(kv_ms, weights_ms, measured_ms, kv_bytes_each) == reading


@pytest.mark.parametrize("kv_ms,weights_ms,measured_ms,reading", [
    (8.55, 1.68, 10.62, "KV reads 8.6 of 10.6 ms: fewer KV bytes per step (FP8 KV) would do more here than "
                        "scheduling"),
    (0.3, 1.68, 2.5, "weight reads 1.7 of 2.5 ms bound it: a larger batch shares them over more tokens"),
    (0.3, 1.68, 10.0, "the step is 5.1× its byte floor: compute or overhead, not memory, binds"),
])
def test_the_reading_names_the_kv_reads_the_weight_reads_or_neither(kv_ms, weights_ms, measured_ms,
                                                                    reading) -> None:
    assert decode_bound.reading(kv_ms, weights_ms, measured_ms, kv_bytes_each=2) == reading


def test_the_shape_is_read_from_config_json_and_a_config_it_cannot_count_gives_none_and_why(tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    config = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "torch_dtype": "bfloat16"}
    (model / "config.json").write_text(json.dumps(config))
    assert model_shape.read(model) == (QWEN3_4B, "")
    (model / "config.json").write_text(json.dumps({**config, "num_experts": 128}))
    shape, why = model_shape.read(model)
    assert shape is None and "a mixture of experts or quantized weights" in why
    (model / "config.json").write_text("{}")
    assert model_shape.read(model) == (None, "config.json of Qwen3-4B lacks an attention field "
                                             "('num_attention_heads')")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> load.Run:
    return load.load_run(make_run(tmp_path_factory.mktemp("runs"), n=48, repeats=2, torn=False))


def _with(run: load.Run, **manifest: object) -> load.Run:
    return dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, **manifest))


def _steady_rows(run: load.Run) -> list[dict]:
    groups = tables.build_groups(run)
    return steady.steady_rows(groups, steady.window_groups(run, groups), stats.Slo(500.0, 20.0, 99.0))


def test_every_steady_closed_loop_point_gets_a_row_from_its_own_requests(run: load.Run) -> None:
    rows = _steady_rows(run)
    bound = decode_bound.bound_rows(_with(run, model_shape=QWEN3_4B), rows)
    closed = [r for r in rows if r["pattern"] == "concurrency" and r["repeats_steady"]]
    assert bound and len(bound) == len(closed)
    for b, r in zip(bound, closed):
        assert b["context_tokens"] == r["prompt_tokens_mean"] + r["output_tokens_mean"] / 2
        assert b["kv_cache_dtype"] == decode_bound.kv_dtype(run, r["arm"])
        assert b["kv_ms"] > 0 and b["weights_ms"] == pytest.approx(1.676, abs=1e-3)  # the fixture's H200
        assert b["cached_share_pct"] == pytest.approx(100 * r["cached_tokens_mean"] / r["prompt_tokens_mean"])
    assert any(0 < b["cached_share_pct"] < 100 for b in bound)  # the fixture's replies carry cached_tokens
    assert any(b["kv_cache_dtype"].startswith("fp8") and b["kv_bytes_per_token"] == 73_728 for b in bound)


def test_the_page_says_why_it_cannot_tell_for_an_older_run_or_an_unknown_gpu(run: load.Run) -> None:
    rows = _steady_rows(run)
    older = decode_bound_page.section_html(run, decode_bound.bound_rows(run, rows))
    assert "Not available: this run recorded no model shape (it predates the record" in older
    uncounted = _with(run, model_shape_note="config.json of m: a mixture of experts or quantized weights")
    assert "no model shape (config.json of m: a mixture of experts" in decode_bound_page.section_html(uncounted, [])
    unknown = _with(run, model_shape=QWEN3_4B,
                    provenance=dataclasses.replace(run.manifest.provenance, gpu=Gpu("Mystery X1", 1, None, None)))
    html = decode_bound_page.section_html(unknown, decode_bound.bound_rows(unknown, rows))
    assert "GPU Mystery X1 has no datasheet bandwidth" in html and "<table>" in html
    assert "is still asked for once per request by the decode kernel" in html


def test_each_arm_is_counted_with_its_own_servers_kv_dtype_and_quantization(run: load.Run) -> None:
    rows = [r for r in _steady_rows(run) if r["pattern"] == "concurrency" and r["repeats_steady"]]
    arm = rows[0]["arm"]
    record = next(iter(run.servers.values()))
    served = {arm: dataclasses.replace(record, arm=arm, server_info={"kv_cache_dtype": "bfloat16",
                                                                     "quantization": "fp8"})}
    shaped = dataclasses.replace(_with(run, model_shape=QWEN3_4B), servers=served)
    mine = [b for b in decode_bound.bound_rows(shaped, rows) if b["arm"] == arm]
    assert mine and all(b["kv_cache_dtype"] == "bfloat16" and b["kv_bytes_per_token"] == 147_456 for b in mine)
    assert all(b["quantization"] == "fp8" and b["weight_bytes"] == 4_411_228_160 for b in mine)
    unrecorded = dataclasses.replace(shaped, servers={})  # no server record: the model's dtype, no quantization
    assert (decode_bound.kv_dtype(unrecorded, arm), decode_bound.quantization(unrecorded, arm)) == ("auto", None)
    assert decode_bound.kv_dtype_bytes("float16", QWEN3_4B) == 2 and decode_bound.kv_dtype_bytes("fp4_e2m1",
                                                                                                   QWEN3_4B) is None


def test_the_rows_edges_a_gauge_of_zero_a_server_without_a_kv_dtype_a_step_of_zero(run: load.Run) -> None:
    assert decode_bound.running_requests({**AGENT_C64, "running_reqs_mean": 0.0}) == (64.0, "c")  # never sampled busy
    assert decode_bound.running_requests({**AGENT_C64, "running_reqs_mean": 0.5}) == (0.5, "SGLang")
    row = decode_bound.bound_row({**AGENT_C64, "server_itl_mean_ms": 0.0}, QWEN3_4B, "auto", H200_GB_S)
    assert row["concurrency"] == 64 and math.isnan(row["kv_share_pct"])
    fast = decode_bound.bound_row({**AGENT_C64, "server_itl_mean_ms": 0.5}, QWEN3_4B, "auto", H200_GB_S)
    assert fast["kv_share_pct"] == pytest.approx(100 * fast["kv_ms"] / 0.5)
    arm = next(iter(run.servers))
    silent = dataclasses.replace(run, servers={arm: dataclasses.replace(run.servers[arm], server_info={})})
    assert decode_bound.kv_dtype(silent, arm) == "auto"  # a server that did not say: the model's own dtype


def test_with_most_prompt_tokens_from_the_prefix_cache_the_kv_reads_are_an_upper_bound() -> None:
    # agent c=64: ~4.1k of 4,222 prompt tokens are the shared system prompt, which the L2 cache mostly serves
    row = decode_bound.bound_row({**AGENT_C64, "cached_tokens_mean": 4096.0}, QWEN3_4B, "auto", H200_GB_S)
    assert row["cached_share_pct"] == pytest.approx(97.0, abs=0.1)
    assert row["kv_ms"] == pytest.approx(8.55, abs=0.01)  # the bytes asked for are still counted
    assert row["reading"].startswith("KV reads at most 8.6 of 10.1 ms: 97% of the prompt tokens came from the "
                                     "prefix cache") and "profile the step" in row["reading"]
    assert "would do more here than scheduling" not in row["reading"]
    # under half cached (a multi-turn chat's own history): the bytes are read as before
    chat = decode_bound.bound_row({**AGENT_C64, "cached_tokens_mean": 1000.0}, QWEN3_4B, "auto", H200_GB_S)
    assert chat["reading"].endswith("would do more here than scheduling")
    # not reported: nan, the reading as before
    unknown = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    assert math.isnan(unknown["cached_share_pct"]) and "at most" not in unknown["reading"]
    # far above the floor, overhead binds whatever was cached
    slow = decode_bound.bound_row({**AGENT_C64, "cached_tokens_mean": 4096.0, "server_itl_mean_ms": 30.0}, QWEN3_4B,
                                  "auto", H200_GB_S)
    assert "compute or overhead, not memory, binds" in slow["reading"]


def test_a_loads_kernel_profile_joins_its_row_by_arm_workload_and_concurrency() -> None:
    row = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    profiled = [{"arm": "baseline", "workload": "agent", "load": "c=64", "status": "ok", "decode_attention_ms": 5.6,
                 "span_ms": 9.4},
                {"arm": "baseline", "workload": "chat", "load": "c=64", "status": "ok", "decode_attention_ms": 1.0,
                 "span_ms": 5.0},
                {"arm": "baseline", "workload": "agent", "load": "c=128", "status": "ok", "decode_attention_ms": 9.0,
                 "span_ms": 15.0}]
    [joined] = decode_bound.with_profiles([row], profiled)
    assert (joined["profiled_attention_ms"], joined["profiled_span_ms"]) == (5.6, 9.4)
    assert {k: v for k, v in joined.items() if not k.startswith("profiled_")} == row  # the row itself unchanged
    failed = [{**profiled[0], "status": "failed", "decode_attention_ms": None, "span_ms": None}]
    assert decode_bound.with_profiles([row], failed)[0]["profiled_attention_ms"] is None
    assert decode_bound.with_profiles([row], [])[0]["profiled_span_ms"] is None


def test_a_profile_that_told_its_passes_apart_gives_the_reading() -> None:
    row = decode_bound.bound_row(AGENT_C64, QWEN3_4B, "auto", H200_GB_S)
    # the H200's agent c=64 profile: 304 decode steps of 9.6 ms, 16 extends of 28.5 ms
    profile = {"arm": "baseline", "workload": "agent", "load": "c=64", "status": "ok", "decode_attention_ms": 5.94,
               "span_ms": 10.55, "decode_step_ms": 9.6, "extend_pass_ms": 28.5, "decode_steps": 304,
               "extend_passes": 16, "decode_only_tok_s": 64 * 1000 / 9.6}
    [joined] = decode_bound.with_profiles([row], [profile])
    assert joined["profiled_decode_step_ms"] == 9.6
    assert joined["reading"] == ("profiled: a decode step took 9.6 ms on the GPU's clock, attention 5.9 ms of it "
                                 "(62%); extends took 14% of the profiled passes; decode-only bound 6,667 tok/s: "
                                 "only a faster decode step raises it")
    untold = {**profile, "decode_step_ms": None}  # passes not told apart: the bytes' reading stays
    assert decode_bound.with_profiles([row], [untold])[0]["reading"] == row["reading"]
