"""llmhost.files: atomic replaces leave no temp files, JSONL survives a torn last line, write errors are one line."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from llmhost import files


def test_atomic_json_write_replaces_the_file_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "doc.json"
    files.write_json_atomic(target, {"a": 1})
    files.write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert sorted(p.name for p in target.parent.iterdir()) == ["doc.json"]


def test_atomic_write_applies_the_requested_mode(tmp_path: Path) -> None:
    target = tmp_path / "secret.yaml"
    files.write_text_atomic(target, "k: v\n", mode=0o600)
    assert target.stat().st_mode & 0o777 == 0o600


def test_the_default_mode_follows_the_umask_without_changing_it(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        files.write_bytes_atomic(tmp_path / "shard.npz", b"x")
        assert os.umask(0o027) == 0o027  # still what it was: reading it did not reset it
    finally:
        os.umask(previous)
    assert (tmp_path / "shard.npz").stat().st_mode & 0o777 == 0o640


def test_a_torn_last_line_is_reported_and_the_next_append_does_not_glue_onto_it(tmp_path: Path) -> None:
    path = tmp_path / "points.jsonl"
    files.append_jsonl(path, [{"n": 1}])
    with open(path, "a") as out:
        out.write('{"n": 2, "tru')  # a crash mid-write
    read = files.read_jsonl(path)
    assert [r["n"] for r in read.rows] == [1] and read.torn
    assert "torn last line" in read.warnings(path)[0]
    files.append_jsonl(path, [{"n": 3}])
    read = files.read_jsonl(path)
    assert [r["n"] for r in read.rows] == [1, 3]
    assert read.bad_lines == [2] and not read.torn  # the torn line is now a closed, unreadable line


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}')
    assert [r["n"] for r in files.read_jsonl(path).rows] == [1, 2]


def test_non_object_lines_are_counted_as_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"n": 1}\n[1, 2]\n\n{"n": 3}\n')
    read = files.read_jsonl(path)
    assert [r["n"] for r in read.rows] == [1, 3] and read.bad_lines == [2]


def test_a_failed_write_names_the_path_and_free_space_and_leaves_no_temp_file(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "doc.json"
    with pytest.raises(files.WriteError) as err:
        files.write_json_atomic(target, {"a": 1})
    assert str(err.value).startswith(f"cannot write {target}: No space left")
    assert str(target) in str(err.value) and "No space left" in str(err.value) and "MiB free" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(files.WriteError):
        files.append_jsonl(tmp_path / "p.jsonl", [{"a": 1}])
