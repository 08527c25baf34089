"""The capture run of the live trace: restart the server with the tracer (llmhost/fi/trace/sitehook on its
PYTHONPATH), wait until every scheduler process reports the patch, drive the traffic of llmhost.fi.trace.traffic
(switching the tracer off and on between phases to measure its cost), stop tracing, restore the server as it was
(restart without the hook, or stop), and analyze the trace into trace.json.

The server is controlled through llmhost.serve.lifecycle, the tracer's environment passed as data (the SERVER_ENV
setting); a busy lock is lifecycle's one policy (wait, then ServerBusy); a broken stdout never skips the restore.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llmhost import config, files
from llmhost.fi import env
from llmhost.fi.trace.traffic import CaptureOptions, run_phases
from llmhost.serve import lifecycle
from llmhost.serve.console import Console, ServeError

REPO = Path(__file__).resolve().parents[3]
HOOK_DIR = Path(__file__).resolve().parent / "sitehook"
TOGGLE_TIMEOUT_S = 15.0  # the tracer's writer looks for PAUSE every flush (2 s) and rewrites its stats file then
STALE_S = 6.0  # 3 flushes without a rewrite: that writer is gone (its process exited, or was forked and exec'ed)


class CaptureError(RuntimeError):
    """A step of the capture failed; one line naming the next command."""


def hook_server_env(server_env: str, pythonpath: str, trace_dir: Path, every: int) -> str:
    """SERVER_ENV with the hook first on PYTHONPATH (kept, not replaced: the server may need it to find sglang)."""
    pairs = [item.partition("=") for item in shlex.split(server_env)]
    own = {k: v for k, _, v in pairs}
    path = [str(HOOK_DIR), own.get("PYTHONPATH", pythonpath)]
    kept = [f"{k}={v}" for k, _, v in pairs if k != "PYTHONPATH" and not k.startswith("LLMHOST_FI_TRACE")]
    extra = [f"PYTHONPATH={os.pathsep.join(p for p in path if p)}", f"LLMHOST_FI_TRACE_DIR={trace_dir}",
             f"LLMHOST_FI_TRACE_EVERY={every}"]
    return shlex.join(kept + extra)


class Unbreakable:
    """A standard stream that goes quiet once it breaks (the terminal's tee died with Ctrl-C): a broken pipe must
    not skip the server restore that follows."""

    def __init__(self, name: str) -> None:
        self.name = name  # looked up at each write, so a test that captures sys.stdout sees the text
        self.is_broken = False

    def write(self, text: str) -> int:
        self._call("write", text)
        return len(text)

    def flush(self) -> None:
        self._call("flush")

    def _call(self, method: str, *args: str) -> None:
        if not self.is_broken:
            try:
                getattr(getattr(sys, self.name), method)(*args)
            except OSError:
                self.is_broken = True


OUT, ERR = Unbreakable("stdout"), Unbreakable("stderr")


def say(text: str, err: bool = False) -> None:
    """Print, and never fail."""
    print(text, file=ERR if err else OUT, flush=True)


def serve(cfg: config.Config, action: str, server_env: str | None = None) -> bool:
    """Restart (with another SERVER_ENV when given) or stop the server through lifecycle; False when it failed
    (the one line why is shown)."""
    say(f"[trace] server {action}")
    console = Console(OUT, ERR)
    try:
        if action == "stop":
            lifecycle.stop(cfg, console=console)
        else:
            # traced: SGLang's own decode (the tracer records the plans of SGLang's FlashInfer backend; the
            # shared-prefix plugin's two-level steps would run plans of their own)
            settings = {} if server_env is None else {"SERVER_ENV": server_env, "SHARED_PREFIX_DECODE": "off"}
            lifecycle.restart(cfg, settings=settings, console=console)
    except ServeError as exc:  # ServerBusy too: lifecycle already waited BUSY_WAIT_S for the other command
        console.error(str(exc))
        return False
    return True


def wait_hook_loaded(trace_dir: Path, timeout_s: float) -> list[dict[str, Any]]:
    """Stats files of processes that patched SGLang's updaters (written right after the patch)."""
    deadline = time.monotonic() + timeout_s
    while True:
        patched = [s for s in read_stats(trace_dir) if s.get("patched")]
        if patched or time.monotonic() > deadline:
            return patched
        time.sleep(1)


def read_stats(trace_dir: Path) -> list[dict[str, Any]]:
    """Every tracing process's stats file (a file being replaced is skipped, not an error)."""
    stats = []
    for path in trace_dir.glob("stats-*.json"):
        try:
            stats.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return stats


def live_writers(trace_dir: Path) -> list[dict[str, Any]]:
    """Stats of the patched processes whose writer rewrote its file within STALE_S (the ones that can answer)."""
    now = time.time()
    return [s for s in read_stats(trace_dir) if s.get("patched") and now - s.get("updated_at", 0) < STALE_S]


def set_tracing(trace_dir: Path, on: bool, timeout_s: float = TOGGLE_TIMEOUT_S) -> None:
    """Pause (PAUSE file present) or resume sampling, and wait until every live writer reports the new state."""
    pause = trace_dir / "PAUSE"
    pause.unlink(missing_ok=True) if on else pause.touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = live_writers(trace_dir)
        if live and all(s.get("paused") is (not on) for s in live):
            return
        time.sleep(0.5)
    raise CaptureError(f"the tracer did not {'resume' if on else 'pause'} within {timeout_s:.0f}s (stats files in "
                       f"{trace_dir}) — look for [fi-trace] in ./serve.sh logs")


def stop_tracing(trace_dir: Path, timeout_s: float = 15.0) -> bool:
    """Create STOP and wait until every live writer has flushed and reported stopped."""
    (trace_dir / "STOP").touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = live_writers(trace_dir)
        if live and all(s.get("stopped") for s in live):
            return True
        time.sleep(0.5)
    return False


def analyze_dir(trace_dir: Path, out_dir: Path, n_windows: int = 12) -> tuple[Path, dict[str, Any]]:
    """trace.json from a trace directory (the capture host's env.json when present, else this machine's)."""
    from llmhost.fi.trace import analysis

    samples, stats = analysis.load_trace(trace_dir)
    result = analysis.analyze(samples, stats, n_windows)
    traffic = trace_dir / "traffic.json"
    doc = env.document({"stage": "trace", "trace_dir": str(trace_dir),
                        "traffic": analysis.read_json(traffic) if traffic.exists() else None, **result})
    captured_env = trace_dir / "env.json"
    if captured_env.exists():
        doc["env"] = analysis.read_json(captured_env)
    target = out_dir / "trace.json"
    env.write_document(target, doc)
    return target, doc


def capture(cfg: config.Config, opts: CaptureOptions) -> dict[str, Any]:
    """Restart with the hook, check it loaded, drive traffic, stop tracing; always restore the server after."""
    opts.trace_dir.mkdir(parents=True, exist_ok=False)
    # in a child process: a CUDA context held by this client would shrink the KV pool of the server it starts
    described = subprocess.run([sys.executable, "-m", "llmhost.fi.env"], capture_output=True, text=True, cwd=REPO,
                               check=False)
    if described.returncode == 0:
        files.write_text_atomic(opts.trace_dir / "env.json", described.stdout)
    was_running = lifecycle.running(cfg)
    (opts.trace_dir / "PAUSE").touch()  # the tracer starts paused: server warm-up and our warm-up are not sampled
    hooked = hook_server_env(cfg.server_env, os.environ.get("PYTHONPATH", ""), opts.trace_dir, opts.every)
    try:
        if not serve(cfg, "restart", hooked):
            raise CaptureError("the server did not start with the tracer — see ./serve.sh logs")
        patched = wait_hook_loaded(opts.trace_dir, opts.hook_timeout_s)
        if not patched:
            raise CaptureError(f"the tracer did not load in the server (no stats file in {opts.trace_dir}) — "
                               "look for [fi-trace] in ./serve.sh logs")
        say(f"[trace] tracer loaded in {len(patched)} process(es); {opts.duration_s:.0f}s of measured traffic "
            "(tracer off, on, on, off) after a warm-up")
        traffic = run_phases(cfg, opts, lambda on: set_tracing(opts.trace_dir, on))
        env.write_document(opts.trace_dir / "traffic.json", traffic)
        if not stop_tracing(opts.trace_dir):
            say("[trace] warning: not every process confirmed the stop; analyzing what was flushed", err=True)
    finally:
        action = "restart" if was_running else "stop"
        say(f"[trace] restoring the server without the tracer ({action})")
        restored = serve(cfg, action)
    if not restored:  # the traced server may still run, sampling into the trace directory
        raise CaptureError(f"./serve.sh {action} failed after the capture — the server may still run with the "
                           "tracer: ./serve.sh restart")
    if not traffic["ok"]:
        raise CaptureError(f"no request succeeded ({'; '.join(traffic['errors']) or 'no reply'}) — "
                           "check ./serve.sh status")
    return traffic


