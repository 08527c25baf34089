"""GPU suite fixtures: a missing CUDA, sglang or model is a skip with its reason on a machine that is not meant to
run the suite, and a FAILURE with `--require-gpu` (or LLMHOST_REQUIRE_GPU=1), so a broken GPU host never exits 0;
a serve.sh setup of its own (port, tmux server) on the caller's WORK_DIR and caches, so a server already running
from that WORK_DIR is a skip or failure of the same kind, saying to stop it; the results record written to
$GPU_SUITE_OUT (default results/gpu_suite/gpu_suite.json).

Run on the GPU host (see tests/gpu/test_1_serve_gpu.py for the one command), always with --require-gpu there."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from gpu_required import unavailable
from standin.harness import free_port

REPO = Path(__file__).resolve().parents[2]


def _probe(python: str, code: str) -> tuple[bool, str]:
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    lines = (out.stdout.strip() or out.stderr.strip()).splitlines()
    return out.returncode == 0, lines[-1] if lines else ""


@pytest.fixture(scope="session")
def gpu_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """serve.sh's environment: the caller's settings, a free port, a private tmux server and session name."""
    from llmhost import config
    from llmhost.serve import process

    cfg = config.load()
    running = process.recorded_group(cfg.state_dir)
    if running is not None:  # the suite's own start would find it and fail every step after it
        port = process.recorded_port(cfg.state_dir)
        unavailable(request, f"a server of ours already runs from WORK_DIR={cfg.work_dir} (process group {running}"
                    f"{f', port {port}' if port else ''}) — stop it first (./serve.sh stop): the GPU suite starts its "
                    "own servers and needs the whole GPU")
    python = shutil.which(cfg.sglang_python)
    if python is None:
        unavailable(request, f"SGLANG_PYTHON={cfg.sglang_python} not found (set SGLANG_PYTHON=python3 on a host with sglang)")
    ok, detail = _probe(python, "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))")
    if not ok:
        unavailable(request, f"no CUDA via {python}: {detail}")
    ok, detail = _probe(python, "import sglang; print(sglang.__version__)")
    if not ok:
        unavailable(request, f"sglang not importable by {python}: {detail}")
    if not (Path(cfg.model_dir) / "config.json").is_file():
        unavailable(request, f"MODEL_DIR={cfg.model_dir} has no config.json (set MODEL_DIR, LOAD_FORMAT=dummy needs no weights)")
    tmux_dir = tempfile.mkdtemp(prefix="tmxgpu", dir="/tmp")
    env = {**os.environ, "TMUX_TMPDIR": tmux_dir, "TMUX_SESSION": f"llmhost-gpu-suite-{os.getpid()}",
           "PORT": os.environ.get("PORT") or str(free_port(3))}  # ROUTER=on: workers on PORT+1, PORT+2
    env.pop("TMUX", None)
    yield env
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
    shutil.rmtree(tmux_dir, ignore_errors=True)


class Record:
    """Timings and outcomes per step, rewritten atomically after every step so a failed run still reports."""

    def __init__(self, path: Path, header: dict):
        self.path, self.data = path, {**header, "steps": {}}

    def step(self, name: str, **values: object) -> None:
        self.data["steps"].setdefault(name, {}).update(values)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        os.replace(tmp, self.path)


@pytest.fixture(scope="session")
def record(gpu_env):
    out_dir = Path(os.environ.get("GPU_SUITE_OUT") or REPO / "results" / "gpu_suite")
    out_dir.mkdir(parents=True, exist_ok=True)
    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    rec = Record(out_dir / "gpu_suite.json", {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git,
        "settings": {k: gpu_env.get(k, "") for k in ("SGLANG_PYTHON", "MODEL_DIR", "LOAD_FORMAT", "PORT")},
    })
    rec.save()
    yield rec
    rec.data["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rec.save()
    print(f"\nGPU suite record: {rec.path}")
