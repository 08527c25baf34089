"""The run store: atomic JSON, fsynced JSONL appends that survive a torn last line, resume bookkeeping."""
from __future__ import annotations

import json
import os
import re

import pytest

from llmhost.bench import store


def test_run_ids_are_utc_stamps_with_an_optional_tag():
    assert store.new_run_id("", now=0) == "19700101-000000"
    assert store.new_run_id("fp8", now=86400 + 61) == "19700102-000101-fp8"


def test_create_makes_a_fresh_directory_and_points_latest_at_it(tmp_path):
    first = store.RunStore.create(tmp_path, "a")
    second = store.RunStore.create(tmp_path, "a")
    assert first.root != second.root and first.root.is_dir() and second.root.is_dir()
    latest = tmp_path / "bench" / "latest"
    assert latest.is_symlink() and os.readlink(latest) == second.run_id
    assert re.fullmatch(r"\d{8}-\d{6}-a(\.\d+)?", second.run_id)


def test_write_json_replaces_atomically_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "m.json"
    store.write_json(path, {"a": 1})
    store.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_read_jsonl_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "p.jsonl"
    store.append_jsonl(path, [{"i": 1}, {"i": 2}])
    with open(path, "a") as out:
        out.write('{"i": 3, "tor')
    assert store.read_jsonl(path) == [{"i": 1}, {"i": 2}]
    assert store.read_jsonl(tmp_path / "missing.jsonl") == []


def test_done_points_are_ok_or_failed_on_the_retry(tmp_path):
    run = store.RunStore.create(tmp_path)
    for pid, attempt, status in [("a", 1, "ok"), ("b", 1, "failed"), ("c", 1, "failed"), ("c", 2, "failed"),
                                 ("d", 1, "failed"), ("d", 2, "ok")]:
        run.append_point({"point_id": pid, "attempt": attempt, "status": status})
    assert run.done_points() == {"a", "c", "d"}
    assert run.latest_attempts()["b"]["attempt"] == 1


def test_requests_file_is_replaced_whole_and_named_by_point(tmp_path):
    run = store.RunStore.create(tmp_path)
    rel = run.write_requests("baseline.chat.qps.r8.r1", [{"ok": True}, {"ok": False}])
    assert rel == "requests/baseline.chat.qps.r8.r1.jsonl"
    run.write_requests("baseline.chat.qps.r8.r1", [{"ok": True}])
    assert store.read_jsonl(run.root / rel) == [{"ok": True}]


def test_manifest_and_server_records_round_trip(tmp_path):
    run = store.RunStore.create(tmp_path)
    run.write_manifest({"schema": 1, "run_id": run.run_id, "arms": [], "plan": []})
    run.write_server("fp8-kv", {"arm": "fp8-kv"})
    assert run.read_manifest()["run_id"] == run.run_id
    assert json.loads((run.root / "servers" / "fp8-kv.json").read_text()) == {"arm": "fp8-kv"}


def test_toolcall_arms_are_the_arms_already_checked(tmp_path):
    run = store.RunStore.create(tmp_path)
    store.append_jsonl(run.toolcalls_path, [{"arm": "baseline", "skipped": "dummy"}])
    assert run.toolcall_arms() == {"baseline"}


def test_redact_hides_api_keys_anywhere_in_server_info():
    info = {"api_key": "sk-secret", "admin_api_key": None, "nested": [{"api_key": "x"}], "port": 30000}
    assert store.redact(info) == {"api_key": "<redacted>", "admin_api_key": None,
                                  "nested": [{"api_key": "<redacted>"}], "port": 30000}


def test_versions_of_a_python_without_sglang_are_none(tmp_path):
    import sys

    found = store.versions(sys.executable)
    assert set(found) == {"sglang", "flashinfer", "torch", "llmhost"}
    assert store.versions(str(tmp_path / "no-python"))["sglang"] is None


def test_versions_are_read_from_the_server_pythons_metadata(site_python):
    found = store.versions(site_python({"sglang": ("0.5.17", []), "flashinfer-python": ("0.6.15.post1", []),
                                        "torch": ("2.11.0", [])}))
    assert (found["sglang"], found["flashinfer"], found["torch"]) == ("0.5.17", "0.6.15.post1", "2.11.0")


@pytest.mark.parametrize("text", [b"\xff\xfe", b"{", b"[]", b'{"schema": 1, "arms": [], "plan": {}}',
                                  b'{"schema": 1, "arms": [{"label": "x"}], "plan": []}'])
def test_a_damaged_manifest_gets_one_verdict_for_resume_and_dashboard(tmp_path, text):
    (tmp_path / "manifest.json").write_bytes(text)
    with pytest.raises(store.ManifestError, match=r"is damaged \(.*\) — a run cannot be resumed or reported"):
        store.load_manifest(tmp_path)
