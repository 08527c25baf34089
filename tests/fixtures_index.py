"""A real PEP 503 package index on 127.0.0.1, with stub wheels that uv and pip resolve and install for real.

    index = LocalIndex(tmp_path / "www")
    index.add("pypi", "sglang", "0.5.17", requires=["flashinfer_python[cu13]==0.6.15.post1"])
    index.add("flashinfer/cu130", "flashinfer-jit-cache", "0.6.15.post1+cu130")
    with index.serve() as base:              # base + "/pypi" and base + "/flashinfer/cu130" are index URLs
        ...

Each folder (an index) holds one page per project, <folder>/<project>/index.html, whose links name the wheels
beside it; a project never added answers 404, like an index without it. A stub wheel is a valid wheel (METADATA,
WHEEL, RECORD with hashes) whose package imports and reports its version; extra files go in with it (torch's
version.py with the CUDA it was "built" for). dead_url() is an index URL where nothing answers.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import re
import socket
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path



def _dist(name: str) -> str:
    """Wheel file and dist-info spelling of a project name (PEP 427): flashinfer-cubin -> flashinfer_cubin."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path, name: str, version: str, requires: list[str] | None = None,
                extras: list[str] | None = None, files: dict[str, str] | None = None) -> Path:
    """Write `<dist>-<version>-py3-none-any.whl` into folder: package `<dist>` with __version__, plus `files`."""
    dist = _dist(name)
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                *(f"Provides-Extra: {extra}" for extra in extras or []),
                *(f"Requires-Dist: {requirement}" for requirement in requires or [])]
    contents = {
        f"{dist}/__init__.py": f'__version__ = "{version}"\n',
        **(files or {}),
        f"{info}/METADATA": "\n".join(metadata) + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: llmhost-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path, text in contents.items()]
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


class LocalIndex:
    """Folders of PEP 503 project pages under `root`, served by a stdlib HTTP server on 127.0.0.1."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(self, index: str, name: str, version: str, **wheel) -> Path:
        """Publish a stub wheel of name==version on `index` (a folder such as 'pypi' or 'flashinfer/cu130')."""
        project = self.root / index / re.sub(r"[-_.]+", "-", name).lower()
        path = build_wheel(project, name, version, **wheel)
        links = [f'<a href="{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a><br>'
                 for w in sorted(project.glob("*.whl"))]
        (project / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
        return path

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the folders; yields the base URL (http://127.0.0.1:PORT)."""
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


_HELD_PORTS: list[socket.socket] = []  # bound, never listening: held for the session so no other test takes them


def dead_url(path: str = "flashinfer") -> str:
    """An index URL on a 127.0.0.1 port where nothing listens: connection refused, i.e. unreachable. The port
    stays bound (not listening), so a test running in parallel cannot start a server on it."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(held)
    return f"http://127.0.0.1:{held.getsockname()[1]}/{path}"


def publish_sglang(index: LocalIndex, *, cubin_version: str = "0.6.15.post1",
                   jit_cache_version: str = "0.6.15.post1+cu130") -> None:
    """The package indexes as a fresh box meets them for SGLang 0.5.17: PyPI has sglang, the flashinfer-python it
    pins, torch (CUDA 13.0) and flashinfer-cubin only up to 0.6.13; FlashInfer's index has the cubin wheel, its
    cu130 index the JIT cache. The stub sglang leaves torch out of its requirements, so that resolving it never
    asks PyTorch's real index (the setup tests install the stub torch themselves)."""
    index.add("pypi", "sglang", "0.5.17", requires=["flashinfer_python[cu13]==0.6.15.post1"])
    index.add("pypi", "flashinfer-python", "0.6.15.post1", extras=["cu13"])
    index.add("pypi", "flashinfer-cubin", "0.6.13")
    torch = {"torch/version.py": 'cuda = "13.0"\n', "torch/__init__.py": 'from torch import version\n__version__ = "2.11.0"\n'}
    index.add("pypi", "torch", "2.11.0", files=torch)
    index.add("flashinfer", "flashinfer-cubin", cubin_version)
    index.add("flashinfer/cu130", "flashinfer-jit-cache", jit_cache_version)
