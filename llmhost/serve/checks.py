"""Serve-side checks, before any work: the API key file, and what a launch needs from the host (model files,
SGLang's Python, free ports, GPU room, the GPUs of a TP/DP layout: llmhost/serve/parallel.py; sglang_router with
ROUTER=on). Every setting's own value is checked where it is loaded (llmhost.settings).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from llmhost.config import Config
from llmhost.serve import gpu, parallel, router
from llmhost.serve.console import ServeError
from llmhost.serve.procfs import port_holder
from llmhost.serve.spec import gpu_room_problem, server_env


def check_settings(cfg: Config) -> None:
    """What the settings' own checks (llmhost.settings, at load) cannot see without touching the disk: the API key
    file, refused when missing, empty or readable by others, before anything is launched (ServeError)."""
    try:
        key = cfg.api_key()
    except OSError as exc:
        raise ServeError(str(exc)) from None
    if cfg.api_key_file and not key:
        raise ServeError(f"{cfg.source('API_KEY_FILE')}: API_KEY_FILE={cfg.api_key_file} is empty — put the key on "
                         "its first line")


def check_launch(cfg: Config) -> None:
    """What a start needs from the host, checked before anything is launched (ServeError)."""
    if not (Path(cfg.model_dir) / "config.json").is_file():
        raise ServeError(f"MODEL_DIR={cfg.model_dir} has no config.json — run ./setup_host.sh or set MODEL_DIR")
    if not shutil.which(cfg.sglang_python):
        raise ServeError(f"SGLANG_PYTHON={cfg.sglang_python} is not an executable — run ./setup_host.sh or set it")
    ports = [(cfg.host, cfg.port, "PORT")]  # (host, port, the setting that moves it)
    if router.is_on(cfg):  # local workers on PORT+1, PORT+2...; the router's metrics
        ports += [(router.LOCAL_HOST, p, "PORT") for p in router.worker_ports(cfg)]
        ports.append((router.LOCAL_HOST, cfg.router_metrics_port, "ROUTER_METRICS_PORT"))
        if cfg.router_metrics_port in [p for _, p, _ in ports[:-1]]:  # free before launch, taken by a worker after
            raise ServeError(f"ROUTER_METRICS_PORT={cfg.router_metrics_port} is PORT or a worker's port (PORT+1.."
                             f"PORT+{len(ports) - 2}) — set ROUTER_METRICS_PORT to another port")
    for host, port, setting in ports:
        holder = port_holder(host, port)
        if holder:
            raise ServeError(f"port {port} is held by {holder} — stop it (./serve.sh stop if it is ours) "
                             f"or set {setting}=<free port>")
    environ = {**os.environ, **dict(server_env(dataclasses.replace(cfg, gpus="")))}
    if router.is_on(cfg) and subprocess.run([cfg.sglang_python, "-c", "import sglang_router"], env=environ,
                                            capture_output=True, timeout=60).returncode != 0:
        raise ServeError(f"ROUTER=on but SGLANG_PYTHON={cfg.sglang_python} cannot import sglang_router — install it "
                         f"there ({cfg.sglang_python} -m pip install sglang-router) or set ROUTER=off")
    parallel.check(cfg, environ=environ)
    room = gpu_room_problem(gpu.free_total_mib(parallel.first_device(cfg))) if cfg.mem_fraction_static == "auto" \
        else None
    if room:
        raise ServeError(room)
