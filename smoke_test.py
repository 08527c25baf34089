#!/usr/bin/env python3
"""Validate a running SGLang model API end to end, or chat with it — on the GPU host or a laptop via SSH tunnel.

    ./smoke_test.py                       # = check: every smoke check, exit 0 only if all pass
    ./smoke_test.py check --json          # ... and one JSON summary as the last stdout line
    ./smoke_test.py check --only prefix_cache
    ./smoke_test.py check --tool-mode natural --weights real
    ./smoke_test.py chat --tools          # interactive streaming chat with the get_weather demo tool
    ./smoke_test.py --base-url http://127.0.0.1:30000/v1 --model qwen3-4b --api-key-file ~/.llmhost_key

Checks (llmhost/smoke/checks.py): chat (non-empty reply), model (served name), tools (a get_weather call; with real weights
its arguments name Paris), prefix_cache (a repeated ~4k-token prompt reuses >= 90% and is faster), stream (chunks +
TTFT). Real or random (--load-format dummy) weights: read from the server's /server_info unless --weights says it.
Defaults come from config.env: http://127.0.0.1:$PORT/v1, SERVED_MODEL_NAME, API_KEY_FILE (OPENAI_API_KEY wins over
the file; --api-key-file over both). From a laptop, first open the tunnel: ssh -N -L 30000:127.0.0.1:30000 user@host.
Writes nothing; needs Python >= 3.9, the `openai` package and the standard library. Exit 130 on Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import urlparse

if sys.version_info < (3, 9):  # a laptop's old system Python: one line, not a SyntaxError deep in an import
    sys.exit(f"smoke_test: Python {sys.version.split()[0]} is too old — use Python 3.9 or newer")

from llmhost.smoke import chat, checks as smoke  # noqa: E402
from llmhost import cli, client, deps  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--base-url", help="OpenAI-compatible base URL (default http://127.0.0.1:$PORT/v1)")
    common.add_argument("--model", help="expected served model name (default SERVED_MODEL_NAME)")
    common.add_argument("--api-key-file", help="file holding the API key (default $OPENAI_API_KEY, then API_KEY_FILE)")
    common.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    parser = cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode")
    check = sub.add_parser("check", parents=[common], help="run the smoke checks (default)")
    check.add_argument("--only", choices=list(smoke.CHECKS), help="run just this check")
    check.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    check.add_argument("--tool-mode", choices=smoke.TOOL_MODES, default="auto",
                       help="forced: tool_choice names get_weather (works on random weights); natural: tool_choice "
                            "auto (real weights); auto: forced, plus natural with real weights (default auto)")
    check.add_argument("--weights", choices=("auto", "real", "random"), default="auto",
                       help="real weights must fill in the tool arguments; auto: ask the server's /server_info "
                            "(load_format dummy = random) (default auto)")
    check.add_argument("--real-weights", dest="weights", action="store_const", const="real",
                       help="same as --weights real")
    check.add_argument("--max-tokens", type=int, default=32, help="reply length of chat/stream checks (default 32)")
    talk = sub.add_parser("chat", parents=[common], help="interactive streaming chat")
    talk.add_argument("--tools", action="store_true", help="start with the get_weather tool on")
    talk.add_argument("--tool-choice", choices=("auto", "forced"), default="auto",
                      help="with --tools: auto lets the model decide; forced makes it call get_weather (default auto)")
    talk.add_argument("--system", help="system prompt")
    talk.add_argument("--max-tokens", type=int, default=512, help="reply length limit in tokens (default 512)")
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    if not argv or argv[0] not in ("check", "chat", "-h", "--help"):
        argv = ["check", *argv]  # why: `smoke_test.py --json` means `smoke_test.py check --json`
    args = parser.parse_args(argv)
    if not 0 < args.timeout < float("inf") or args.max_tokens <= 0:  # why: nan/inf reach the socket as "cannot connect"
        parser.error("--timeout and --max-tokens must be positive (--timeout a finite number of seconds)")
    if args.mode == "check" and args.max_tokens < 2 and args.only in (None, "stream"):
        parser.error("--max-tokens must be at least 2 for the stream check (one token streams as one chunk)")
    if args.base_url:
        try:
            url = urlparse(args.base_url)
            url.port  # noqa: B018 - raises ValueError on a bad or out-of-range port
        except ValueError as exc:
            parser.error(f"--base-url {args.base_url}: {exc}")
        if url.scheme not in ("http", "https") or not url.hostname:
            parser.error(f"--base-url {args.base_url} needs a scheme and a host, e.g. http://127.0.0.1:30000/v1")
    if args.mode == "chat" and args.tool_choice == "forced":
        args.tools = True  # why: forcing a tool that is off would silently do nothing
    return args


def fail_early(args: argparse.Namespace, problem: str, ep: client.Endpoint | None = None, *,
               interrupted: bool = False) -> int:
    """One line on stderr; with --json also the summary line, so scripts always find one. Exit 1 (130: Ctrl-C)."""
    print(f"smoke_test: {problem}", file=sys.stderr)
    if getattr(args, "json", False):
        extra = {"interrupted": True} if interrupted else {}
        print(json.dumps({"ok": False, **(ep.public() if ep else {}), "error": problem, "checks": [], **extra}))
    return 130 if interrupted else 1


def weights(args: argparse.Namespace, ep: client.Endpoint, api: object) -> tuple[bool, str]:
    """(real weights?, where that came from) for the tools check."""
    if args.weights != "auto":
        return args.weights == "real", f"--weights {args.weights}"
    fmt, source = client.load_format(api, ep)
    if fmt is None:
        return False, f"assumed random: {source} — pass --weights real to check tool arguments"
    return fmt != "dummy", f"load_format {fmt} ({source})"


def run_check(args: argparse.Namespace, ep: client.Endpoint, api: object) -> int:
    served, problem = client.preflight(api, ep)
    if problem:
        return fail_early(args, problem, ep)
    real, source = weights(args, ep, api)
    print(f"[smoke] {ep.base_url} serves {served}; expecting '{ep.model}'; {'real' if real else 'random'} weights "
          f"({source})", flush=True)
    ctx = smoke.Ctx(api, ep, served, smoke.Options(args.tool_mode, real, args.max_tokens))
    results, interrupted = [], False
    try:
        for name in [args.only] if args.only else list(smoke.CHECKS):
            result = smoke.run_check(name, ctx)
            print(smoke.format_result(result), flush=True)
            results.append(result)
    except KeyboardInterrupt:
        interrupted = True
        print("\n[smoke] interrupted", file=sys.stderr)
    failed = [r.name for r in results if not r.ok]
    print(f"[smoke] {len(results) - len(failed)}/{len(results)} passed" + (f"; FAILED: {', '.join(failed)}"
                                                                          if failed else ""))
    if args.json:  # ASCII only: the line must survive any stdout encoding
        doc = {**smoke.summary(ep, results), "weights": "real" if real else "random", "weights_source": source}
        if interrupted:
            doc.update(ok=False, interrupted=True)
        print(json.dumps(doc, default=str))
    return 130 if interrupted else (1 if failed else 0)


def run_chat(args: argparse.Namespace, ep: client.Endpoint, api: object) -> int:
    _, problem = client.preflight(api, ep)
    if problem:
        return fail_early(args, problem)
    try:
        import readline  # noqa: F401 - line editing and history for input(), where available
    except ImportError:
        pass
    mode = args.tool_choice if args.tools else "off"
    return chat.repl(api, ep, chat.Session(system=args.system, tool_mode=mode), args.max_tokens)


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # random-weight text on a non-UTF-8 console must not crash a check
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = parse(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the command line: a python3 without openai re-runs this under one that has it (llmhost/deps.py)
        deps.rerun_elsewhere(__file__, ("openai",), "smoke")  # none has it: run() says so in one line
    try:
        return run(args)
    except KeyboardInterrupt:  # Ctrl-C while importing openai or connecting (a hung tunnel): one line, no traceback
        return fail_early(args, "interrupted", interrupted=True)


def run(args: argparse.Namespace) -> int:
    try:
        ep = client.resolve(args.base_url, args.model, args.api_key_file)
    except client.ClientError as exc:
        return fail_early(args, str(exc))
    try:
        api = client.make_client(ep, args.timeout)
    except (ImportError, AttributeError):  # a laptop with only the repo cloned, or openai < 1.0 (no OpenAI class)
        return fail_early(args, f"the openai package (>= 1.0) is not installed in {sys.executable} — "
                                "pip install -U openai", ep)
    return run_chat(args, ep, api) if args.mode == "chat" else run_check(args, ep, api)


if __name__ == "__main__":
    raise SystemExit(main())
