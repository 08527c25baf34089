"""Is the benchmarked server there: its client, a liveness check, and the watch a load-generator pass polls; the
client whose /server_info describes the served model, and the prefix-cache flush a point starts with (with ROUTER=on
both ask the workers, not the router).

Alive means the recorded server process lives AND answers /health: with several tokenizer workers SGLang serves HTTP
from child processes that outlive a killed launcher and keep accepting requests that never finish.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from llmhost import config
from llmhost.serve import process, router
from llmhost.serve.endpoints import Flush, ServerClient


def server_client(cfg: config.Config) -> ServerClient:
    return ServerClient.for_config(cfg, cfg.api_key())


def info_client(cfg: config.Config) -> ServerClient:
    return ServerClient(router.info_url(cfg), cfg.api_key())


def flush_all(cfg: config.Config, wait_s: float) -> Flush:
    """Empty the prefix cache of the server, or with ROUTER=on of each worker, asked directly: sglang-router fans a
    flush out, and a worker's "busy" (SGLang's 400: ask again) comes back from it as a partial success (206, its
    docs), which says nothing about waiting. The first Flush that is not flushed, else flushed; one deadline."""
    deadline = time.monotonic() + wait_s
    clients = [ServerClient(url, cfg.api_key()) for url in router.worker_url_list(cfg)] if router.is_on(cfg) \
        else [server_client(cfg)]
    for client in clients:
        flush = client.flush_cache(wait_s=max(0.0, deadline - time.monotonic()))
        if not flush:
            return flush
    return flush


def server_alive(cfg: config.Config) -> bool:
    """The recorded server process lives and answers /health (its HTTP workers can outlive it)."""
    return not process.server_gone(cfg.state_dir) and server_client(cfg).health(timeout=10).ok


def server_watch(cfg: config.Config) -> Callable[[], str]:
    """What the load generator asks every second of a pass: '' or why the pass cannot finish (the server's
    process died: its requests would hang until the point's time limit)."""
    return lambda: process.server_gone(cfg.state_dir)
