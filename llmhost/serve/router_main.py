"""Start sglang-router with the API key from the workers' 0600 YAML, so the key is never on a command line
(/proc/PID/cmdline, launch_command.txt, ps): sglang-router 0.3.2 takes it only as --api-key.

    SGLANG_PYTHON llmhost/serve/router_main.py [--api-key-from $WORK_DIR/server/sglang_config.yaml] ROUTER_ARGS...

Run by path by the ROUTER=on service (llmhost/serve/router.py), with the Python that has sglang_router; stdlib
otherwise. The router's arguments are sglang-router's own (python -m sglang_router.launch_router --help).
"""
from __future__ import annotations

import json
import sys

# sglang-router 0.3.2's launch_router imports its Python mini load balancer, which tries
# `from sglang.srt.tracing.trace import ...` for its tracing. SGLang 0.5.17 has no such module, but Python imports the
# `sglang` package first, which imports transformers and SGLang's own modules: 4.4-4.7 s on the H200 host from
# compiled bytecode (12 s without), of the 8 s between the router's launch and its Rust core's first log line. The Rust
# router we launch uses none of it; a None entry makes that one import fail at once (the mini balancer then runs
# without tracing, as it does on 0.5.17 anyway).
SGLANG_TRACING = "sglang.srt.tracing.trace"


def keep_sglang_out() -> None:
    sys.modules.setdefault(SGLANG_TRACING, None)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--api-key-from"]:
        # the file start writes: one line `api-key: "<key as a JSON string>"`
        key = json.loads(open(argv[1]).read().split(":", 1)[1].strip())
        argv = [*argv[2:], "--api-key", key]
    keep_sglang_out()
    from sglang_router.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
