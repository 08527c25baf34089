"""Where a result came from: package versions, GPU and driver, git commit (+ dirty flag), the exact command with
secrets redacted, and when. Every stored result carries one Provenance, so a number can be traced to its stack.

    collect(command, python=PY)   -> Provenance (versions read from the interpreter PY, e.g. the server's venv)
    redact_secrets(value)         -> a copy of a JSON-like value without secret values (SGLang's /server_info)
    redact_command(argv)          -> argv with the values of secret-named options masked

Stdlib only and safe on a machine without a GPU, git or sglang: what cannot be read is None.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmhost import nvidia
from llmhost.setup import versions as setup_versions

REPO = Path(__file__).resolve().parents[1]
REDACTED = "<redacted>"
# Names that hold secrets: SGLang's api_key/admin_api_key/ssl_keyfile_password, *_secret, hf/auth/access tokens.
# Deliberately not any name ending in "token": SGLang's bucket_time_to_first_token is a list of numbers.
SECRET_NAME = re.compile(r"api[_-]?key|password|secret|(^|[_-])(hf|auth|access)[_-]token$", re.IGNORECASE)
PACKAGES = {"sglang": "sglang", "flashinfer": "flashinfer-python", "torch": "torch"}  # recorded name -> dist


@dataclasses.dataclass(frozen=True, slots=True)
class Gpu:
    name: str | None
    count: int
    memory_gb: float | None
    driver: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Provenance:
    created_at: str  # UTC, ISO 8601 (YYYY-mm-ddTHH:MM:SSZ)
    command: tuple[str, ...]  # secrets redacted
    git_commit: str | None
    versions: dict[str, str | None]  # sglang, flashinfer, torch (of the measured Python), llmhost
    gpu: Gpu
    git_dirty: bool | None = None  # tracked files differed from the commit (None: unknown, e.g. an older record)


def collect(command: list[str], python: str | None = None, repo: Path = REPO) -> Provenance:
    """Everything above, now; `python` is the interpreter whose packages are measured (default: this one)."""
    commit, dirty = git_state(repo)
    return Provenance(created_at=utc_now(), command=tuple(redact_command(command)), git_commit=commit,
                      git_dirty=dirty, versions=package_versions(python or sys.executable), gpu=gpu_info())


def utc_now(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def package_versions(python: str) -> dict[str, str | None]:
    """sglang/flashinfer/torch as installed for `python` (its metadata; no torch import) and this toolkit's."""
    try:
        found = setup_versions.probe(python)["packages"]
    except setup_versions.VersionError:
        found = {}
    try:
        ours: str | None = importlib.metadata.version("llmhost")
    except importlib.metadata.PackageNotFoundError:  # a plain checkout, not installed: its pyproject says
        ours = checkout_version()
    return {**{name: found.get(dist) for name, dist in PACKAGES.items()}, "llmhost": ours}


def checkout_version(repo: Path = REPO) -> str | None:
    """The version in the checkout's pyproject.toml; None when it is missing or unreadable."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', _read(repo / "pyproject.toml"), re.M)
    return match.group(1) if match else None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def git_state(repo: Path = REPO) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether tracked files differ from it) of the checkout; (None, None) outside git. Read-only:
    GIT_OPTIONAL_LOCKS=0 keeps `git status` from refreshing the index under .git/index.lock, which a killed run
    would leave behind for the user's next commit to trip over."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True, env=env).stdout.strip()
        changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True, env=env).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head or None, bool(changed)


def gpu_info() -> Gpu:
    """The visible GPUs through NVML (nvidia-ml-py), else nvidia-smi; name None and count 0 without one."""
    pynvml = nvidia.nvml()
    if pynvml is not None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
            return Gpu(name.decode() if isinstance(name, bytes) else name, pynvml.nvmlDeviceGetCount(),
                       pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
                       driver.decode() if isinstance(driver, bytes) else driver)
        except Exception:  # noqa: BLE001 - a driver that lists no device: ask the CLI
            pass
    rows = nvidia.smi("name,memory.total,driver_version", timeout_s=10)
    if not rows or len(rows[0]) != 3:
        return Gpu(None, 0, None, None)
    return Gpu(rows[0][0], len(rows), float(rows[0][1]) / 1024, rows[0][2])


def redact_secrets(value: Any) -> Any:
    """A copy with every non-empty value under a secret name (SECRET_NAME) replaced, at any depth."""
    if isinstance(value, dict):
        return {k: (REDACTED if SECRET_NAME.search(str(k)) and v else redact_secrets(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    return value


def redact_command(argv: list[str]) -> list[str]:
    """argv with the value of every secret-named option masked: `--api-key X` and `--api-key=X` alike."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif arg.startswith("-") and SECRET_NAME.search(name.lstrip("-")):
            out.append(f"{name}={REDACTED}" if eq else arg)
            hide_next = not eq
        else:
            out.append(arg)
    return out
