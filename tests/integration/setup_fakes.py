"""The fake host that tests/integration/test_setup*.py run the real setup_host.sh on: PATH shims stand in for
nvidia-smi, lspci, sudo, apt-get, dpkg-query, curl, df and a bring-your-own Python; OS_RELEASE_FILE stands in for
/etc/os-release; package indexes are real ones on 127.0.0.1 (tests/fixtures_index.py). The `host` fixture in
conftest.py is `fake_host`."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from fixtures_index import LocalIndex, publish_sglang
from uv import find_uv_bin

UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n'


class Host:
    """A fake host: shims on PATH, a WORK_DIR, an os-release file; run() invokes the real setup_host.sh."""

    def __init__(self, repo: Path, tmp: Path, index: LocalIndex, index_base: str):
        self.repo, self.tmp = repo, tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.calls = tmp / "calls.log"
        self.os_release = tmp / "os-release"
        self.os_release.write_text(UBUNTU)
        self.work = tmp / "work"
        self.index, self.pypi = index, f"{index_base}/pypi"
        self.env: dict[str, str] = {"PYPI_INDEX_URL": self.pypi, "FLASHINFER_INDEX_URL": f"{index_base}/flashinfer"}
        # setup's own helpers are stdlib-only: run them with this interpreter (fast, no version-manager shims).
        (self.bin / "python3").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
        (self.bin / "python3").chmod(0o755)
        # the real uv (pinned in the test extras) on PATH: dry runs rehearse with it instead of installing one
        os.symlink(find_uv_bin(), self.bin / "uv")
        # a roomy disk (1 TiB free) unless a test says otherwise: the real machine's free space must not decide
        self.shim("df", 'printf "Filesystem 1024-blocks Used Available Capacity Mounted\\n'
                        '/dev/x 1 0 1073741824 1%% /\\n"')

    def shim(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> "{self.calls}"\n{body}\n')
        path.chmod(0o755)
        return path

    def nvidia_smi(self, version: str) -> None:
        self.shim("nvidia-smi", f'echo "{version}, NVIDIA H200"')

    def run(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_PYTHON", "LLMHOST_CONFIG", "DRY_RUN")}
        env.update(PATH=f"{self.bin}:{env['PATH']}", WORK_DIR=str(self.work), OS_RELEASE_FILE=str(self.os_release))
        env.update(self.env)
        return subprocess.run([str(self.repo / "setup_host.sh"), *args], cwd=self.repo, env=env,
                              capture_output=True, text=True, timeout=60)

    def called(self) -> str:
        return self.calls.read_text() if self.calls.exists() else ""


def fake_host(repo: Path, tmp_path: Path) -> Iterator[Host]:
    """A Host whose indexes, "pypi" and FlashInfer's stocked as a fresh box meets them, serve while it is in use."""
    index = LocalIndex(tmp_path / "www")
    publish_sglang(index)
    with index.serve() as base:
        yield Host(repo, tmp_path, index, base)
