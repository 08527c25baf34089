"""The run store's rules that --resume and the dashboard lean on (llmhost.bench.store): a manifest read back as
written, and each way it can be damaged named in one line with the way on; adaptive repeats joining the plan once
each, in order, before they run; a second run in the same second getting the next suffix; `latest` replacing a
stale link; --single-stream records filed by type; and resume's summary shortening a long list of retried points."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from llmhost import files
from llmhost.bench import load_profile, points, store
from llmhost.bench.records import SCHEMA, RecordError, TelemetrySample
from llmhost.bench.stream_records import StreamKernelRecord, StreamRequestRecord
from tests.fixtures_bench import make_run
from tests.unit.test_single_stream import arm_record
from tests.unit.test_store import _attempt


def test_a_manifest_reads_back_as_written(tmp_path: Path):
    run = store.RunStore(make_run(tmp_path, torn=False))
    manifest = run.read_manifest()
    copy = store.RunStore.create(tmp_path / "other")
    copy.write_manifest(manifest)
    assert copy.read_manifest() == manifest
    assert json.loads((copy.root / "manifest.json").read_text())["schema"] == SCHEMA


def test_each_kind_of_damaged_manifest_is_named_with_the_way_on(tmp_path: Path):
    file = tmp_path / "manifest.json"
    with pytest.raises(RecordError) as exc:
        store.read_manifest(file)
    assert str(exc.value) == f"{file} is missing — pass a run directory of run_bench.py (results/bench/<run_id>)"
    file.write_text("{torn")
    with pytest.raises(RecordError) as exc:
        store.read_manifest(file)
    assert str(exc.value).startswith(f"{file} is not readable JSON (")
    assert str(exc.value).endswith(") — start a new run with ./run_bench.py (the plan of this one is lost with its "
                                   "manifest)")
    file.write_text(json.dumps({"schema": SCHEMA + 1}))
    with pytest.raises(RecordError) as exc:
        store.read_manifest(file)
    assert str(exc.value).startswith(f"{file}: manifest has schema {SCHEMA + 1}, newer than this toolkit reads")
    file.write_text(json.dumps({"schema": SCHEMA, "run_id": 7}))
    with pytest.raises(RecordError) as exc:
        store.read_manifest(file)
    assert str(exc.value).startswith(f"{file} is not a manifest run_bench.py wrote (")
    assert str(exc.value).endswith("— start a new run with ./run_bench.py (the plan of this one is lost with its "
                                   "manifest)")


def test_adaptive_repeats_join_the_plan_once_each_in_order(tmp_path: Path):
    run = store.RunStore(make_run(tmp_path, torn=False))
    before = run.read_manifest()
    known = before.plan[0]
    new = [dataclasses.replace(known, repeat=9, point_id=known.point_id + ".a"),
           dataclasses.replace(known, repeat=10, point_id=known.point_id + ".b")]
    run.add_adaptive_repeats([known, *new])
    after = run.read_manifest()
    assert after.plan == before.plan + tuple(new)
    assert after.adaptive_repeats == (new[0].point_id, new[1].point_id)
    mtime = (run.root / "manifest.json").stat().st_mtime_ns
    run.add_adaptive_repeats(new)  # nothing new: the manifest is not rewritten
    assert run.read_manifest() == after and (run.root / "manifest.json").stat().st_mtime_ns == mtime


def test_a_second_run_in_the_same_second_gets_the_next_suffix(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(store, "new_run_id", lambda tag="", now=None: "20261205-090000-t")
    ids = [store.RunStore.create(tmp_path, "t").run_id for _ in range(3)]
    assert ids == ["20261205-090000-t", "20261205-090000-t.2", "20261205-090000-t.3"]


def test_latest_replaces_an_older_link_and_a_stale_temporary_one(tmp_path: Path):
    old, new = store.RunStore.create(tmp_path, "old"), store.RunStore.create(tmp_path, "new")
    old.point_latest()
    stale = tmp_path / "bench" / f".latest.{os.getpid()}"
    stale.symlink_to("gone")  # left by a crash between its creation and the rename
    new.point_latest()
    assert os.readlink(tmp_path / "bench" / "latest") == new.run_id and not stale.is_symlink()


def test_single_stream_and_kernel_records_are_filed_by_type_and_read_back(tmp_path: Path):
    run = store.RunStore.create(tmp_path)
    arm = arm_record()
    kernels = StreamKernelRecord("baseline", "ok", 100, 3.5, 3.9, {"GEMM": 2.0}, (), "t.json.gz")
    request = StreamRequestRecord("baseline", 1, True, "", 4, 20.0, (3.0,))
    profile = load_profile.failed(points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1), "why")
    for record in (arm, kernels, request):
        run.append_stream(record)
    run.append_point_kernels(profile)
    assert run.read_stream_arms().records == [arm] and run.read_stream_kernels().records == [kernels]
    assert run.read_point_kernels().records == [profile]
    assert [StreamRequestRecord.from_dict(r) for r in files.read_jsonl(run.root / "stream_requests.jsonl").rows] == [
        request]
    for name in ("stream_arms.jsonl", "stream_kernels.jsonl", "point_kernels.jsonl", "points.jsonl"):
        with open(run.root / name, "a") as fh:
            fh.write('{"torn')
    said = {name: loaded.warnings for name, loaded in (
        ("stream_arms.jsonl", run.read_stream_arms()), ("stream_kernels.jsonl", run.read_stream_kernels()),
        ("point_kernels.jsonl", run.read_point_kernels()), ("points.jsonl", run.read_points()))}
    for name, warnings in said.items():  # a damaged line is named by its file
        assert len(warnings) == 1 and warnings[0].startswith(f"{name}: "), (name, warnings)


def test_telemetry_samples_are_appended_in_order(tmp_path: Path):
    run = store.RunStore.create(tmp_path)
    first = [TelemetrySample(1.0, "gpu", "gpu_util_pct", {"gpu": "0"}, 50.0, None)]
    second = [TelemetrySample(2.0, "metrics", "sglang:token_usage", {}, 0.5, "p")]
    run.append_telemetry(first)
    run.append_telemetry(second)
    assert [TelemetrySample.from_dict(r) for r in files.read_jsonl(run.telemetry_path).rows] == first + second


def test_latest_stays_with_a_newer_run_when_an_older_one_records_again(tmp_path: Path):
    older, newer = store.RunStore.create(tmp_path, "a"), store.RunStore.create(tmp_path, "b")
    older.append_point(_attempt("x", 1, "ok"))
    newer.append_point(_attempt("x", 1, "ok"))
    older.append_point(_attempt("y", 1, "ok"))  # a --resume of the older run
    assert os.readlink(tmp_path / "bench" / "latest") == newer.run_id


def test_resume_lists_three_retried_points_then_says_there_are_more(tmp_path: Path):
    run = store.RunStore.create(tmp_path)
    plan = [dataclasses.replace(points.make_point("baseline", "chat", "concurrency", 4, None, 4, 1), point_id=pid)
            for pid in "abcde"]
    for pid in "abcd":
        run.append_point(_attempt(pid, 1, "failed"))
    run.toolcalls_path.write_text('{"arm": "base')
    lines = store.resume_lines(run, plan, only_missing=False)
    assert lines[0] == "resume: 0 of 5 points ok (kept), 4 failed (tried again: a, b, c ...), 1 not yet run"
    assert lines[1:] == ["warning: toolcalls.jsonl: a torn last line (a crash mid-write) is skipped by readers and "
                         "closed off before the next record"]
    three = store.RunStore.create(tmp_path)
    for pid in "abc":
        three.append_point(_attempt(pid, 1, "failed"))
    assert store.resume_lines(three, plan[:3], only_missing=False)[0] == (
        "resume: 0 of 3 points ok (kept), 3 failed (tried again: a, b, c), 0 not yet run")
    assert store.resume_lines(store.RunStore.create(tmp_path), plan[:1], only_missing=False) == [
        "resume: 0 of 1 points ok (kept), 0 failed, 1 not yet run"]


def test_the_raw_folder_is_made_once_and_a_blocked_one_is_named_in_one_line(tmp_path: Path):
    run = store.RunStore.create(tmp_path)
    assert run.raw_dir() == run.root / "raw" and run.raw_dir().is_dir()
    blocked = store.RunStore.create(tmp_path / "b")
    (blocked.root / "raw").write_text("a file where the folder goes")
    with pytest.raises(files.WriteError) as exc:
        blocked.raw_dir()
    assert str(exc.value).startswith(f"cannot write {blocked.root / 'raw'}: File exists (") and exc.value.errno


def test_every_line_of_a_raw_output_stays_a_line_of_its_own_when_redacted(tmp_path: Path):
    raw = tmp_path / "out.jsonl"
    raw.write_text('{"a": 1, "api_key": "sk-1"}\n{"b": 2}\n')
    store.redact_jsonl(raw)
    assert raw.read_text() == '{"a": 1, "api_key": "<redacted>"}\n{"b": 2}\n'


def test_an_untagged_run_is_named_by_its_stamp_alone(tmp_path: Path):
    assert store.new_run_id(now=0) == "19700101-000000"
    assert len(store.RunStore.create(tmp_path).run_id) == len("20261205-090000")
