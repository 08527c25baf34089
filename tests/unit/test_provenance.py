"""Provenance: versions from another interpreter's metadata, git commit and dirty flag, secrets kept out."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from llmhost import provenance


def test_versions_are_read_from_the_measured_pythons_metadata(site_python):
    python = site_python({"sglang": ("0.5.17", []), "flashinfer-python": ("0.6.15.post1", []),
                          "torch": ("2.11.0", [])})
    found = provenance.package_versions(python)
    assert (found["sglang"], found["flashinfer"], found["torch"]) == ("0.5.17", "0.6.15.post1", "2.11.0")
    assert set(found) == {"sglang", "flashinfer", "torch", "llmhost"}


def test_a_python_that_cannot_run_has_no_versions(tmp_path):
    found = provenance.package_versions(str(tmp_path / "no-python"))
    assert found["sglang"] is None and found["torch"] is None


def _git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _repo_with_a_commit(repo) -> None:
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")


def test_git_state_names_the_commit_and_whether_tracked_files_changed(tmp_path):
    assert provenance.git_state(tmp_path) == (None, None)
    _repo_with_a_commit(tmp_path)
    commit, dirty = provenance.git_state(tmp_path)
    assert commit and len(commit) == 40 and dirty is False
    (tmp_path / "untracked.txt").write_text("not ours to count")
    assert provenance.git_state(tmp_path)[1] is False
    (tmp_path / "a.txt").write_text("two")
    assert provenance.git_state(tmp_path) == (commit, True)


def test_git_state_leaves_the_users_index_alone(tmp_path):
    """A plain `git status` refreshes the index under .git/index.lock, which a killed or size-limited run leaves
    behind (the user's next commit then fails) and which races the user's own git."""
    _repo_with_a_commit(tmp_path)
    index = tmp_path / ".git" / "index"
    before = index.read_bytes()
    old = time.time() - 100
    os.utime(tmp_path / "a.txt", (old, old))  # same content, other stat: git status would rewrite the index
    assert provenance.git_state(tmp_path)[1] is False
    assert index.read_bytes() == before and not (tmp_path / ".git" / "index.lock").exists()


def test_secret_values_are_redacted_at_any_depth_and_other_values_kept():
    info = {"api_key": "sk-secret", "admin_api_key": None, "nested": [{"api_key": "x"}], "port": 30000,
            "ssl_keyfile_password": "pw", "bucket_time_to_first_token": [0.1, 0.5], "hf_token": "hf_x"}
    assert provenance.redact_secrets(info) == {
        "api_key": "<redacted>", "admin_api_key": None, "nested": [{"api_key": "<redacted>"}], "port": 30000,
        "ssl_keyfile_password": "<redacted>", "bucket_time_to_first_token": [0.1, 0.5], "hf_token": "<redacted>"}


def test_the_command_keeps_every_argument_but_secret_values():
    argv = ["run_bench.py", "--api-key", "sk-1", "--admin-api-key=sk-2", "--tag", "fp8", "--arm", "a=--page-size 16"]
    assert provenance.redact_command(argv) == ["run_bench.py", "--api-key", "<redacted>", "--admin-api-key=<redacted>",
                                               "--tag", "fp8", "--arm", "a=--page-size 16"]


def test_collect_records_this_checkout_and_a_utc_timestamp():
    found = provenance.collect(["run_bench.py", "--quick"], python=sys.executable)
    assert found.command == ("run_bench.py", "--quick") and found.created_at.endswith("Z")
    assert found.git_commit is None or len(found.git_commit) == 40
    assert isinstance(found.gpu, provenance.Gpu) and found.gpu.count >= 0


def test_a_plain_checkout_names_its_version_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "llmhost"\nversion = "1.2.3"\n')
    assert provenance.checkout_version(tmp_path) == "1.2.3"
    assert provenance.checkout_version(tmp_path / "missing") is None
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe version")
    assert provenance.checkout_version(tmp_path) is None
