"""Is the benchmarked server there: its client, a liveness check, and the watch a load-generator pass polls; and
the client whose /server_info describes the served model (with ROUTER=on a worker's, not the router's).

Alive means the recorded server process lives AND answers /health: with several tokenizer workers SGLang serves HTTP
from child processes that outlive a killed launcher and keep accepting requests that never finish.
"""
from __future__ import annotations

from collections.abc import Callable

from llmhost import config
from llmhost.serve import process, router
from llmhost.serve.endpoints import ServerClient


def server_client(cfg: config.Config) -> ServerClient:
    return ServerClient.for_config(cfg, cfg.api_key())


def info_client(cfg: config.Config) -> ServerClient:
    return ServerClient(router.info_url(cfg), cfg.api_key())


def server_alive(cfg: config.Config) -> bool:
    """The recorded server process lives and answers /health (its HTTP workers can outlive it)."""
    return not process.server_gone(cfg.state_dir) and server_client(cfg).health(timeout=10).ok


def server_watch(cfg: config.Config) -> Callable[[], str]:
    """What the load generator asks every second of a pass: '' or why the pass cannot finish (the server's
    process died: its requests would hang until the point's time limit)."""
    return lambda: process.server_gone(cfg.state_dir)
