"""Readiness tied to OUR process group: a stale server on the port answers health checks too, so a probe alone
once reported "ready" for a server that had died with "address already in use".

Ready needs all three: our group alive, the socket on PORT held by a PID of our group (where /proc shows it),
and a generation that succeeded: one token from POST /generate, which answers as soon as the server generates
(SGLang 0.5.17's /health_generate sleeps a whole second before it looks at its own test generation, and SGLang's
warm-up request runs beside ours). With ROUTER=on: the router's /readiness counts every worker as healthy (its
/health_generate says 200 once any one is, and generates nothing: sglang-router 0.3.2 on the H200), then /generate
on every worker we launched (/health_generate on WORKER_URLS). Reads /proc, the API key file and the server; writes
nothing.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from llmhost.config import Config
from llmhost.serve import router, serverlog
from llmhost.serve.console import Console
from llmhost.serve.endpoints import Reply, ServerClient
from llmhost.serve.procfs import group_alive, listeners, pgid_of, port_holder

State = Literal["ready", "starting", "dead", "foreign"]


def readiness(cfg: Config, pgid: int, client: ServerClient | None = None) -> tuple[State, str]:
    """(state, detail) for our server in process group `pgid`."""
    if not group_alive(pgid):
        return "dead", f"the server (process group {pgid}) exited"
    found = listeners(cfg.port)  # one read of the socket tables: two could see a listener without its owner
    if found is not None:
        inodes, owners = found
        if not inodes:
            return "starting", "not listening yet"
        if not any(pgid_of(p) == pgid for p in owners):
            return "foreign", f"port {cfg.port} is held by {port_holder(cfg.host, cfg.port)}, not by our server"
    client = client or probe_client(cfg)
    keyless = bool(cfg.api_key_file) and not client.api_key
    workers = router.worker_url_list(cfg) if router.is_on(cfg) else []
    if workers:
        short = _routes_to_fewer(client, len(workers))
        if short:
            return "starting", short
    else:
        reply, asked = _generate(client, keyless)
        if not reply.ok:
            return "starting", f"{asked} -> {reply.describe()}"
    for url in workers:  # the router's count says healthy, not serving: ready means each one generated
        # WORKER_URLS run elsewhere, perhaps with a key of their own: their open /health_generate
        reply, asked = _generate(ServerClient(url, client.api_key), keyless or bool(cfg.worker_urls))
        if not reply.ok:
            return "starting", f"the router serves; worker {url}: {asked} -> {reply.describe()}"
    return "ready", f"the router routes to all {len(workers)} workers, and each generated" if workers \
        else "a generation succeeded"


def probe_client(cfg: Config) -> ServerClient:
    """A client for cfg's server with its API key (/generate needs it); without, when the key cannot be read."""
    try:
        key = cfg.api_key()
    except OSError:
        key = None
    return ServerClient.for_config(cfg, key)


def _routes_to_fewer(client: ServerClient, workers: int) -> str:
    """'' once the router's /readiness counts `workers` healthy workers; else what it said."""
    reply = client.get("/readiness")
    if not reply.ok:
        return f"/readiness -> {reply.describe()}"
    healthy = router.healthy_workers(reply.text)
    if healthy is None:
        return f"/readiness -> {reply.text[:100]!r}"
    return "" if healthy >= workers else f"the router routes to {healthy} of {workers} workers (/readiness)"


def _generate(client: ServerClient, keyless: bool) -> tuple[Reply, str]:
    """One token from /generate; /health_generate when our key cannot open /generate (keyless): it is open."""
    return (client.health_generate(), "/health_generate") if keyless else (client.generate_token(), "/generate")


def wait_ready(cfg: Config, pgid: int, log: Path, timeout_s: float, every_s: float = 5.0,
               say: Callable[[str], None] = Console().info) -> tuple[bool, str]:
    """Poll readiness until ready, dead, foreign or timeout; a progress line every `every_s` seconds."""
    client = probe_client(cfg)
    start = time.monotonic()
    last_print = -every_s
    foreign_seen = 0
    while True:
        state, detail = readiness(cfg, pgid, client)
        elapsed = time.monotonic() - start
        if state == "ready":
            return True, f"ready after {elapsed:.0f}s ({detail})"
        # /proc changes while we read it: believe a stranger on the port only when seen on two polls in a row
        foreign_seen = foreign_seen + 1 if state == "foreign" else 0
        if state == "dead" or foreign_seen >= 2:
            return False, detail
        if elapsed >= timeout_s:
            return False, f"not ready after {timeout_s:.0f}s (READY_TIMEOUT_S); last: {detail}"
        if elapsed - last_print >= every_s:
            last_print = elapsed
            say(f"starting: {elapsed:.0f}s elapsed, timeout in {timeout_s - elapsed:.0f}s (H200: 30-50 s "
                f"with warm caches, ~2 min on a new host, ~7 min without FlashInfer's add-ons) | log: "
                f"{serverlog.last_line(log)}")
        time.sleep(0.5)
