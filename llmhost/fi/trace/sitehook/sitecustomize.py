"""Opt-in loader of llmhost's FlashInfer page-table tracer (llmhost/fi/trace/hook.py) into the SGLang server.

Python imports the first `sitecustomize` on sys.path at start-up, in every process, including the scheduler
processes SGLang spawns. Putting this directory first on the server's PYTHONPATH is therefore the one way to run
code inside those processes without editing SGLang:

    SERVER_ENV="PYTHONPATH=<repo>/llmhost/fi/trace/sitehook:$PYTHONPATH LLMHOST_FI_TRACE_DIR=<dir>" ./serve.sh restart
    (fi_trace.py capture does the same through llmhost.serve.lifecycle, then restores the server without it)

Without LLMHOST_FI_TRACE_DIR this file does nothing but hand over to the sitecustomize it shadows (e.g. the
distribution's), so a stray PYTHONPATH entry costs nothing: no llmhost or sglang import, no patch.
"""
import importlib.util
import os
import sys

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _chain_shadowed() -> None:
    """Run the next sitecustomize.py on sys.path, which this one hides."""
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _HOOK_DIR:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_llmhost_shadowed_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _activate() -> None:
    repo_root = _HOOK_DIR
    for _ in range(4):  # <repo>/llmhost/fi/trace/sitehook
        repo_root = os.path.dirname(repo_root)
    if repo_root not in sys.path:
        sys.path.append(repo_root)  # appended: never shadows the server's own packages
    from llmhost.fi.trace import hook

    hook.install_from_env()


_chain_shadowed()
if os.environ.get("LLMHOST_FI_TRACE_DIR"):
    try:
        _activate()
    except Exception as exc:  # a broken tracer must not keep the server from starting
        print(f"[fi-trace] tracer not loaded: {type(exc).__name__}: {exc}", file=sys.stderr)
