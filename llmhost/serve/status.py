"""What a running server reports about itself, and one test reply: the body of `./serve.sh status` and of
the check `./serve.sh start` ends with.

    python3 -m llmhost.serve.status            # health, model, KV pool, requests, cache hits, uptime, GPU memory
    python3 -m llmhost.serve.status chat       # one chat completion through the OpenAI SDK, with its latency
Reads the live server and $WORK_DIR/server/{pid,pgid,started_at}; writes nothing.
"""
from __future__ import annotations

import argparse
import calendar
import json
import sys
import time
from pathlib import Path

from llmhost.config import Config, ConfigError, load
from llmhost.serve.procfs import port_holder
from llmhost.serve.server import http_get, recorded_group


def read_state(state_dir: Path) -> dict[str, str]:
    """pid, pgid, started_at as serve.sh recorded them ({} when nothing was started)."""
    out = {}
    for name in ("pid", "pgid", "started_at"):
        path = state_dir / name
        if path.is_file():
            out[name] = path.read_text().strip()
    return out


def _gauge(samples: list, name: str) -> float | None:
    """A scheduler gauge: rank 0's series when ranks are labelled (tensor parallel), else the only one."""
    from llmhost.serve import metrics

    found = metrics.select(samples, name)
    ranked = [s for s in found if s.labels.get("tp_rank", "0") == "0"]
    return (ranked or found)[0].value if found else None


def status_lines(cfg: Config, api_key: str | None) -> tuple[bool, list[str]]:
    """(healthy, report lines) from /health, /v1/models, /metrics, the recorded state and the GPU."""
    from llmhost.serve import gpu, metrics

    state = read_state(cfg.state_dir)
    code, body = http_get(cfg, "/health", timeout=5.0)
    ours = recorded_group(cfg.state_dir)
    if code != 200:
        pgid = ours
        if pgid:  # ours, alive, not serving yet: starting (or stuck), not "down"
            from llmhost.serve import serverlog

            since = f" for {_uptime(state['started_at'])}" if "started_at" in state else ""
            return False, [f"server starting{since} (process group {pgid}; /health -> {code or body}) — last log: "
                           f"{serverlog.last_line(cfg.state_dir / 'server.log')} | ./serve.sh start waits for it, "
                           "./serve.sh logs -f follows it"]
        where = f" (recorded pgid {state['pgid']})" if "pgid" in state else ""
        return False, [f"server down at {cfg.base_url}{where}: /health -> {code or body} — start it with "
                       "./serve.sh start"]
    lines = [f"health       : ok at {cfg.base_url}"]
    code, body = http_get(cfg, "/v1/models", timeout=5.0, api_key=api_key)
    models = [m.get("id") for m in json.loads(body).get("data", [])] if code == 200 else [f"? (/v1/models -> {code})"]
    lines.append(f"served model : {', '.join(map(str, models))}")
    code, body = http_get(cfg, "/metrics", timeout=5.0)
    if code == 200:
        samples = metrics.parse(body)
        pool, usage = _gauge(samples, "sglang:max_total_num_tokens"), _gauge(samples, "sglang:token_usage")
        running, queued = _gauge(samples, "sglang:num_running_reqs"), _gauge(samples, "sglang:num_queue_reqs")
        # cumulative: the sglang:cache_hit_rate gauge is the LAST prefill batch's and reads 0 after any decode
        prompt, cached = metrics.total(samples, "sglang:prompt_tokens_total"), metrics.total(
            samples, "sglang:cached_tokens_total")
        lines += [
            f"KV pool      : {pool:,.0f} tokens" if pool is not None else "KV pool      : ? (no sglang:max_total_num_tokens)",
            f"requests     : {running or 0:.0f} running, {queued or 0:.0f} queued",
            f"token usage  : {100 * (usage or 0):.1f}% of the KV pool",
            f"cache hits   : {100 * (cached or 0) / prompt:.1f}% of {prompt:,.0f} prompt tokens since start (prefix cache)"
            if prompt else "cache hits   : no prompt served yet",
        ]
    else:
        lines.append(f"metrics      : /metrics -> {code or body} (start with --enable-metrics)")
    pgid = ours
    if pgid and "started_at" in state:
        lines.append(f"process      : pid {state.get('pid', '?')}, group {pgid} (ours), started {state['started_at']}")
        lines.append(f"uptime       : {_uptime(state['started_at'])}")
    else:
        lines.append(f"process      : NOT started by this serve.sh — {port_holder(cfg.host, cfg.port) or '?'}")
    lines.append(f"GPU memory   : {gpu.describe(gpu.devices())}")
    return True, lines


def _uptime(started_at: str) -> str:
    try:
        # timegm: started_at is UTC; mktime + time.timezone was an hour off on hosts in summer time
        seconds = int(time.time() - calendar.timegm(time.strptime(started_at, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return "?"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def test_chat(cfg: Config, api_key: str | None) -> tuple[bool, str]:
    """One short chat completion through the OpenAI SDK: (ok, 'reply in 0.42 s: ...' or the error)."""
    from openai import OpenAI

    client = OpenAI(base_url=cfg.base_url + "/v1", api_key=api_key or "none", max_retries=0, timeout=120.0)
    start = time.perf_counter()
    try:
        reply = client.chat.completions.create(
            model=cfg.served_model_name, max_tokens=24, temperature=0.0,
            messages=[{"role": "user", "content": "Say hello in five words."}],
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},  # a short answer, no <think> block
        )
    except Exception as exc:  # the SDK's connection/status errors: report, do not trace
        return False, f"test chat failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    latency = time.perf_counter() - start
    text = (reply.choices[0].message.content or "").strip().replace("\n", " ")
    return True, f"test reply in {latency:.2f} s ({reply.usage.completion_tokens} tokens): {text[:200]!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("status", "chat"), default="status",
                        help="status: the report, exit 1 when down (default); chat: one test reply")
    args = parser.parse_args(argv)
    try:
        cfg = load()
        api_key = cfg.api_key()
    except (ConfigError, OSError) as exc:
        print(f"[serve] error: {exc}", file=sys.stderr)
        return 1
    try:
        if args.what == "chat":
            ok, line = test_chat(cfg, api_key)
            print(f"[serve] {line}", file=sys.stdout if ok else sys.stderr)
            return 0 if ok else 1
        healthy, lines = status_lines(cfg, api_key)
    except ImportError as exc:  # serve.sh falls back to the host python3 when SGLANG_PYTHON does not exist
        print(f"[serve] error: {exc.name} is not importable in {sys.executable} — set SGLANG_PYTHON to the Python "
              "that has sglang (./setup_host.sh installs it)", file=sys.stderr)
        return 1
    if not healthy:
        print(f"[serve] {lines[0]}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
