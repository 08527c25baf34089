"""Model completeness: every shard, the tokenizer and config.json, checked on fake model directories."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost.setup import model_files


def make_model(root, shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"num_attention_heads": 32}))
    (root / "tokenizer.json").write_text("{}")
    (root / "tokenizer_config.json").write_text("{}")
    weight_map = {f"layer.{i}.weight": name for i, name in enumerate(shards)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for name in shards:
        (root / name).write_bytes(b"x" * 64)
    return root


def test_complete_sharded_model_passes(tmp_path):
    result = model_files.check(make_model(tmp_path / "m"))
    assert result.is_complete, result.problems
    assert result.checked_files == 5
    assert result.total_bytes > 128


def test_missing_shard_is_named(tmp_path):
    root = make_model(tmp_path / "m")
    (root / "model-00002-of-00002.safetensors").unlink()
    result = model_files.check(root)
    assert not result.is_complete
    assert "model-00002-of-00002.safetensors is missing" in result.problems


def test_zero_size_shard_is_incomplete(tmp_path):
    root = make_model(tmp_path / "m")
    (root / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert any("00001" in p and "empty" in p for p in model_files.check(root).problems)


def test_missing_tokenizer_and_bad_config(tmp_path):
    root = make_model(tmp_path / "m")
    (root / "tokenizer.json").unlink()
    (root / "config.json").write_text("{not json")
    problems = model_files.check(root).problems
    assert any(p.startswith("no tokenizer") for p in problems)
    assert "config.json is not valid JSON" in problems


def test_vocab_plus_merges_is_a_tokenizer(tmp_path):
    root = make_model(tmp_path / "m")
    (root / "tokenizer.json").unlink()
    (root / "vocab.json").write_text("{}")
    (root / "merges.txt").write_text("#v\n")
    assert model_files.check(root).is_complete


def test_config_only_ignores_weights_but_not_the_tokenizer(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text("{}")
    assert not model_files.check(root).is_complete  # no weights at all
    assert not model_files.check(root, config_only=True).is_complete  # no tokenizer
    (root / "tokenizer.json").write_text("{}")
    (root / "tokenizer_config.json").write_text("{}")
    assert model_files.check(root, config_only=True).is_complete


def test_index_without_weight_map_and_missing_dir(tmp_path):
    root = make_model(tmp_path / "m")
    (root / "model.safetensors.index.json").write_text("{}")
    assert any("weight_map" in p for p in model_files.check(root).problems)
    assert not model_files.check(tmp_path / "nowhere").is_complete


def write_manifest(root, entries):
    (root / model_files.MANIFEST).write_text(json.dumps(entries))


def test_hub_sizes_and_hashes_are_enforced_when_recorded(tmp_path):
    root = make_model(tmp_path / "m")
    shard = "model-00001-of-00002.safetensors"
    good_hash = hashlib.sha256(b"x" * 64).hexdigest()
    write_manifest(root, [{"path": shard, "size": 64, "sha256": good_hash},
                          {"path": "README.md", "size": 10, "sha256": None}])  # not needed: ignored
    assert model_files.check(root, hashes=True).is_complete
    write_manifest(root, [{"path": shard, "size": 65, "sha256": good_hash}])
    assert any("the hub says 65" in p for p in model_files.check(root).problems)
    write_manifest(root, [{"path": shard, "size": 64, "sha256": "0" * 64}])
    assert model_files.check(root).is_complete  # hashes are opt-in (they read every byte)
    assert any("sha256" in p for p in model_files.check(root, hashes=True).problems)
    write_manifest(root, [{"path": "model-00003-of-00003.safetensors", "size": 1, "sha256": None}])
    assert any("listed by the hub" in p for p in model_files.check(root).problems)


def test_wanted_selects_config_and_tokenizer_for_dummy_weights():
    assert model_files.wanted("tokenizer_config.json", config_only=True)
    assert model_files.wanted("merges.txt", config_only=True)
    assert not model_files.wanted("model-00001-of-00003.safetensors", config_only=True)
    assert model_files.wanted("model-00001-of-00003.safetensors", config_only=False)
    assert not model_files.wanted("README.md", config_only=False)
    assert not model_files.wanted("onnx/config.json", config_only=False)


@pytest.mark.parametrize("config_only", [False, True])
def test_cli_check_prints_one_line_either_way(repo, tmp_path, config_only):
    root = make_model(tmp_path / "m")
    args = [sys.executable, "-m", "llmhost.setup.model_files", "check", "--model-dir", str(root)]
    args += ["--config-only"] if config_only else []
    ok = subprocess.run(args, cwd=repo, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("complete:")
    (root / "tokenizer_config.json").unlink()
    bad = subprocess.run(args, cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and "tokenizer_config.json is missing" in bad.stderr


def test_cli_download_without_hub_client_is_one_line(repo, tmp_path):
    try:
        import huggingface_hub  # noqa: F401
        pytest.skip("huggingface_hub installed: the download path would reach the network")
    except ImportError:
        pass
    proc = subprocess.run([sys.executable, "-m", "llmhost.setup.model_files", "download", "--model-id", "Qwen/Qwen3-4B",
                           "--model-dir", str(tmp_path / "m")], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1 and "huggingface_hub is not installed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_download_fetches_only_wanted_files_and_records_hub_sizes(tmp_path, monkeypatch):
    """The hub client is faked at its boundary: a repo of config, tokenizer, two shards and a README."""
    import fnmatch
    import types

    repo_files = {"config.json": b"{}", "tokenizer.json": b"{}", "tokenizer_config.json": b"{}",
                  "model.safetensors.index.json": json.dumps({"weight_map": {"a": "model-1.safetensors",
                                                                             "b": "model-2.safetensors"}}).encode(),
                  "model-1.safetensors": b"w" * 10, "model-2.safetensors": b"v" * 20, "README.md": b"# hi"}
    sibling = types.SimpleNamespace
    info = types.SimpleNamespace(siblings=[
        sibling(rfilename=name, size=len(data),
                lfs={"sha256": hashlib.sha256(data).hexdigest()} if name.endswith(".safetensors") else None)
        for name, data in repo_files.items()])

    def snapshot_download(repo_id, local_dir, allow_patterns):
        for name, data in repo_files.items():
            if any(fnmatch.fnmatch(name, p) for p in allow_patterns):
                (Path(local_dir) / name).write_bytes(data)

    fake = types.ModuleType("huggingface_hub")
    fake.HfApi = lambda: types.SimpleNamespace(model_info=lambda repo_id, files_metadata: info)
    fake.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)

    dummy = model_files.download("org/model", tmp_path / "dummy", config_only=True)
    assert dummy.is_complete and not (tmp_path / "dummy" / "model-1.safetensors").exists()
    full = model_files.download("org/model", tmp_path / "full", config_only=False)
    assert full.is_complete and not (tmp_path / "full" / "README.md").exists()
    recorded = {e["path"]: e for e in json.loads((tmp_path / "full" / model_files.MANIFEST).read_text())}
    assert recorded["model-2.safetensors"]["size"] == 20 and recorded["model-2.safetensors"]["sha256"]
    (tmp_path / "full" / "model-2.safetensors").write_bytes(b"v" * 19)  # truncated after the download
    assert any("the hub says 20" in p for p in model_files.check(tmp_path / "full").problems)
