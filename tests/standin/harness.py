"""Start the SGLang stand-in as a real subprocess for tests (stdlib only).

    from standin.harness import launch        # tests/ is on sys.path via tests/conftest.py
    with launch(free_port, "--served-model-name", "qwen3-4b", "--enable-metrics") as srv:
        urllib.request.urlopen(srv.url + "/health")

The log (stdout + stderr) goes to a temp file readable as `srv.log()`; `stop()` ends the process it started.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

STANDIN_DIR = Path(__file__).resolve().parent
# The stand-in load generator caches agent datasets under $HOME/.cache/sglang like the real one: tests keep that
# out of the user's home unless they give their own HOME.
# One per pytest-xdist worker: the cache file is written in place, and two workers must not read each other's half.
STANDIN_HOME = Path(tempfile.gettempdir()) / f"llmhost-standin-home-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def free_port(block: int = 1) -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it), with the `block - 1` ports after it free too
    (ROUTER=on puts its workers on PORT+1, PORT+2: tests running side by side must not meet there)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + block <= 65536 and all(_bindable(p) for p in range(port + 1, port + block)):
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def standin_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes `python -m sglang.launch_server` resolve to the stand-in."""
    merged = {**os.environ, "HOME": str(STANDIN_HOME), **(env or {})}
    merged["PYTHONPATH"] = os.pathsep.join(p for p in (str(STANDIN_DIR), merged.get("PYTHONPATH", "")) if p)
    return merged


class Standin:
    def __init__(self, port: int, args: tuple[str, ...], env: dict[str, str] | None):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = tempfile.NamedTemporaryFile(prefix="standin-", suffix=".log", delete=False)
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-4B", "--port", str(port),
                *args]
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=standin_env(env))

    def wait_ready(self, timeout_s: float = 20) -> "Standin":
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stand-in exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"stand-in not ready after {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> "Standin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(port: int, *args: str, env: dict[str, str] | None = None, wait: bool = True) -> Standin:
    """Start the stand-in on 127.0.0.1:port; by default block until /health answers 200."""
    srv = Standin(port, args, env)
    if wait:
        try:
            srv.wait_ready()
        except Exception:
            srv.stop()
            raise
    return srv
