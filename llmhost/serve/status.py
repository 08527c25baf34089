"""What a running server reports about itself, and one test reply: the body of `./serve.sh status` and of
the check `./serve.sh start` ends with (health, model, KV pool, requests, cache hits, uptime, GPU memory).

Reads the live server and $WORK_DIR/server/{pid,pgid,started_at}; writes nothing.
"""
from __future__ import annotations

import calendar
import time

from llmhost.config import Config
from llmhost.serve import router
from llmhost.serve.endpoints import ServerClient
from llmhost.serve.process import read_state, recorded_group
from llmhost.serve.procfs import port_holder


def _gauge(samples: list, name: str, mean: bool = False) -> float | None:
    """A scheduler gauge over the server's DP ranks (label dp_rank, SGLang's --dp-size): their sum, or with `mean`
    their mean (a share, like token_usage); within one DP rank its lowest tensor rank's series (tensor-parallel ranks
    report the same). None when absent."""
    from llmhost.serve import metrics

    lead: dict[str, metrics.Sample] = {}  # dp_rank ('' unlabelled) -> its lowest tp_rank's sample, first seen
    for s in metrics.select(samples, name):
        dp = s.labels.get("dp_rank", "")
        if dp not in lead or int(s.labels.get("tp_rank", 0)) < int(lead[dp].labels.get("tp_rank", 0)):
            lead[dp] = s
    values = [s.value for s in lead.values()]
    return (sum(values) / len(values) if mean else sum(values)) if values else None


def status_lines(cfg: Config, api_key: str | None, client: ServerClient | None = None) -> tuple[bool, list[str]]:
    """(healthy, report lines) from /health, /v1/models, /metrics, the recorded state and the GPU."""
    from llmhost.serve import gpu

    client = client or ServerClient.for_config(cfg, api_key)
    state = read_state(cfg.state_dir)
    health = client.health()
    ours = recorded_group(cfg.state_dir)
    if not health.ok:
        return False, [_not_serving(cfg, state, ours, health.describe())]
    lines = [f"health       : ok at {cfg.base_url}"]
    models = client.get("/v1/models")
    try:
        names = [m.get("id") for m in models.json().get("data", [])] if models.ok else [
            f"? (/v1/models -> {models.status})"]
    except (ValueError, AttributeError):  # not SGLang's JSON: say so, keep reporting
        names = ["? (/v1/models: not a model list)"]
    lines.append(f"served model : {', '.join(map(str, names))}")
    if router.is_on(cfg):
        lines += _service_lines(cfg, client)
    else:
        scrape = client.metrics()
        lines += _metric_lines(scrape.text) if scrape.ok else [
            f"metrics      : /metrics -> {scrape.describe()} (start with --enable-metrics)"]
    if ours and "started_at" in state:
        lines.append(f"process      : pid {state.get('pid', '?')}, group {ours} (ours), started {state['started_at']}")
        lines.append(f"uptime       : {_uptime(state['started_at'])}")
    else:
        lines.append(f"process      : NOT started by this serve.sh — {port_holder(cfg.host, cfg.port) or '?'}")
    lines.append(f"GPU memory   : {gpu.describe(gpu.devices())}")
    return True, lines


def _service_lines(cfg: Config, client: ServerClient) -> list[str]:
    """ROUTER=on: the router's readiness, then each worker's health, process, GPUs and live metrics."""
    from llmhost.serve import service

    ready = client.get("/readiness")
    urls = router.worker_url_list(cfg)
    healthy = router.healthy_workers(ready.text) if ready.ok else None
    routes = "" if healthy is None else f" (routes to {healthy} of {len(urls)} workers)"
    lines = [f"router       : {cfg.router_policy} policy, /readiness -> {ready.describe()}{routes}, its metrics on "
             f"http://{router.LOCAL_HOST}:{cfg.router_metrics_port}/metrics"]
    recorded = {m["port"]: m for m in service.read_members(cfg.state_dir) if m["name"] != "router"}
    for url in urls:
        worker = ServerClient(url, client.api_key)
        member = recorded.get(int(url.rsplit(":", 1)[1].rstrip("/")))
        where = "elsewhere (WORKER_URLS)"
        if member:
            pid = read_state(cfg.state_dir, (f"{member['name']}.pid",)).get(f"{member['name']}.pid", "?")
            gpus = service.command_env(member["command"]).get("CUDA_VISIBLE_DEVICES") or "all visible"
            where = f"{member['name']}, pid {pid}, GPUs {gpus}, log {cfg.state_dir / (member['name'] + '.log')}"
        health = worker.health()
        lines.append(f"worker       : {url} {'ok' if health.ok else 'DOWN (/health -> ' + health.describe() + ')'}"
                     f" — {where}")
        scrape = worker.metrics() if health.ok else None
        if scrape is not None and scrape.ok:
            lines += [f"  {line}" for line in _metric_lines(scrape.text)]
    return lines


def _not_serving(cfg: Config, state: dict[str, str], ours: int | None, why: str) -> str:
    if ours:  # ours, alive, not serving yet: starting (or stuck), not "down"
        from llmhost.serve import serverlog

        since = f" for {_uptime(state['started_at'])}" if "started_at" in state else ""
        return (f"server starting{since} (process group {ours}; /health -> {why}) — last log: "
                f"{serverlog.last_line(cfg.state_dir / 'server.log')} | ./serve.sh start waits for it, "
                "./serve.sh logs -f follows it")
    where = f" (recorded pgid {state['pgid']})" if "pgid" in state else ""
    return f"server down at {cfg.base_url}{where}: /health -> {why} — start it with ./serve.sh start"


def _metric_lines(text: str) -> list[str]:
    from llmhost.serve import metrics

    try:
        samples = metrics.parse(text)
    except metrics.MetricsError as exc:
        return [f"metrics      : unreadable ({exc})"]
    pool, usage = _gauge(samples, "sglang:max_total_num_tokens"), _gauge(samples, "sglang:token_usage", mean=True)
    running, queued = _gauge(samples, "sglang:num_running_reqs"), _gauge(samples, "sglang:num_queue_reqs")
    # cumulative: the sglang:cache_hit_rate gauge is the LAST prefill batch's and reads 0 after any decode
    prompt = metrics.total(samples, "sglang:prompt_tokens_total")
    cached = metrics.total(samples, "sglang:cached_tokens_total")
    return [
        f"KV pool      : {pool:,.0f} tokens" if pool is not None else
        "KV pool      : ? (no sglang:max_total_num_tokens)",
        f"requests     : {running or 0:.0f} running, {queued or 0:.0f} queued",
        f"token usage  : {100 * (usage or 0):.1f}% of the KV pool",
        f"cache hits   : {100 * (cached or 0) / prompt:.1f}% of {prompt:,.0f} prompt tokens since start (prefix cache)"
        if prompt else "cache hits   : no prompt served yet",
    ]


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
