"""What the server's log says of the shared-prefix plugin once it is ready, so that `serve.sh start` with
SHARED_PREFIX_DECODE=on tells the user whether it took: the plugin's own line (on, or off and why), else SGLang's
failure to run it, else silence (another attention backend, or an SGLang that loads no plugins). Only a failure is a
warning: off for a reason the plugin gives (an FP8 KV cache, another SGLang) or silence leaves SGLang's own decode,
which is what on falls back to."""
from __future__ import annotations

from llmhost.config import Config
from llmhost.serve import router
from llmhost.serve.shared_prefix.plugin_dir import NAME
from llmhost.serve.startup import STAMP

OFF = "SGLang's own (SHARED_PREFIX_DECODE=off)"


def verdict(log_text: str) -> tuple[str, str]:
    """("on" | "off" | "failed", the line to print)."""
    on = off = failed = None
    for raw in log_text.splitlines():
        stamped = STAMP.match(raw)  # SGLang's "[2026-12-04 18:48:10 TP0] " before the message
        text = stamped.group(2) if stamped else raw
        if text.startswith("shared-prefix decode: on"):
            on = text
        elif text.startswith("shared-prefix decode: off"):
            off = text
        elif text.startswith(("Failed to execute general plugin: " + NAME, f"Failed to load plugin {NAME} ")):
            failed = text
    if on:
        return "on", on
    if off:
        return "off", f"SHARED_PREFIX_DECODE=on, but the server says: {off}"
    if failed:
        return "failed", (f"SHARED_PREFIX_DECODE=on, but SGLang could not run the plugin ({failed}): its traceback is "
                          "in ./serve.sh logs; the server decodes as SGLang does")
    return "off", ("SHARED_PREFIX_DECODE=on, but the server log has no line from the plugin: it speaks from SGLang's "
                   "FlashInfer attention backend, so this server uses another one (e.g. --attention-backend triton) "
                   "or its SGLang loaded no plugins (0.5.17 loads entry point group sglang.srt.plugins); it decodes "
                   "as SGLang does")


def of_server(cfg: Config) -> tuple[str, str]:
    """The decode a ready server runs: its verdict (status, line), ("off", OFF) with the setting off, or ("", "")
    when not known (ROUTER=on: each worker keeps its own log; or no log)."""
    if cfg.shared_prefix_decode != "on":
        return "off", OFF
    if router.is_on(cfg):
        return "", ""
    try:
        return verdict((cfg.state_dir / "server.log").read_text(errors="replace"))
    except OSError:
        return "", ""
