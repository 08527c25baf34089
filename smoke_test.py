#!/usr/bin/env python3
"""Validate a running SGLang model API end to end, or chat with it — on the GPU host or a laptop via SSH tunnel.

    ./smoke_test.py                       # = check: every smoke check, exit 0 only if all pass
    ./smoke_test.py check --json          # ... and one JSON summary as the last stdout line
    ./smoke_test.py check --only prefix_cache
    ./smoke_test.py check --tool-mode natural --real-weights
    ./smoke_test.py chat --tools          # interactive streaming chat with the get_weather demo tool
    ./smoke_test.py --base-url http://127.0.0.1:30000/v1 --model qwen3-4b --api-key-file ~/.llmhost_key

Checks (llmhost/smoke.py): chat (non-empty reply), model (served name), tools (get_weather call with JSON args),
prefix_cache (2nd identical ~4k-token prompt reuses >= 90% and is faster), stream (chunks + TTFT).
Defaults come from config.env: http://127.0.0.1:$PORT/v1, SERVED_MODEL_NAME, API_KEY_FILE (OPENAI_API_KEY wins over
the file; --api-key-file over both). From a laptop, first open the tunnel: ssh -N -L 30000:127.0.0.1:30000 user@host.
Writes nothing; needs only the `openai` package and the standard library.
"""
from __future__ import annotations

import argparse
import json
import sys

from llmhost import chat, client, smoke


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--base-url", help="OpenAI-compatible base URL (default http://127.0.0.1:$PORT/v1)")
    common.add_argument("--model", help="expected served model name (default SERVED_MODEL_NAME)")
    common.add_argument("--api-key-file", help="file holding the API key (default $OPENAI_API_KEY, then API_KEY_FILE)")
    common.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode")
    check = sub.add_parser("check", parents=[common], help="run the smoke checks (default)")
    check.add_argument("--only", choices=list(smoke.CHECKS), help="run just this check")
    check.add_argument("--json", action="store_true", help="print one JSON summary as the last stdout line")
    check.add_argument("--tool-mode", choices=smoke.TOOL_MODES, default="auto",
                       help="forced: tool_choice names get_weather (works on random weights); natural: tool_choice "
                            "auto (real weights); auto: forced, plus natural with --real-weights (default auto)")
    check.add_argument("--real-weights", action="store_true", help="the server runs real weights (LOAD_FORMAT=auto)")
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
    if args.timeout <= 0 or args.max_tokens <= 0:
        parser.error("--timeout and --max-tokens must be positive")
    if args.base_url and not args.base_url.startswith(("http://", "https://")):
        parser.error(f"--base-url {args.base_url} needs its scheme, e.g. http://127.0.0.1:30000/v1")
    return args


def run_check(args: argparse.Namespace, ep: client.Endpoint, api: object) -> int:
    served, problem = client.preflight(api, ep)
    if problem:
        print(f"smoke_test: {problem}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, **ep.public(), "error": problem, "checks": []}))
        return 1
    print(f"[smoke] {ep.base_url} serves {served}; expecting '{ep.model}'", flush=True)
    ctx = smoke.Ctx(api, ep, served, smoke.Options(args.tool_mode, args.real_weights, args.max_tokens))
    results = []
    for name in [args.only] if args.only else list(smoke.CHECKS):
        result = smoke.run_check(name, ctx)
        print(smoke.format_result(result), flush=True)
        results.append(result)
    failed = [r.name for r in results if not r.ok]
    print(f"[smoke] {len(results) - len(failed)}/{len(results)} passed" + (f"; FAILED: {', '.join(failed)}"
                                                                          if failed else ""))
    if args.json:
        print(json.dumps(smoke.summary(ep, results), ensure_ascii=False, default=str))
    return 1 if failed else 0


def run_chat(args: argparse.Namespace, ep: client.Endpoint, api: object) -> int:
    _, problem = client.preflight(api, ep)
    if problem:
        print(f"smoke_test: {problem}", file=sys.stderr)
        return 1
    try:
        import readline  # noqa: F401 - line editing and history for input(), where available
    except ImportError:
        pass
    mode = args.tool_choice if args.tools else "off"
    return chat.repl(api, ep, chat.Session(system=args.system, tool_mode=mode), args.max_tokens)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        ep = client.resolve(args.base_url, args.model, args.api_key_file)
    except client.ClientError as exc:
        print(f"smoke_test: {exc}", file=sys.stderr)
        return 1
    try:
        api = client.make_client(ep, args.timeout)
    except ImportError:  # a laptop with only the repo cloned
        print(f"smoke_test: the openai package is not installed in {sys.executable} — pip install openai",
              file=sys.stderr)
        return 1
    return run_chat(args, ep, api) if args.mode == "chat" else run_check(args, ep, api)


if __name__ == "__main__":
    raise SystemExit(main())
