"""SGLang 0.5.17's general plugins (sglang/srt/plugins/__init__.py: load_plugins), as the stand-in runs them: every
entry point of the group `sglang.srt.plugins` on sys.path is loaded and called, in the launcher and again in the
scheduler, with SGLang's log lines. A plugin that needs the GPU stack (torch, flashinfer) fails here, or says it is
off as ours does, as on a host without them: SGLang logs the exception and serves on."""
from __future__ import annotations

import traceback
from importlib.metadata import entry_points

GROUP = "sglang.srt.plugins"


def load_plugins(log) -> None:
    found = entry_points(group=GROUP)
    if not found:
        return  # SGLang says so at debug level only
    log(f"Available plugins for group {GROUP}:")
    for ep in found:
        log(f"  - {ep.name} -> {ep.value}")
    for ep in found:
        try:
            func = ep.load()
        except Exception:  # noqa: BLE001 - SGLang's logger.exception, then the next plugin
            log(f"Failed to load plugin {ep.name} from group {GROUP}\n{traceback.format_exc().rstrip()}")
            continue
        log(f"Loaded plugin {ep.name} from group {GROUP}")
        try:
            func()
            log(f"Executed general plugin: {ep.name}")
        except Exception:  # noqa: BLE001
            log(f"Failed to execute general plugin: {ep.name}\n{traceback.format_exc().rstrip()}")
