"""Model download (Hugging Face hub) and a completeness check that looks at every file the server will read.

A model directory is complete when config.json parses, a tokenizer is present (tokenizer_config.json plus
tokenizer.json, or tokenizer.model, or vocab.json + merges.txt), and - unless only config + tokenizer are wanted
(LOAD_FORMAT=dummy) - every shard named in model.safetensors.index.json (or the single model.safetensors) exists
with a non-zero size. When the hub's file list was recorded at download time (.hub-files.json beside the files),
each recorded file must also have the recorded size, and with --hashes the recorded sha256.

    python3 -m llmhost.setup.model_files check --model-dir DIR [--config-only] [--hashes]     # stdlib only
    python -m llmhost.setup.model_files download --model-id Qwen/Qwen3-4B --model-dir DIR [--config-only]
    python -m llmhost.setup.model_files size --model-id Qwen/Qwen3-4B [--config-only]         # bytes to download

`download` needs huggingface_hub (SGLang's venv has it); it writes the files plus DIR/.hub-files.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import json
import sys
from pathlib import Path

from llmhost.files import write_json_atomic

MANIFEST = ".hub-files.json"
# What LOAD_FORMAT=dummy still needs: the architecture and the tokenizer (random weights, real shapes).
CONFIG_PATTERNS = ("config.json", "generation_config.json", "tokenizer*", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "*.tiktoken", "chat_template*")
WEIGHT_PATTERNS = ("*.safetensors", "model.safetensors.index.json")
TOKENIZER_SETS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))


@dataclasses.dataclass(frozen=True, slots=True)
class HubFile:
    path: str
    size: int | None
    sha256: str | None  # LFS files only (weights); small git files carry a git blob id instead


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCheck:
    model_dir: str
    checked_files: int
    total_bytes: int
    problems: tuple[str, ...]

    @property
    def is_complete(self) -> bool:
        return not self.problems


def wanted(path: str, config_only: bool) -> bool:
    """Whether a repo file belongs to the download (weights only when real weights are wanted)."""
    patterns = CONFIG_PATTERNS if config_only else CONFIG_PATTERNS + WEIGHT_PATTERNS
    return any(fnmatch.fnmatch(Path(path).name, pattern) for pattern in patterns) and "/" not in path


def _sized(model_dir: Path, name: str, problems: list[str]) -> int:
    path = model_dir / name
    if not path.is_file():
        problems.append(f"{name} is missing")
        return 0
    size = path.stat().st_size
    if size == 0:
        problems.append(f"{name} is empty (0 bytes: interrupted download?)")
    return size


def _shards(model_dir: Path, problems: list[str]) -> list[str]:
    index = model_dir / "model.safetensors.index.json"
    if not index.is_file():
        if (model_dir / "model.safetensors").exists():
            return ["model.safetensors"]
        problems.append("no weights: neither model.safetensors.index.json nor model.safetensors")
        return []
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError):
        problems.append("model.safetensors.index.json has no weight_map (corrupt download?)")
        return []
    return sorted(set(weight_map.values()))


def check(model_dir: str | Path, *, config_only: bool = False, hashes: bool = False) -> ModelCheck:
    """Every file the server reads is present, non-empty, and matches the recorded hub sizes/hashes."""
    root = Path(model_dir)
    problems: list[str] = []
    if not root.is_dir():
        return ModelCheck(str(root), 0, 0, (f"{root} is not a directory",))
    names = ["config.json", "tokenizer_config.json"]
    present = [group for group in TOKENIZER_SETS if all((root / n).is_file() for n in group)]
    if present:
        names += present[0]
    else:
        problems.append("no tokenizer: need tokenizer.json, tokenizer.model or vocab.json + merges.txt")
    if not config_only:
        names += _shards(root, problems)
    total = sum(_sized(root, name, problems) for name in names)
    if (root / "config.json").is_file():
        try:
            json.loads((root / "config.json").read_text())
        except json.JSONDecodeError:
            problems.append("config.json is not valid JSON")
    problems += _against_manifest(root, config_only, hashes)
    return ModelCheck(str(root), len(names), total, tuple(dict.fromkeys(problems)))


def _against_manifest(root: Path, config_only: bool, hashes: bool) -> list[str]:
    manifest = root / MANIFEST
    if not manifest.is_file():
        return []
    try:
        items = [HubFile(**entry) for entry in json.loads(manifest.read_text())]
    except (json.JSONDecodeError, TypeError):
        return [f"{MANIFEST} is corrupt (delete it and re-run the download)"]
    problems = []
    for item in items:
        path = root / item.path
        if not wanted(item.path, config_only):
            continue
        if not path.is_file():
            problems.append(f"{item.path} is missing (listed by the hub)")
        elif item.size is not None and path.stat().st_size != item.size:
            problems.append(f"{item.path} has {path.stat().st_size} bytes, the hub says {item.size}")
        elif hashes and item.sha256 and sha256_of(path) != item.sha256:
            problems.append(f"{item.path} sha256 differs from the hub's (corrupt file)")
    return problems


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def hub_files(model_id: str) -> list[HubFile]:
    """The repo's files with sizes and LFS sha256 (one metadata request, no download)."""
    from huggingface_hub import HfApi  # heavy and only in the server venv

    info = HfApi().model_info(model_id, files_metadata=True)
    return [HubFile(s.rfilename, s.size, _lfs_sha256(s.lfs)) for s in info.siblings or []]


def _lfs_sha256(lfs: object) -> str | None:
    """BlobLfsInfo is an object in current huggingface_hub releases and was a dict in older ones."""
    if not lfs:
        return None
    return lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)


def download(model_id: str, model_dir: str | Path, *, config_only: bool) -> ModelCheck:
    """Download the wanted files (resumes; already-complete files are skipped by the hub client), then check."""
    from huggingface_hub import snapshot_download

    root = Path(model_dir)
    root.mkdir(parents=True, exist_ok=True)
    files = [f for f in hub_files(model_id) if wanted(f.path, config_only)]
    patterns = list(CONFIG_PATTERNS if config_only else CONFIG_PATTERNS + WEIGHT_PATTERNS)
    snapshot_download(model_id, local_dir=str(root), allow_patterns=patterns)
    write_json_atomic(root / MANIFEST, [dataclasses.asdict(f) for f in files])
    return check(root, config_only=config_only)


def _report(result: ModelCheck) -> int:
    if result.is_complete:
        print(f"complete: {result.checked_files} files, {result.total_bytes / 1e9:.2f} GB in {result.model_dir}")
        return 0
    shown = "; ".join(result.problems[:3]) + (f" (+{len(result.problems) - 3} more)" if len(result.problems) > 3 else "")
    print(f"model_files: {result.model_dir} is incomplete: {shown}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("check", "verify a model directory (stdlib only)"),
                       ("download", "download from the hub, record its file list, then check"),
                       ("size", "print the bytes a download needs (hub metadata)")):
        p = sub.add_parser(name, help=text)
        if name != "size":
            p.add_argument("--model-dir", required=True, help="local model directory")
        if name != "check":
            p.add_argument("--model-id", required=True, help="Hugging Face repo id, e.g. Qwen/Qwen3-4B")
        p.add_argument("--config-only", action="store_true",
                       help="config + tokenizer only, no weights (LOAD_FORMAT=dummy); default: everything")
        if name == "check":
            p.add_argument("--hashes", action="store_true",
                           help="also compare sha256 of weight files with the hub's (reads every byte; default off)")
    args = parser.parse_args(argv)
    if args.command == "check":
        return _report(check(args.model_dir, config_only=args.config_only, hashes=args.hashes))
    try:
        if args.command == "size":
            print(sum(f.size or 0 for f in hub_files(args.model_id) if wanted(f.path, args.config_only)))
            return 0
        return _report(download(args.model_id, args.model_dir, config_only=args.config_only))
    except ImportError:
        print("model_files: huggingface_hub is not installed in this Python — run it with the server venv's python",
              file=sys.stderr)
    except Exception as exc:  # network, auth, missing repo: one line for the user, details are in the hub's text
        print(f"model_files: {args.command} of {args.model_id} failed: {type(exc).__name__}: "
              f"{str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
