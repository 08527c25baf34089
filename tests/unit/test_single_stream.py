"""run_bench.py --single-stream's pure parts: SGLang's Decode line parsed, the weight-read floor, the breakdown."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from llmhost.bench import decode_log, floor, restart_runs, single_stream, stream_breakdown
from llmhost.bench.stream_records import StreamArmRecord, StreamRequestRecord
from llmhost.fi import gpu_specs
from llmhost.fi.shapes import ShapeError

CAPTURED_LOG = Path(__file__).resolve().parents[1] / "captures" / "server.log"
STAMP = "[2026-12-01 10:00:00] "
PLAIN = STAMP + ("Decode batch, #running-req: 1, #token: 234, token usage: 0.00, cuda graph: True, "
                 "gen throughput (token/s): 259.67, #queue-req: 0")
MFU = (", est. decode TFLOPS/s (per GPU): 2.09, est. read BW (GB/s per GPU): 2088.91, "
       "est. write BW (GB/s per GPU): 0.04")
PREFILL = STAMP + ("Prefill batch, #new-seq: 1, #new-token: 14, #cached-token: 0, token usage: 0.00, #running-req: 0, "
                   "#queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 12.93")
QWEN3_4B = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
            "torch_dtype": "bfloat16"}


def test_a_plain_decode_line_gives_the_step_time_and_no_instrument_figures():
    line = decode_log.parse(PLAIN)
    assert (line.running, line.graph, line.gen_tok_s, line.read_gb_s, line.occupancy_pct) == \
        (1, True, 259.67, None, None)
    assert line.step_ms == pytest.approx(3.851, abs=0.001)  # the H200's 3.85 ms per token at one request


def test_both_suffixes_are_read_and_a_nan_occupancy_is_not_measured():
    line = decode_log.parse(PLAIN + MFU + ", fwd occupancy: 62.50%")
    assert (line.read_gb_s, line.occupancy_pct) == (2088.91, 62.5)
    assert decode_log.parse(PLAIN + ", fwd occupancy: nan%").occupancy_pct is None
    assert decode_log.parse(PREFILL) is None and decode_log.parse("Decode batch") is None


def test_other_pool_parts_and_an_eager_step_parse_too():
    line = decode_log.parse(STAMP + "Decode batch, #running-req: 3, #full token: 9, full token usage: 0.00, "
                            "#swa token: 9, swa token usage: 0.00, cuda graph: False, gen throughput (token/s): 0.00, "
                            "#queue-req: 2")
    assert (line.running, line.graph, line.step_ms) == (3, False, None)


def test_the_first_decode_line_after_a_prefill_is_left_out_it_counts_the_idle_time():
    lines = decode_log.single_stream(CAPTURED_LOG.read_text().splitlines())
    throughputs = [line.gen_tok_s for line in lines]
    assert 2.30 not in throughputs and 81.19 not in throughputs  # the windows that spanned idle time and a prefill
    assert 259.67 in throughputs and 278.54 in throughputs and all(tok_s > 200 for tok_s in throughputs)


def test_lines_are_read_from_an_offset_and_a_rotated_log_gives_none(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(PREFILL + "\n")
    offset = log.stat().st_size
    with open(log, "a") as f:
        f.write(PLAIN + "\n")
    assert decode_log.read_from(log, offset) == [PLAIN]
    assert decode_log.read_from(tmp_path / "gone.log", 0) == []


def test_qwen3_4b_reads_8_04_gb_per_token_and_its_floor_on_an_h200_is_1_68_ms():
    weight_bytes = floor.weight_bytes(QWEN3_4B, "Qwen3-4B")
    assert weight_bytes == 8_044_544_000  # 4.022 B params (LM head counted once though tied) x 2 bytes
    h200 = floor.Floor(weight_bytes, gpu_specs.lookup("NVIDIA H200").peak_gb_s, "NVIDIA H200")
    assert h200.ms == pytest.approx(1.676, abs=0.001)
    assert floor.Floor(weight_bytes, None, None).ms is None


def test_weights_the_server_quantizes_to_fp8_are_read_at_a_byte_and_the_lm_head_at_two():
    linear = 36 * (2 * 2560 * 32 * 128 + 2 * 2560 * 8 * 128 + 3 * 2560 * 9728)  # q/o, k/v, gate/up/down
    head = 151_936 * 2560
    assert floor.weight_bytes(QWEN3_4B, "Qwen3-4B") == (linear + head) * 2
    fp8 = floor.weight_bytes(QWEN3_4B, "Qwen3-4B", "fp8")
    assert fp8 == linear + 2 * head == 4_411_228_160
    assert floor.Floor(fp8, gpu_specs.lookup("NVIDIA H200").peak_gb_s, None).ms == pytest.approx(0.919, abs=0.001)
    with pytest.raises(ShapeError, match="--quantization awq: the bytes of its weights are not counted here"):
        floor.weight_bytes(QWEN3_4B, "Qwen3-4B", "awq")


class InfoServer:
    def __init__(self, status, text):
        self.reply = type("Reply", (), {"status": status, "text": text, "ok": status == 200,
                                        "json": lambda self: json.loads(self.text)})()

    def server_info(self):
        return self.reply


@pytest.mark.parametrize("status, text, expected", [
    (200, '{"quantization": "fp8", "kv_cache_dtype": "auto"}', "fp8"), (200, '{"quantization": null}', None),
    (200, "not json", None), (503, "", None), (200, "[]", None),
])
def test_the_servers_own_quantization_is_read_from_its_server_info(status, text, expected):
    assert single_stream.quantization_of(InfoServer(status, text)) == expected


@pytest.mark.parametrize("change, needle", [
    ({"num_experts": 128}, "mixture of experts"), ({"torch_dtype": "int8"}, "torch_dtype 'int8'"),
    ({"intermediate_size": None}, "lacks a size field"),
])
def test_a_config_the_dense_count_does_not_fit_is_one_line(change, needle):
    with pytest.raises(ShapeError, match=needle):
        floor.weight_bytes({**QWEN3_4B, **change}, "m")


def arm_record(**given) -> StreamArmRecord:
    base = dict(arm="baseline", status="ok", requests_ok=3, client_itl_p50_ms=3.8, client_itl_p90_ms=4.0,
                client_itl_mean_ms=3.9, server_step_ms=3.85, gpu_forward_ms=2.4, occupancy_pct=62.3,
                sglang_read_gb_s=2100.0, tokenizer_itl_ms=3.88, decode_lines=70, weight_bytes=8_044_544_000,
                peak_gb_s=4800.0)
    return StreamArmRecord(**{**base, **given})


def test_the_breakdown_is_differences_of_measured_medians():
    b = stream_breakdown.breakdown(arm_record())
    assert b.floor_ms == pytest.approx(1.676, abs=0.001)
    assert b.gpu_above_floor_ms == pytest.approx(2.4 - 1.676, abs=0.001)
    assert (b.cpu_gap_ms, b.streaming_ms) == (pytest.approx(1.45), pytest.approx(0.05))
    assert b.bandwidth_share_pct == pytest.approx(1.676 / 2.4 * 100, abs=0.1)


def test_an_instrument_that_gave_nothing_is_not_measured_and_said_so():
    rec = arm_record(gpu_forward_ms=None, occupancy_pct=None, peak_gb_s=None, floor_note="GPU x unknown")
    b = stream_breakdown.breakdown(rec)
    assert (b.floor_ms, b.gpu_above_floor_ms, b.cpu_gap_ms, b.bandwidth_share_pct) == (None, None, None, None)
    assert b.streaming_ms == pytest.approx(0.05)
    notes = " | ".join(stream_breakdown.missing_notes(rec))
    assert "no 'fwd occupancy'" in notes and "floor not stated: GPU x unknown" in notes
    row = stream_breakdown.table_lines([b])[1].split()
    assert row[0] == "baseline" and row[5:8] == ["-", "-", "-"]  # GPU fwd, floor, GPU>floor


def test_an_arm_is_summarised_from_its_requests_and_steady_lines():
    requests = [StreamRequestRecord("a", 1, True, "", 4, 20.0, (3.0, 4.0, 5.0)),
                StreamRequestRecord("a", 2, False, "Timeout", 0, None, ())]
    lines = [decode_log.parse(PLAIN + MFU + ", fwd occupancy: 50.00%")] * 3
    rec = stream_breakdown.summarize_arm("a", requests, lines, 3.9, floor.Floor(8_044_544_000, 4800.0, "H200"), "")
    assert (rec.status, rec.requests_ok, rec.client_itl_p50_ms, rec.client_itl_mean_ms) == ("ok", 1, 4.0, 4.0)
    assert rec.server_step_ms == pytest.approx(3.851, abs=0.001)
    assert rec.gpu_forward_ms == pytest.approx(rec.server_step_ms / 2) and rec.sglang_read_gb_s == 2088.91
    assert StreamArmRecord.from_dict(rec.to_dict()) == rec
    failed = stream_breakdown.summarize_arm("a", [], [], None, None, "no config", "restart failed: boom")
    assert failed.status == "failed" and failed.server_step_ms is None and failed.error == "restart failed: boom"


def options(**given) -> argparse.Namespace:
    return argparse.Namespace(**{**{name: None for name in (*restart_runs.LOAD_OPTIONS, "startup", "single_stream")},
                                 **given})


@pytest.mark.parametrize("given, needle", [
    ({"single_stream": 0}, "--single-stream must be >= 1 request per arm (got 0)"),
    ({"single_stream": 3, "concurrency": "4", "startup": 2}, "no load points: drop --concurrency, --startup"),
])
def test_load_options_and_a_zero_count_are_refused_in_one_line(given, needle):
    assert needle in single_stream.problem(options(**given))


def test_nothing_is_refused_without_the_flag_or_with_it_alone():
    assert single_stream.problem(options()) is None and single_stream.problem(options(single_stream=3)) is None


@pytest.mark.parametrize("change, needle", [
    ({"num_local_experts": 8}, "config.json of Mixtral: a mixture of experts or quantized weights"),
    ({"quantization_config": {"quant_method": "fp8"}}, "the dense bf16 weight count does not apply"),
    ({"torch_dtype": None, "dtype": "int4"}, "torch_dtype 'int4' is not one of bfloat16, float16, float32"),
    ({"num_attention_heads": None}, "config.json of Mixtral lacks an attention field"),
])
def test_every_refusal_names_the_model_and_the_field(change, needle):
    with pytest.raises(ShapeError) as err:
        floor.weight_bytes({**QWEN3_4B, **change}, "Mixtral")
    assert needle in str(err.value)


def test_the_dtype_sets_the_bytes_per_weight_and_a_models_directory_is_read(tmp_path):
    bf16 = floor.weight_bytes(QWEN3_4B, "m")
    no_dtype = {k: v for k, v in QWEN3_4B.items() if k not in ("torch_dtype", "dtype")}
    assert floor.weight_bytes(no_dtype, "m") == bf16  # SGLang serves it in float16: 2 bytes
    # a float32 checkpoint is served in float16 at --dtype auto: 2 bytes a weight read, not 4
    assert floor.weight_bytes({**no_dtype, "dtype": "float32"}, "m") == bf16
    # SGLang reads the newer key first
    assert floor.dtype_bytes({"dtype": "bfloat16", "torch_dtype": "int4"}, "m") == 2
    assert floor.weight_bytes({**QWEN3_4B, "torch_dtype": "float16"}, "m") == bf16
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_4B))
    assert floor.weight_bytes_of_dir(tmp_path) == bf16
    with pytest.raises(ShapeError):
        floor.weight_bytes_of_dir(tmp_path / "absent")


def test_an_arm_summary_takes_percentiles_of_the_gaps_medians_of_the_lines_and_the_first_error():
    gaps = tuple(float(g) for g in range(1, 11))  # p50 5.5, p90 9.1, mean 5.5
    requests = [StreamRequestRecord("a", 1, True, "", 11, 30.0, gaps),
                StreamRequestRecord("a", 2, False, "first", 0, None, ()),
                StreamRequestRecord("a", 3, False, "second", 0, None, ())]
    lines = [decode_log.DecodeLine(1, True, 250.0, 2000.0, 50.0), decode_log.DecodeLine(1, True, 1000 / 6, None, None),
             decode_log.DecodeLine(1, True, 200.0, 1000.0, 40.0)]  # steps of 4, 6 and 5 ms
    rec = stream_breakdown.summarize_arm("a", requests, lines, None, None, "GPU unknown")
    assert (rec.client_itl_p50_ms, rec.client_itl_p90_ms, rec.client_itl_mean_ms) == (5.5, pytest.approx(9.1), 5.5)
    assert (rec.server_step_ms, rec.occupancy_pct, rec.sglang_read_gb_s, rec.decode_lines) == (
        pytest.approx(5.0), 45.0, 1500.0, 3)
    assert rec.gpu_forward_ms == pytest.approx((2.0 + 2.0) / 2)  # 4.0 x 50% and 5.0 x 40%; the line without: out
    assert (rec.weight_bytes, rec.peak_gb_s, rec.floor_note, rec.status, rec.error) == (None, None, "GPU unknown",
                                                                                        "ok", "")
    only_failed = stream_breakdown.summarize_arm("a", requests[1:], [], None, None, "")
    assert (only_failed.status, only_failed.error, only_failed.client_itl_p50_ms) == ("failed", "first", None)
    assert stream_breakdown.summarize_arm("a", [], [], None, None, "").error == "no request ran"


def test_each_missing_instrument_has_its_own_note_and_a_measured_arm_has_none():
    assert stream_breakdown.missing_notes(arm_record()) == []
    no_lines = " | ".join(stream_breakdown.missing_notes(arm_record(decode_lines=0, error="restart failed: x")))
    assert no_lines.startswith("failed: restart failed: x | no steady one-request Decode lines")
    assert "'est. read BW'" not in no_lines  # no lines at all: one note, not a second about their suffix
    no_bw = stream_breakdown.missing_notes(arm_record(sglang_read_gb_s=None))
    assert no_bw == ["no 'est. read BW' in the Decode lines (--enable-mfu-metrics needs --enable-metrics)"]


def test_the_table_prints_two_decimals_a_percent_share_and_dashes_for_what_is_missing():
    cells = stream_breakdown.table_cells([stream_breakdown.breakdown(arm_record())])[0]
    assert cells == ["baseline", "3.80 (4.00)", "3.90", "3.85", "2.40", "1.68", "0.72", "1.45", "0.05", "70%", "2100"]
    empty = stream_breakdown.breakdown(arm_record(client_itl_p50_ms=None, client_itl_mean_ms=None,
                                                  sglang_read_gb_s=None, gpu_forward_ms=0.0))
    cells = stream_breakdown.table_cells([empty])[0]
    assert cells[1:3] == ["-", "-"] and cells[9:] == ["-", "-"]  # no share against a zero forward
    assert stream_breakdown.table_lines([empty])[0].split()[:3] == ["arm", "client", "ITL"]


def test_what_the_arm_was_given_is_carried_whole_into_its_record_and_breakdown():
    requests = [StreamRequestRecord("a", 1, True, "", 3, 20.0, (3.0, 5.0))]
    h200 = floor.Floor(8_044_544_000, 4800.0, "H200")
    rec = stream_breakdown.summarize_arm("a", requests, [], 3.87, h200, "")
    assert (rec.weight_bytes, rec.peak_gb_s, rec.tokenizer_itl_ms) == (8_044_544_000, 4800.0, 3.87)
    assert stream_breakdown.breakdown(rec).tokenizer_itl_ms == 3.87
    no_floor = stream_breakdown.breakdown(arm_record(weight_bytes=None))
    assert no_floor.floor_ms is None and no_floor.gpu_above_floor_ms is None and no_floor.bandwidth_share_pct is None
    failed = stream_breakdown.summarize_arm("a", [StreamRequestRecord("a", 1, False, "x", 0, None, ())], [], None,
                                            None, "")
    assert (failed.client_itl_p50_ms, failed.client_itl_p90_ms, failed.client_itl_mean_ms) == (None, None, None)


def test_the_notes_say_exactly_what_was_not_measured():
    assert stream_breakdown.missing_notes(arm_record(decode_lines=0)) == [
        "no steady one-request Decode lines in the server log: server step, GPU forward, CPU gap and streaming not "
        "measured"]
    assert stream_breakdown.missing_notes(arm_record(occupancy_pct=None)) == [
        "no 'fwd occupancy' in the Decode lines (the server ignored SGLANG_ENABLE_METRICS_DEVICE_TIMER): GPU "
        "forward, above floor and CPU gap not measured"]


def test_from_the_second_arm_on_each_arm_says_how_long_the_rest_will_take(monkeypatch, capsys):
    """The first arm has nothing to go by (its request lines count n/N); each later one gives the ETA of the arms
    left from the median arm so far."""
    from types import SimpleNamespace

    from llmhost.bench import arms as arms_mod, runner

    import time

    now, lasts = [0.0], iter([40.0, 60.0, 50.0])  # the arms' durations
    monkeypatch.setattr(single_stream, "time", SimpleNamespace(time=time.time, monotonic=lambda: now[0]))
    monkeypatch.setattr(single_stream, "measure_arm", lambda *a, **k: now.__setitem__(0, now[0] + next(lasts)))
    monkeypatch.setattr(single_stream, "print_summary", lambda run, requests: [])
    monkeypatch.setattr(runner, "interrupt_on_sigterm", lambda: None)
    run = SimpleNamespace(root=Path("/run"), append_stream=lambda rec: None, read_manifest=lambda: SimpleNamespace(
        provenance=SimpleNamespace(gpu=SimpleNamespace(name="H200"))))
    arms = [arms_mod.Arm(name, name, "#000", (), "") for name in ("a", "b", "c")]
    single_stream.measure_all(None, run, arms, 8)
    heads = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[bench single-stream")]
    assert [ln.rsplit("ETA ", 1)[1] if "ETA " in ln else None for ln in heads] == [None, "1m20s", "0m50s"]
