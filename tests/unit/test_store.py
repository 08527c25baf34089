"""The run store: typed records written through llmhost.files, resume bookkeeping, redaction of raw outputs."""
from __future__ import annotations

import dataclasses
import json
import os
import re

from llmhost import files
from llmhost.bench import points, store
from llmhost.bench.records import PointRecord, RequestRecord, ServerRecord, ToolCallSkipped


def test_run_ids_are_utc_stamps_with_an_optional_tag():
    assert store.new_run_id("", now=0) == "19700101-000000"
    assert store.new_run_id("fp8", now=86400 + 61) == "19700102-000101-fp8"


def test_create_makes_a_fresh_directory_and_latest_follows_the_first_record(tmp_path):
    first = store.RunStore.create(tmp_path, "a")
    first.append_point(_attempt("x", 1, "ok"))
    second = store.RunStore.create(tmp_path, "a")
    assert first.root != second.root and first.root.is_dir() and second.root.is_dir()
    assert re.fullmatch(r"\d{8}-\d{6}-a(\.\d+)?", second.run_id)
    latest = tmp_path / "bench" / "latest"
    assert os.readlink(latest) == first.run_id  # the second run has recorded nothing yet: latest stays
    second.append_point(_attempt("x", 1, "failed"))
    assert latest.is_symlink() and os.readlink(latest) == second.run_id


def _attempt(point_id: str, attempt: int, status: str) -> PointRecord:
    point = dataclasses.replace(points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), point_id=point_id)
    return PointRecord.of(point, attempt=attempt, status=status, error=None if status == "ok" else "boom",
                          started_at=1.0, ended_at=2.0, cache_flushed=True, summary=None,
                          requests_file=f"requests/{point_id}.jsonl")


def test_done_points_are_the_ok_ones_and_only_missing_keeps_failed_retries_done(tmp_path):
    run = store.RunStore.create(tmp_path)
    for pid, attempt, status in [("a", 1, "ok"), ("b", 1, "failed"), ("c", 1, "failed"), ("c", 2, "failed"),
                                 ("d", 1, "failed"), ("d", 2, "ok")]:
        run.append_point(_attempt(pid, attempt, status))
    assert run.done_points() == {"a", "d"}  # c failed twice: a --resume tries it again
    assert run.done_points(only_missing=True) == {"a", "c", "d"}  # the old rule
    assert run.latest_attempts()["b"].attempt == 1


def test_resume_says_what_it_will_do_and_names_torn_lines(tmp_path):
    run = store.RunStore.create(tmp_path)
    plan = [dataclasses.replace(points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), point_id=pid)
            for pid in "abcd"]
    for pid, attempt, status in [("a", 1, "ok"), ("b", 1, "failed"), ("c", 1, "failed"), ("c", 2, "failed")]:
        run.append_point(_attempt(pid, attempt, status))
    with open(run.points_path, "a") as out:
        out.write('{"point_id": "d", "att')
    run.telemetry_path.write_text('{"t": 1.0, "source": "metrics", "na')
    lines = store.resume_lines(run, plan, only_missing=False)
    assert lines[0] == "resume: 1 of 4 points ok (kept), 2 failed (tried again: b, c), 1 not yet run"
    assert any("points.jsonl: a torn last line" in line for line in lines[1:])
    assert any("telemetry.jsonl: a torn last line" in line for line in lines[1:])
    strict = store.resume_lines(run, plan, only_missing=True)[0]
    assert "1 failed (tried again: b)" in strict and "1 failed on their retry (kept failed: --only-missing)" in strict


def test_a_damaged_points_line_costs_only_its_point_on_resume(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_point(_attempt("a", 1, "ok"))
    with open(run.points_path, "a") as out:
        out.write('{"point_id": "b", "attempt": 1, "sta')  # killed mid-append
    run.append_point(_attempt("c", 1, "ok"))  # the torn line is closed off first, so "c" survives
    assert run.done_points() == {"a", "c"}


def test_requests_file_is_replaced_whole_and_named_by_point(tmp_path):
    run = store.RunStore.create(tmp_path)
    one = RequestRecord(1.0, True, "", 8, 2, 5.0, (1.5,), 7.0)
    rel = run.write_requests("baseline.chat.qps.r8.r1", [one, RequestRecord(2.0, False, "x", 8, 0, None, (), 1.0)])
    assert rel == "requests/baseline.chat.qps.r8.r1.jsonl"
    run.write_requests("baseline.chat.qps.r8.r1", [one])
    assert [RequestRecord.from_dict(r) for r in files.read_jsonl(run.root / rel).rows] == [one]


def test_server_records_are_named_by_arm(tmp_path):
    run = store.RunStore.create(tmp_path)
    record = ServerRecord("fp8-kv", "python -m sglang.launch_server --kv-cache-dtype fp8_e5m2", {"port": 1}, 80.5,
                          "2026-12-01T10:00:00Z")
    run.write_server(record)
    assert ServerRecord.from_dict(json.loads((run.root / "servers" / "fp8-kv.json").read_text())) == record


def test_toolcall_arms_are_the_arms_already_checked(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.append_toolcalls([ToolCallSkipped("baseline", "dummy")])
    assert run.toolcall_arms() == {"baseline"}


def test_raw_load_generator_output_loses_its_api_key_and_nothing_else(tmp_path):
    raw = tmp_path / "out.jsonl"
    raw.write_text(json.dumps({"completed": 4, "server_info": {"api_key": "sk-secret", "port": 1}}) + "\n")
    store.redact_jsonl(raw)
    assert files.read_jsonl(raw).rows == [{"completed": 4, "server_info": {"api_key": "<redacted>", "port": 1}}]
    store.redact_jsonl(tmp_path / "absent.jsonl")
    assert not (tmp_path / "absent.jsonl").exists()
