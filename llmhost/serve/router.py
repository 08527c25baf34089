"""ROUTER=on: sglang-router on HOST:PORT in front of several SGLang servers, launched and stopped as one service.

The members, in launch order: DP_SIZE local workers (unless WORKER_URLS names servers elsewhere), each a whole
SGLang server with --tp-size TP_SIZE on loopback port PORT+1+i and its TP_SIZE GPUs taken in GPUS order, then the
router. Data parallelism is across these processes (the router balances), so no worker gets --dp-size. The router
launches once every local worker's HTTP server answers, so its own start overlaps the workers' SGLang warm-up (2 s on
the H200; /health says 503 until it is done, and the router registers a worker once its /health says 200); a worker
that shares its GPU launches once the one before it there holds its KV pool, the bulk of its memory, which the later
one must see to size its own pool. What the earlier one takes after that (CUDA graphs, activations) comes out of the
runtime reserves both are planned with, so the later one's imports overlap the earlier one's graphs and HTTP start.

Two workers on one GPU (GPUS=0,0 DP_SIZE=2) each take an equal static pool: with MEM_FRACTION_STATIC=auto, worker j of
k sharing it gets the fraction of the memory free at ITS start (SGLang's rule) that is 1/k of the GPU's free memory
less every sharer's runtime reserve (see shared_fractions).

The router gets the API key without it ever being on a command line: llmhost/serve/router_main.py reads it from the
0600 YAML the workers read. Its Prometheus /metrics stays on 127.0.0.1:ROUTER_METRICS_PORT (sglang-router's default
host is 0.0.0.0), and it listens on HOST like the one server would. Nothing is written here.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from llmhost.config import Config
from llmhost.serve.spec import CONFIG_FILE_NAME, ServerSpec, SpecError, build_spec, gpu_reserve_mib, server_env

ROUTER_MAIN = Path(__file__).resolve().parent / "router_main.py"
LOCAL_HOST = "127.0.0.1"  # workers behind the router are reached through it only
_MIN_POOL_MIB = 2 * 1024  # as spec.py: below this a worker's weights + KV pool cannot fit


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """One process of the service: a local worker or the router."""

    name: str  # worker0, worker1, ..., router
    spec: ServerSpec
    port: int
    after: tuple[str, ...]  # members whose HTTP server must answer before this one launches
    pool_mib: float | None = None  # a worker sharing its GPU: the static pool (weights + KV) it is sized for
    after_pool: tuple[str, ...] = ()  # workers on its GPU that must hold their KV pool before this one launches

    @property
    def url(self) -> str:
        return f"http://{LOCAL_HOST}:{self.port}"


def is_on(cfg: Config) -> bool:
    return cfg.router == "on"


def worker_ports(cfg: Config) -> list[int]:
    """Loopback ports of the local workers (none when WORKER_URLS names remote ones)."""
    return [] if cfg.worker_urls else [cfg.port + 1 + i for i in range(cfg.dp_size)]


def worker_url_list(cfg: Config) -> list[str]:
    """The workers the router balances: WORKER_URLS, else the local ones."""
    return cfg.worker_urls.split() or [f"http://{LOCAL_HOST}:{port}" for port in worker_ports(cfg)]


def healthy_workers(readiness_body: str) -> int | None:
    """How many workers sglang-router routes to, from its /readiness body ({"status": "ready", "healthy_workers": 2,
    "total_workers": 2}); None when the body says nothing of it (503: {"status": "not ready", "reason": ...})."""
    try:
        count = json.loads(readiness_body).get("healthy_workers")
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) else None


def info_url(cfg: Config) -> str:
    """Where /server_info describes the model served: the server, or with ROUTER=on the first worker — sglang-router
    0.3.2 has no /server_info, and its /get_server_info is its own counts ({"router_manager": true, ...})."""
    return worker_url_list(cfg)[0] if is_on(cfg) else cfg.base_url


def shared_pool_mib(sharers: int, free_mib: float, total_mib: float) -> float:
    """The equal static pool S = (free - sharers x reserve) / sharers of `sharers` workers on one GPU."""
    reserve = gpu_reserve_mib(total_mib)
    pool = (free_mib - sharers * reserve) / sharers
    if pool < _MIN_POOL_MIB:
        raise SpecError(f"{sharers} workers cannot share a GPU with {free_mib / 1024:.1f} GiB free: each needs its "
                        f"{reserve / 1024:.1f} GiB runtime reserve plus a pool — list fewer in GPUS")
    return pool


def shared_fractions(sharers: int, free_mib: float, total_mib: float) -> list[float]:
    """--mem-fraction-static of each of `sharers` workers launched one after another on one GPU, as planned at
    start: equal static pools S (shared_pool_mib); worker j is expected to see free - j x (S + reserve) at its
    start, so its fraction is S / that. Two on an empty H200 (143,771 MiB, reserve 13,946): S = 57,940 MiB ->
    0.403, then 0.806. A worker uses less than its reserve beyond its pool, so the service re-fits each later
    worker's fraction to the memory free at its launch (llmhost.serve.service.refit_fraction)."""
    reserve = gpu_reserve_mib(total_mib)
    pool = shared_pool_mib(sharers, free_mib, total_mib)
    return [round(pool / (free_mib - j * (pool + reserve)), 3) for j in range(sharers)]


def _worker_gpus(cfg: Config, devices: Sequence[str]) -> list[str]:
    """GPUs of each local worker, as CUDA_VISIBLE_DEVICES values ('' when none are known, e.g. no driver)."""
    if len(devices) < cfg.tp_size * cfg.dp_size:
        return ["" for _ in range(cfg.dp_size)]
    return [",".join(devices[i * cfg.tp_size:(i + 1) * cfg.tp_size]) for i in range(cfg.dp_size)]


def local_workers(cfg: Config, devices: Sequence[str], gpu_free_total_mib: tuple[float, float] | None,
                  extra_args: Sequence[str] = ()) -> list[Member]:
    """The DP_SIZE local workers: same flags as the one server, but their own port and GPUs, and no --dp-size."""
    gpus = _worker_gpus(cfg, devices)
    sharers = Counter(gpus)
    seen: Counter = Counter()
    fractions = {g: shared_fractions(n, *gpu_free_total_mib) for g, n in sharers.items()
                 if g and n > 1 and cfg.mem_fraction_static == "auto" and gpu_free_total_mib}
    pools = {g: shared_pool_mib(sharers[g], *gpu_free_total_mib) for g in fractions}
    members = []
    for i, (port, devs) in enumerate(zip(worker_ports(cfg), gpus)):
        changes: dict[str, object] = {"host": LOCAL_HOST, "port": port, "dp_size": 1, "gpus": devs, "router": "off"}
        if devs in fractions:
            changes["mem_fraction_static"] = str(fractions[devs][seen[devs]])
        previous = [m.name for m, g in zip(members, gpus) if g == devs and devs]
        seen[devs] += 1
        spec = build_spec(dataclasses.replace(cfg, **changes),
                          gpu_free_total_mib=None if devs in fractions else gpu_free_total_mib, extra_args=extra_args,
                          gpu_total_mib=gpu_free_total_mib[1] if gpu_free_total_mib else None)
        members.append(Member(f"worker{i}", spec, port, (), pools[devs] if devs in pools and previous else None,
                              tuple(previous[-1:])))
    return members


def router_member(cfg: Config, urls: Sequence[str], after: Sequence[str]) -> Member:
    """sglang-router in front of `urls`, on HOST:PORT; the key (when set) reaches it through router_main.py."""
    python = cfg.sglang_python if "/" in cfg.sglang_python else (shutil.which(cfg.sglang_python) or cfg.sglang_python)
    key_file = str(Path(cfg.state_dir) / CONFIG_FILE_NAME) if cfg.api_key_file else None
    argv = (python, str(ROUTER_MAIN), *(("--api-key-from", key_file) if key_file else ()),
            "--host", cfg.host, "--port", str(cfg.port), "--worker-urls", *urls, "--policy", cfg.router_policy,
            "--prometheus-host", LOCAL_HOST, "--prometheus-port", str(cfg.router_metrics_port),
            # sglang-router retries a worker that is not healthy yet after 30 s by default (then 60 s, ...), after
            # 1 s with this (then 2 s, ...): ours answer HTTP when it starts and finish their warm-up about then
            "--worker-startup-check-interval", "1")
    env = server_env(dataclasses.replace(cfg, gpus=""))  # SERVER_ENV too (a container's PYTHONPATH, say); no GPU
    return Member("router", ServerSpec(argv, env, key_file, ()), cfg.port, tuple(after))


def members(cfg: Config, devices: Sequence[str], gpu_free_total_mib: tuple[float, float] | None,
            extra_args: Sequence[str] = ()) -> list[Member]:
    """Every process of the ROUTER=on service, in launch order (router last); extra_args (an arm's) go to workers."""
    if cfg.nnodes > 1:
        raise SpecError("ROUTER=on with NNODES > 1: run each host's server on its own and list them in WORKER_URLS")
    workers = [] if cfg.worker_urls else local_workers(cfg, devices, gpu_free_total_mib, extra_args)
    return [*workers, router_member(cfg, worker_url_list(cfg), [w.name for w in workers])]
