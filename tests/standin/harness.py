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
    """A TCP port free on 127.0.0.1 right now, with the `block - 1` ports after it free too (ROUTER=on puts its
    workers on PORT+1, PORT+2: tests running side by side must not meet there).

    Ports come from below the kernel's ephemeral range, in a slice of their own per pytest-xdist worker, handed out in
    turn: a port the OS picked (bind to 0) lies in the range every outgoing connection takes its source port from, so
    a test's own HTTP clients could take it between the pick and the server's bind."""
    global _handed
    lo, hi = _port_slice()
    for _ in range(hi - lo):
        port = lo + _handed % (hi - lo - block + 1)
        _handed += block
        if all(_bindable(p) for p in range(port, port + block)):
            return port
    raise RuntimeError(f"no {block} free ports in a row between {lo} and {hi}")


def _port_slice() -> tuple[int, int]:
    """This process's ports: the span below the ephemeral range (from 10000) split evenly over the xdist workers."""
    try:
        ephemeral_lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_lo = 32768  # Linux's default
    lo, hi = 10000, max(ephemeral_lo, 12000)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = (hi - lo) // max(workers, 1)
    return lo + index * width, lo + (index + 1) * width


_handed = 0  # ports handed out (or skipped) so far in this process's slice


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
