"""FREEZE_GC=on: once a start is ready, SGLang's POST /freeze_gc has its HTTP/tokenizer process, scheduler and
detokenizer call gc.freeze(). What start-up created (torch, the model, the tokenizer: 0.7-1.1 million objects per
process on the H200) leaves the garbage collector, so a full collection no longer walks all of it while requests wait.
One POST reaches every scheduler of a server: SGLang 0.5.17's data-parallel controller forwards it to each DP rank,
and each TP rank receives what its rank 0 does.

Only servers this start launched are frozen: the one server, or the local workers behind ROUTER=on (the router
itself is Rust); never the servers WORKER_URLS names, which another host runs. A refused freeze is a warning:
the server serves all the same.
"""
from __future__ import annotations

from llmhost.config import Config
from llmhost.serve import router
from llmhost.serve.console import Console
from llmhost.serve.endpoints import ServerClient


def targets(cfg: Config) -> list[str]:
    """Base URLs of the SGLang servers this start launched."""
    if router.is_on(cfg):
        return [] if cfg.worker_urls else router.worker_url_list(cfg)
    return [cfg.base_url]


def freeze(cfg: Config, console: Console) -> bool:
    """POST /freeze_gc to each launched server (FREEZE_GC=on); True when every one answered 200."""
    if cfg.freeze_gc != "on":
        return False
    urls = targets(cfg)
    key = cfg.api_key()
    refused = [f"{url}: {reply.describe()}" for url in urls
               if not (reply := ServerClient(url, key).freeze_gc()).ok]
    if refused:
        console.warn(f"FREEZE_GC=on but /freeze_gc failed ({'; '.join(refused)}): the server serves, its garbage "
                     "collector unfrozen")
        return False
    if urls:
        console.info(f"garbage collector frozen after start-up (FREEZE_GC=on, {len(urls)} "
                     f"server{'s' if len(urls) > 1 else ''})")
    return bool(urls)
