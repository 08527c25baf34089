"""/metrics text: the families, HELP/TYPE lines and label sets of SGLang 0.5.17 (captured), with live values.

Live: request/queue gauges, token usage, cache hit rate, KV token counts, prompt/generation/request/cached-token
counters, TTFT / e2e / inter-token-latency / queue-time / per-stage histograms (the captured bucket bounds), HTTP
request counters.
Every other family keeps the sample lines of a freshly started real server (tests/captures/GET_metrics.txt).
As on SGLang 0.5.17: cache_hit_rate is the last prefill batch's and reads 0.0 once decoding ran, and the families
missing from the fresh capture (cached_tokens_total, inter_token_latency_seconds, ...) appear with the first
request that decodes or hits the cache (the ready check's one-token generation does neither).
"""
from __future__ import annotations

import re
from collections import Counter

from .args import CAPTURES

ENGINE = 'engine_type="unified",model_name="{m}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _families(text: str) -> dict[str, dict]:
    """name -> {"head": [HELP, TYPE], "samples": [...]}, in file order."""
    fams: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"# (HELP|TYPE) (\S+)", line)
        if match:
            current = fams.setdefault(match.group(2), {"head": [], "samples": []})
            current["head"].append(line)
        elif line.strip() and current is not None:
            current["samples"].append(line)
    return fams


def _bounds(samples: list[str]) -> list[float]:
    seen = []
    for line in samples:
        match = re.search(r'le="([^"]+)"', line)
        if match and match.group(1) != "+Inf" and float(match.group(1)) not in seen:
            seen.append(float(match.group(1)))
    return seen


class Template:
    def __init__(self) -> None:
        fresh = (CAPTURES / "GET_metrics.txt").read_bytes().decode().split("\r\n\r\n", 1)[1]
        self.fresh = _families(fresh)
        self.full = _families((CAPTURES / "metrics_after.txt").read_text())
        self.bounds = {name: _bounds(fam["samples"]) for name, fam in self.full.items()}


def histogram(name: str, labels: str, bounds: list[float], samples: list[tuple[float, int]]) -> list[str]:
    """Prometheus histogram lines (sum, buckets, count) from (value, weight) samples; `le` sorted into labels."""
    total = sum(v * w for v, w in samples)
    count = sum(w for _, w in samples)
    parts = labels.split(",")
    lines = [f"sglang:{name}_sum{{{labels}}} {float(total)}"]
    for bound in bounds + [float("inf")]:
        le = "+Inf" if bound == float("inf") else repr(bound)
        with_le = ",".join(sorted(parts + [f'le="{le}"']))
        lines.append(f"sglang:{name}_bucket{{{with_le}}} {float(sum(w for v, w in samples if v <= bound))}")
    lines.append(f"sglang:{name}_count{{{labels}}} {float(count)}")
    return lines


def _with_label(labels: str, key: str, value: str) -> str:
    """`labels` with key="value" in SGLang's (sorted) place."""
    return ",".join(sorted(labels.split(",") + [f'{key}="{value}"']))


def render(tpl: Template, model: str, eng, http: Counter, http_status: Counter, active: Counter) -> str:
    """The whole exposition text for one scrape."""
    m = model
    eng_labels = ENGINE.format(m=m)
    with eng.lock:
        stats = eng.stats
        # the ready check's one-token generation is no traffic: it neither decodes nor hits the cache
        served = stats.cached_tokens > 0 or any(stats.itl_s.values())
        used = sum(len(r.prompt) + len(r.output) for r in eng.running.values())
        gauges = {
            "num_running_reqs": len(eng.running), "num_queue_reqs": eng.queued,
            "max_total_num_tokens": eng.max_total_tokens, "token_usage": used / eng.max_total_tokens,
            "num_used_tokens": used, "kv_used_tokens": used, "kv_evictable_tokens": eng.cache.size,
            "kv_available_tokens": max(eng.max_total_tokens - used - eng.cache.size, 0),
            "cache_hit_rate": stats.last_hit_rate, "gen_throughput": stats.gen_throughput,
        }
        live: dict[str, list[str]] = {k: [f"sglang:{k}{{{eng_labels}}} {float(v)}"] for k, v in gauges.items()}
        for name, per in (("prompt_tokens_total", stats.prompt_tokens),
                          ("generation_tokens_total", stats.generation_tokens),
                          ("num_requests_total", stats.requests)):
            live[name] = [f'sglang:{name}{{engine_type="unified",is_streaming="{str(s).lower()}",model_name="{m}"}} '
                          f"{float(per[s])}" for s in (False, True) if stats.requests[s] or not s]
        live["cached_tokens_total"] = [f'sglang:cached_tokens_total{{cache_source="device",engine_type="unified",'
                                       f'model_name="{m}"}} {float(stats.cached_tokens)}']
        for name, per in (("time_to_first_token_seconds", stats.ttft_s), ("e2e_request_latency_seconds", stats.e2e_s)):
            live[name] = []
            for s in (False, True):
                if per[s] or not s:
                    labels = f'engine_type="unified",is_streaming="{str(s).lower()}",model_name="{m}"'
                    live[name] += histogram(name, labels, tpl.bounds["sglang:" + name], [(v, 1) for v in per[s]])
        # scheduler-side histograms, labelled as SGLang's scheduler labels them (its warm-up's observations, in the
        # fresh capture's counts, are left out: readers take differences)
        sched = f'engine_type="unified",model_name="{m}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        live["queue_time_seconds"] = histogram("queue_time_seconds", sched, tpl.bounds["sglang:queue_time_seconds"],
                                               [(v, 1) for v in stats.queue_s])
        live["per_stage_req_latency_seconds"] = [
            line for stage, values in stats.stage_s.items()
            for line in histogram("per_stage_req_latency_seconds", _with_label(sched, "stage", stage),
                                  tpl.bounds["sglang:per_stage_req_latency_seconds"], [(v, 1) for v in values])]
        # SGLang counts a prefill batch per Prefill batch line and a decode pass per Decode batch line, by whether
        # it replayed a CUDA graph (the stand-in's lines all say it did)
        decode_lines = eng.decode_log.lines if eng.decode_log is not None else 0
        live["cuda_graph_passes_total"] = [
            f'sglang:cuda_graph_passes_total{{{_with_label(sched, "mode", mode)}}} {float(n)}'
            for mode, n in (("prefill_cuda_graph", stats.prefill_batches), ("decode_cuda_graph", decode_lines))]
        itl = stats.itl_s[False] + stats.itl_s[True]
        live["inter_token_latency_seconds"] = histogram("inter_token_latency_seconds",
                                                        f'engine_type="unified",model_name="{m}"',
                                                        tpl.bounds["sglang:inter_token_latency_seconds"], itl)
    live["http_requests_total"] = [f'sglang:http_requests_total{{endpoint="{e}",method="{meth}"}} {float(n)}'
                                   for (e, meth), n in http.items()]
    live["http_responses_total"] = [f'sglang:http_responses_total{{endpoint="{e}",method="{meth}",'
                                    f'status_code="{code}"}} {float(n)}' for (e, meth, code), n in http_status.items()]
    live["http_requests_active"] = [f'sglang:http_requests_active{{endpoint="{e}",method="{meth}"}} {float(n)}'
                                    for (e, meth), n in active.items()]
    out: list[str] = []
    for name, fam in tpl.full.items():
        short = name.removeprefix("sglang:")
        if name not in tpl.fresh and not served:
            continue  # a family a real server shows only after traffic (cached_tokens_total, ITL histogram)
        out += fam["head"]
        if short in live:
            out += live[short]
        elif name in tpl.fresh:
            out += [line.replace('model_name="qwen3-4b"', f'model_name="{m}"') for line in tpl.fresh[name]["samples"]]
    return "\n".join(out) + "\n"
