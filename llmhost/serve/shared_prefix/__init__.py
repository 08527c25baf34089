"""Shared-prefix decode: running requests that share a prompt read its KV pages once per decode step, not once each.

SGLang 0.5.17 decodes every request over all its pages with FlashInfer, so 64 agents on 16 system prompts read each
prompt four times a layer. With SHARED_PREFIX_DECODE=on the server loads this package as an SGLang general plugin
(entry point group `sglang.srt.plugins`, found through the folder serve.sh puts first on the server's PYTHONPATH:
llmhost.serve.shared_prefix.plugin_dir) and its FlashInfer backend decodes in two levels
(llmhost.serve.shared_prefix.patches). Measured on an H200 in README, "Why these defaults".

register() is the entry point: it runs in each of the server's processes; only the scheduler builds the backend.
"""
from __future__ import annotations

import logging

VERIFIED_SGLANG = ("0.5.17",)  # the versions whose FlashInfer backend these patches were written and checked against
log = logging.getLogger("llmhost.shared_prefix")
_applied = False


def register() -> None:
    """SGLang's plugin hook: patch its FlashInfer backend, once per process, on a verified SGLang only."""
    global _applied
    if _applied:
        return
    import sglang

    version = getattr(sglang, "__version__", "?")
    if version not in VERIFIED_SGLANG:
        log.warning("shared-prefix decode: off, it is verified on SGLang %s only and this is %s",
                    ", ".join(VERIFIED_SGLANG), version)
        return
    try:
        import flashinfer  # noqa: F401 - SGLang's FlashInfer backend is what the patches teach
    except ImportError as exc:
        log.warning("shared-prefix decode: off, FlashInfer is not importable here (%s)", exc)
        return
    from llmhost.serve.shared_prefix import patches

    patches.apply(version)
    _applied = True
