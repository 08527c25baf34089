"""How the server finds the shared-prefix plugin: a folder holding one distribution's metadata, whose entry point
names llmhost.serve.shared_prefix:register in SGLang's plugin group, first on the server's PYTHONPATH with this
checkout after it. SGLang's load_plugins() reads the entry points of everything on sys.path in each of its processes,
so the plugin loads without installing anything into SGLang's Python (a venv, a container, a bring-your-own one)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from llmhost.files import write_text_atomic
from llmhost.settings import REPO_ROOT

GROUP = "sglang.srt.plugins"
NAME = "llmhost_shared_prefix_decode"
DIST = f"{NAME}-1.dist-info"


def folder(state_dir: Path) -> Path:
    return Path(state_dir) / "sglang-plugins"


def write(state_dir: Path) -> Path:
    """The plugin's metadata folder under the server's state directory (rewritten each start); returns its parent."""
    dist = folder(state_dir) / DIST
    dist.mkdir(parents=True, exist_ok=True)
    write_text_atomic(dist / "METADATA", f"Metadata-Version: 2.1\nName: {NAME}\nVersion: 1\n")
    write_text_atomic(dist / "entry_points.txt", f"[{GROUP}]\n{NAME} = llmhost.serve.shared_prefix:register\n")
    return folder(state_dir)


def pythonpath(state_dir: Path, current: str | None) -> str:
    """The server's PYTHONPATH: the plugin folder, this checkout, then what it was (`current`)."""
    parts = [str(folder(state_dir)), str(REPO_ROOT)] + ([current] if current else [])
    return os.pathsep.join(parts)


def env(on: bool, state_dir: Path, pairs: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """PYTHONPATH for the server when the plugin is on (SERVER_ENV's own PYTHONPATH, else the shell's, kept after
    it); {} when off."""
    if not on:
        return {}
    return {"PYTHONPATH": pythonpath(state_dir, pairs.get("PYTHONPATH", environ.get("PYTHONPATH")))}
