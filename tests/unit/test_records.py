"""Typed run records: every type survives its own writer and reader through JSON, older files still read, a newer
schema and a wrongly shaped record are refused in one line that names the field."""
from __future__ import annotations

import json

import pytest

from fixtures_bench import make_run
from llmhost.bench import arms, points, records
from llmhost.bench.model_shape import ModelShape
from llmhost.bench.records import (Manifest, PointRecord, PointSummary, RecordError, RequestRecord, ServerRecord,
                                   TelemetrySample, ToolCallCase, ToolCallSkipped, WorkloadRecord)
from llmhost.bench.workloads import REGISTRY as WORKLOADS
from llmhost.provenance import Gpu, Provenance

POINT = points.make_point("fp8-kv", "chat", "qps", None, 0.5, 32, 2)
SUMMARY = PointSummary(duration_s=12.5, completed=31, failed=1, request_throughput=2.5, input_throughput=2600.0,
                       output_throughput=640.0, total_throughput=3240.0, offered_rate=0.5, achieved_rate=0.49,
                       client_bound=False, samples={"ttft_ms": 31, "itl_ms": 7905, "e2e_ms": 31},
                       low_support=("ttft_ms.p99", "ttft_ms.p99.9"))
PROVENANCE = Provenance(created_at="2026-12-01T10:00:00Z", command=("run_bench.py", "--quick"), git_commit="abc123",
                        versions={"sglang": "0.5.17", "flashinfer": "0.6.15.post1", "torch": None, "llmhost": None},
                        gpu=Gpu("NVIDIA H200", 1, 139.8, "580.82.07"), git_dirty=True)


def _through_json(record: object) -> dict:
    """What a reader gets back: the record's dict, written and parsed as JSON text."""
    return json.loads(json.dumps(record.to_dict(), allow_nan=False))


@pytest.mark.parametrize("record,read", [
    (PointRecord.of(POINT, attempt=2, status="ok", error=None, started_at=1.5, ended_at=14.0, cache_flushed=True,
                    summary=SUMMARY, requests_file="requests/fp8-kv.chat.qps.r0p5.r2.jsonl"), PointRecord.from_dict),
    (PointRecord.of(POINT, attempt=1, status="failed", error="boom", started_at=1.5, ended_at=2.0,
                    cache_flushed=False, summary=None, requests_file="requests/x.jsonl"), PointRecord.from_dict),
    (RequestRecord(1.25, True, "", 1024, 3, 41.5, (3.5, 4.0), 49.0), RequestRecord.from_dict),
    (RequestRecord(1.25, False, "ReadTimeout", 1024, 0, None, (), 30_000.0), RequestRecord.from_dict),
    (TelemetrySample(7.0, "metrics", "sglang:token_usage", {"model_name": "qwen3-4b"}, 0.25, "p1"),
     TelemetrySample.from_dict),
    (TelemetrySample(8.0, "gpu", "gpu_power_w", {"gpu": "0"}, 612.5, None), TelemetrySample.from_dict),
    (ToolCallCase("baseline", "weather-0", "Weather in Paris?", "get_weather", "get_weather", True, True, 120.5),
     records.toolcall_from_dict),
    (ToolCallSkipped("triton", "dummy weights"), records.toolcall_from_dict),
    (ServerRecord("page-16", "python -m sglang.launch_server --page-size 16", {"page_size": 16}, 101.5,
                  "2026-12-01T10:02:00Z", decode="SHARED_PREFIX_DECODE=on, but the server says: shared-prefix decode: "
                  "off for this model runner"), ServerRecord.from_dict),
    (ServerRecord("dp2", "env ... --port 30001\nenv ... --port 30002\nrouter ...", {}, 140.0, "2026-12-01T10:09:00Z",
                  layout=({"name": "worker0", "port": 30001, "gpus": "0", "tp_size": 1, "dp_size": 1},
                          {"name": "router", "port": 30000, "gpus": None, "tp_size": None, "dp_size": None})),
     ServerRecord.from_dict),
    (Manifest(run_id="20261201-100000", provenance=PROVENANCE, config={"port": 30000}, seed=3,
              slo={"ttft_ms": 1000.0, "itl_ms": 50.0, "pct": 99.0},
              arms=(arms.REGISTRY["baseline"], arms.REGISTRY["fp8-kv"]),
              workloads=(WorkloadRecord.of(WORKLOADS["chat"]),), plan=(POINT,)),
     Manifest.from_dict),
    (Manifest("r", PROVENANCE, {}, 1, None, (), (), (POINT,),
              estimate=records.Estimate(1234.5, True, "calibrated on this host's last 1 run(s)", 2, 1200.0)),
     Manifest.from_dict),
    (Manifest("r", PROVENANCE, {}, 1, None, (), (), (), model_shape=ModelShape(36, 8, 128, 2, 8_044_544_000)),
     Manifest.from_dict),
    (Manifest("r", PROVENANCE, {}, 1, None, (), (), (),
              model_shape_note="config.json of m lacks an attention field ('num_attention_heads')"),
     Manifest.from_dict),
])
def test_every_record_type_reads_back_equal_to_what_was_written(record, read):
    assert read(_through_json(record)) == record


def test_the_manifest_keeps_its_flat_on_disk_layout():
    manifest = Manifest("r", PROVENANCE, {}, 1, None, (), (), ())
    data = manifest.to_dict()
    assert list(data)[:2] == ["schema", "run_id"] and data["schema"] == records.SCHEMA
    assert data["git_commit"] == "abc123" and data["gpu"]["driver"] == "580.82.07" and "provenance" not in data


def test_runs_written_before_records_had_types_still_read(tmp_path):
    """The fixture writes the older layout: no git_dirty, summary {} on failures, server commands as lists and
    start times as unix seconds, tool-call cases without an error field."""
    run = make_run(tmp_path, n=4, repeats=1, torn=False)
    manifest = Manifest.from_dict(json.loads((run / "manifest.json").read_text()))
    assert manifest.provenance.git_dirty is None and manifest.arms[0].is_baseline
    assert manifest.model_shape is None and manifest.model_shape_note == ""  # recorded only since it had a field
    failed = [PointRecord.from_dict(json.loads(line)) for line in (run / "points.jsonl").read_text().splitlines()]
    assert any(p.status == "failed" for p in failed)
    server = ServerRecord.from_dict(json.loads((run / "servers" / "triton.json").read_text()))
    assert server.launch_command.startswith("python3 -m sglang.launch_server") and server.started_at.endswith("Z")
    case = records.toolcall_from_dict(json.loads((run / "toolcalls.jsonl").read_text().splitlines()[0]))
    assert isinstance(case, ToolCallCase) and case.error == ""


def test_a_newer_schema_is_refused_in_one_line_and_a_missing_one_too():
    data = Manifest("r", PROVENANCE, {}, 1, None, (), (), ()).to_dict()
    with pytest.raises(RecordError, match=r"schema 2, newer than this toolkit reads \(1\) — update the toolkit"):
        Manifest.from_dict({**data, "schema": 2})
    with pytest.raises(RecordError, match="no valid schema number"):
        Manifest.from_dict({k: v for k, v in data.items() if k != "schema"})


@pytest.mark.parametrize("change,message", [
    ({"pattern": "zigzag"}, "'pattern' should be one of concurrency, qps, long, burst, cold, warm, not 'zigzag'"),
    ({"attempt": True}, "'attempt' should be int, not True"),
    ({"concurrency": "4"}, "'concurrency' should be int, not '4'"),
    ({"summary": {"completed": 3}}, "'summary' lacks 'duration_s'"),
    ({"status": None}, "'status' should be one of ok, failed, not None"),
])
def test_a_wrongly_shaped_record_names_the_field(change, message):
    good = PointRecord.of(POINT, attempt=1, status="ok", error=None, started_at=1.0, ended_at=2.0,
                          cache_flushed=True, summary=SUMMARY, requests_file="r").to_dict()
    with pytest.raises(RecordError) as err:
        PointRecord.from_dict({**good, **change})
    assert str(err.value) == f"point record: {message}"


def test_a_missing_field_without_a_default_is_refused():
    with pytest.raises(RecordError, match="request record lacks 'e2e_ms'"):
        RequestRecord.from_dict({"start_s": 1.0, "ok": True, "error": "", "prompt_tokens": 1, "output_tokens": 1,
                                 "ttft_ms": 1.0, "itl_ms": []})
    with pytest.raises(RecordError, match="should be a JSON object"):
        TelemetrySample.from_dict([1, 2])  # type: ignore[arg-type]


def test_reading_a_jsonl_file_reports_torn_unreadable_and_misshapen_lines(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    good = TelemetrySample(1.0, "gpu", "gpu_util_pct", {"gpu": "0"}, 97.0, None).to_dict()
    path.write_text(json.dumps(good) + "\n{oops\n" + json.dumps({**good, "value": "high"}) + "\n" + '{"t": 2')
    loaded = records.read_records(path, TelemetrySample.from_dict, "telemetry.jsonl")
    assert loaded.records == [TelemetrySample.from_dict(good)]
    assert loaded.warnings == [
        "telemetry.jsonl: a torn last line (a crash mid-write) was skipped",
        "telemetry.jsonl: 1 unreadable line(s) skipped (line 2 first)",
        "telemetry.jsonl: 1 line(s) skipped, not the records run_bench.py writes (first: telemetry sample: "
        "'value' should be float, not 'high')"]
