"""Synthetic benchmark run directories in the Phase 3 results format, for the report and stats tests.

The numbers follow a small latency model calibrated on the H200 facts (single-stream ITL 3.6 ms, TTFT growing with
queueing, prefix-cache hits making the agent workload's 4k prefixes cheap), scaled down in request count and output
length so a whole run is a few MB and builds in a second. Output lengths are short (24-48 tokens) on purpose.

    python tests/fixtures_bench.py OUT_DIR        # writes OUT_DIR/bench/<run_id>/ and prints its path

Features exercised: 4 arms (baseline first, one with no prefix cache), 2 workloads, concurrency sweeps with repeats,
a Poisson QPS sweep with a client-bound point, a long run, a 1,000-request-style burst (scaled) with failures, cold
and warm points, a point that failed twice, a point retried to success, torn last lines, telemetry, tool calls with a
skipped arm, and server records.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ARMS = [
    {"name": "baseline", "label": "Baseline (FlashInfer)", "color": "#1f77b4", "flags": [],
     "description": "FlashInfer attention, radix cache on", "is_baseline": True},
    {"name": "no-prefix-cache", "label": "No prefix cache", "color": "#d62728", "flags": ["--disable-radix-cache"],
     "description": "radix (prefix) cache off", "is_baseline": False},
    {"name": "fp8-kv", "label": "FP8 KV cache", "color": "#2ca02c", "flags": ["--kv-cache-dtype", "fp8_e5m2"],
     "description": "KV cache stored as fp8_e5m2", "is_baseline": False},
    {"name": "triton", "label": "Triton attention", "color": "#9467bd", "flags": ["--attention-backend", "triton"],
     "description": "Triton attention kernels", "is_baseline": False},
]
# Per arm: (TTFT multiplier, ITL multiplier, prefix-cache hit rate on the agent workload)
MODEL = {"baseline": (1.0, 1.0, 0.85), "no-prefix-cache": (3.2, 1.02, 0.0), "fp8-kv": (1.0, 0.93, 0.85),
         "triton": (1.15, 1.12, 0.85)}
WORKLOADS = [
    {"name": "agent", "kind": "gsp", "description": "16 shared 4,096-token system prompts, 128-token questions",
     "params": {"gsp_num_groups": 16, "gsp_system_prompt_len": 4096, "gsp_question_len": 128,
                "gsp_output_len": 256}},
    {"name": "chat", "kind": "random-ids", "description": "random token ids, 1,024 in / 256 out",
     "params": {"random_input_len": 1024, "random_output_len": 256, "random_range_ratio": 0.5}},
]
CONCURRENCY = [1, 4, 16, 64]
QPS = [2.0, 8.0, 32.0]


def _point(arm: str, wl: str, pattern: str, conc: int | None, rate: float | None, n: int, rep: int) -> dict:
    load = conc if pattern in ("concurrency", "long", "cold", "warm") else (rate if pattern == "qps" else n)
    return {"point_id": f"{arm}.{wl}.{pattern}.{load}.r{rep}", "arm": arm, "workload": wl, "pattern": pattern,
            "concurrency": conc, "request_rate": rate, "num_prompts": n, "repeat": rep}


def build_quick_plan(arms: list[dict], n: int) -> list[dict]:
    """run_bench.py --quick's shape: one point per arm, a few extra points on the baseline only."""
    plan = [_point(a["name"], "agent", "concurrency", 16, None, n, 1) for a in arms]
    base = next(a["name"] for a in arms if a["is_baseline"])
    return plan + [_point(base, "agent", "warm", 16, None, n, 1), _point(base, "chat", "qps", None, 8.0, n, 1)]


def build_plan(arms: list[dict], repeats: int, n: int) -> list[dict]:
    plan = []
    for arm in (a["name"] for a in arms):
        for wl in (w["name"] for w in WORKLOADS):
            plan += [_point(arm, wl, "concurrency", c, None, max(n, 2 * c), r)
                     for c in CONCURRENCY for r in range(repeats)]
        plan += [_point(arm, "agent", "qps", None, q, n, 0) for q in QPS]
        plan += [_point(arm, "agent", "long", 16, None, 12 * n, 0), _point(arm, "chat", "burst", None, None, 5 * n, 0),
                 _point(arm, "agent", "cold", 16, None, 32, 0), _point(arm, "agent", "warm", 16, None, 32, 0)]
    return plan


def _requests(rng: np.random.Generator, p: dict, t0: float) -> list[dict]:
    """Per-request rows from the latency model; closed loop for concurrency, Poisson arrivals for qps."""
    ttft_mult, itl_mult, hit = MODEL[p["arm"]]
    conc = p["concurrency"] or p["num_prompts"]
    load = conc if p["request_rate"] is None else p["request_rate"] * 0.6
    prefill = 8.0 + 110.0 * (1 - hit) if p["workload"] == "agent" else 35.0
    if p["pattern"] == "cold":
        prefill = 118.0
    rows, clock = [], [t0] * max(1, min(conc, p["num_prompts"]))
    arrival = t0
    for i in range(p["num_prompts"]):
        # agent requests hit the prefix cache at the arm's rate, spread evenly (no extra draw: same stream as before)
        is_hit = p["workload"] == "agent" and p["pattern"] != "cold" and (i * 37 % 100) < 100 * hit
        if p["workload"] == "agent" and p["pattern"] != "cold":
            prefill = 8.0 if is_hit else 118.0
        itl = 3.6 * itl_mult * (1 + load / 24) * rng.lognormal(0, 0.08)
        ttft = prefill * ttft_mult * (1 + load / 8) * rng.lognormal(0, 0.35)
        if rng.random() < 0.01:
            ttft *= 1 + rng.pareto(2.0) * 3
        out = int(rng.integers(24, 49))
        gaps = (itl * rng.gamma(8.0, 1 / 8.0, out - 1)).round(3).tolist()
        if p["request_rate"] is not None:
            arrival += rng.exponential(1 / p["request_rate"])
            start = arrival
        else:
            slot = i % len(clock)
            start = clock[slot]
        e2e = ttft + sum(gaps)
        ok = not (p["pattern"] == "burst" and rng.random() < 0.03)
        if p["request_rate"] is None:
            clock[i % len(clock)] = start + e2e / 1000.0
        rows.append({"start_s": round(start, 6), "ok": ok, "error": "" if ok else "ReadTimeout: server overloaded",
                     "prompt_tokens": 4224 if p["workload"] == "agent" else int(rng.integers(512, 1025)),
                     "output_tokens": out if ok else 0, "ttft_ms": round(ttft, 3) if ok else None,
                     "itl_ms": gaps if ok else [], "e2e_ms": round(e2e, 3),
                     "cached_tokens": (4096 if is_hit else 0) if ok else None})
    return rows


def _summary(rows: list[dict], p: dict) -> dict:
    start = min(r["start_s"] for r in rows)
    end = max(r["start_s"] + r["e2e_ms"] / 1000 for r in rows)
    dur = end - start
    done = [r for r in rows if r["ok"]]
    inp = sum(r["prompt_tokens"] for r in done)
    out = sum(r["output_tokens"] for r in done)
    starts = sorted(r["start_s"] for r in rows)
    achieved = (len(rows) - 1) / (starts[-1] - starts[0]) if starts[-1] > starts[0] else len(rows) / dur
    offered = p["request_rate"]
    if offered is not None and offered >= 32:
        achieved = 0.81 * offered  # the client could not keep up: the contract's client_bound case
    return {"duration_s": round(dur, 4), "completed": len(done), "failed": len(rows) - len(done),
            "request_throughput": len(done) / dur, "input_throughput": inp / dur, "output_throughput": out / dur,
            "total_throughput": (inp + out) / dur, "offered_rate": offered, "achieved_rate": achieved,
            "client_bound": offered is not None and achieved < 0.95 * offered}


def _telemetry(rng: np.random.Generator, p: dict, t0: float, t1: float, counters: dict) -> list[dict]:
    """1 Hz samples as SGLang 0.5.17 exports them: the cache_hit_rate gauge reads 0.0 while decoding (it is the last
    prefill batch's), the hit rate lives in the cumulative counters, which restart with each arm's server."""
    hit = MODEL[p["arm"]][2] if p["workload"] == "agent" and p["pattern"] != "cold" else 0.0
    conc = p["concurrency"] or min(p["num_prompts"], 256)
    totals = counters.setdefault(p["arm"], {"prompt": 0.0, "cached": 0.0})
    lines = []
    for t in np.arange(t0, t1, 1.0):
        usage = min(0.97, 0.02 + conc * (0.004 if p["arm"] == "fp8-kv" else 0.008)) * rng.uniform(0.9, 1.0)
        prompt = 4224.0 * conc
        totals["prompt"] += prompt
        totals["cached"] += round(prompt * hit * rng.uniform(0.95, 1.0))
        metrics = {"sglang:token_usage": usage, "sglang:cache_hit_rate": 0.0,
                   "sglang:prompt_tokens_total": totals["prompt"], "sglang:cached_tokens_total": totals["cached"],
                   "sglang:num_running_reqs": float(min(conc, 48)), "sglang:num_queue_reqs": float(max(0, conc - 48))}
        gpu = {"gpu_util_pct": min(100.0, 20 + conc * 2.0), "gpu_mem_used_gb": 126.5,
               "gpu_power_w": min(700.0, 180 + conc * 6.0 * rng.uniform(0.9, 1.1)), "gpu_sm_clock_mhz": 1980.0}
        labels = {"model_name": "qwen3-4b", "tp_rank": "0"}
        lines += [{"t": float(t), "source": "metrics", "name": k, "labels": labels, "value": float(v),
                   "point_id": p["point_id"]} for k, v in metrics.items()]
        lines += [{"t": float(t), "source": "gpu", "name": k, "labels": {"gpu": "0"}, "value": float(v),
                   "point_id": p["point_id"]} for k, v in gpu.items()]
    return lines


def _toolcalls(rng: np.random.Generator, arms: list[dict]) -> list[dict]:
    cases = [("Weather in Paris?", "get_weather"), ("Convert 3 EUR to USD", "convert_currency"),
             ("Tell me a joke", None), ("Find flights LHR to JFK", "search_flights")] * 3
    lines = []
    for arm in arms:
        if arm["name"] == "triton":
            lines.append({"arm": arm["name"], "skipped": "dummy weights: the model cannot choose tools"})
            continue
        for i, (prompt, tool) in enumerate(cases):
            called = tool if rng.random() < 0.85 else None
            args_ok = called is not None and rng.random() < 0.9
            lines.append({"arm": arm["name"], "case_id": f"c{i:02d}", "prompt": prompt, "expected_tool": tool,
                          "called_tool": called, "args_ok": args_ok or tool is None,
                          "ok": called == tool and (args_ok or tool is None),
                          "latency_ms": float(rng.uniform(120, 400))})
    return lines


def manifest_of(run_id: str, arms: list[dict], plan: list[dict], seed: int) -> dict:
    return {"schema": 1, "run_id": run_id, "created_at": "2026-11-29T12:00:00Z",
            "command": ["run_bench.py", "--repeat", "2", "--api-key-file", "<redacted>"],
            "git_commit": "84522b1", "versions": {"sglang": "0.5.17", "flashinfer": "0.6.15.post1",
                                                  "torch": "2.11.0", "llmhost": "0.1.0"},
            "gpu": {"name": "NVIDIA H200", "count": 1, "memory_gb": 139.8, "driver": "580.82.07"},
            "config": {"model_id": "Qwen/Qwen3-4B", "load_format": "dummy", "port": 30000, "api_key_set": False},
            "seed": seed, "slo": {"ttft_ms": 500.0, "itl_ms": 20.0, "pct": 99.0},
            "arms": arms, "workloads": WORKLOADS, "plan": plan}


def _jsonl(path: Path, rows: list[dict], torn: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text + ('{"point_id": "torn' if torn else ""))


def make_run(root: Path, *, run_id: str = "20261129-120000", seed: int = 0, arms: list[dict] | None = None,
             repeats: int = 2, n: int = 40, speed: float = 1.0, telemetry: bool = True,
             toolcalls: bool = True, torn: bool = True, quick: bool = False) -> Path:
    """Write root/bench/<run_id>/ and return it. speed > 1 makes every arm's ITL/TTFT faster (a 'better' run)."""
    arms = ARMS if arms is None else arms
    rng = np.random.default_rng(seed)
    run = root / "bench" / run_id
    plan = build_quick_plan(arms, n) if quick else build_plan(arms, repeats, n)
    points, tele, clock = [], [], 1_764_417_600.0
    counters: dict = {}  # per arm: cumulative prompt / cached tokens of that arm's server
    for idx, p in enumerate(plan):
        attempts = 2 if idx in (5, 11) and not quick else 1
        for attempt in range(1, attempts + 1):
            failed = not quick and ((idx == 11) or (idx == 5 and attempt == 1))
            rows = _requests(rng, p, clock)
            for r in rows:
                r["e2e_ms"] = round(r["e2e_ms"] / speed, 3)
                r["ttft_ms"] = None if r["ttft_ms"] is None else round(r["ttft_ms"] / speed, 3)
                r["itl_ms"] = [round(g / speed, 3) for g in r["itl_ms"]]
            summ = _summary(rows, p)
            end = clock + summ["duration_s"]
            line = {**p, "attempt": attempt, "status": "failed" if failed else "ok",
                    "error": "server died (exit -9); restarted" if failed else None, "started_at": clock,
                    "ended_at": end, "cache_flushed": True, "summary": summ,
                    "requests_file": f"requests/{p['point_id']}.jsonl"}
            points.append(line)
            if not failed:
                _jsonl(run / line["requests_file"], rows, torn=torn and idx == 0)
            if telemetry:
                tele += _telemetry(rng, p, clock, end, counters)
            clock = end + 3.0
    _jsonl(run / "points.jsonl", points, torn=torn)
    if telemetry:
        _jsonl(run / "telemetry.jsonl", tele, torn=torn)
    if toolcalls:
        _jsonl(run / "toolcalls.jsonl", _toolcalls(rng, arms))
    for arm in arms:
        cmd = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-4B", "--port", "30000",
               "--config", "<redacted>", *arm["flags"]]
        info = {"model_path": "Qwen/Qwen3-4B", "attention_backend": "triton" if arm["name"] == "triton" else
                "flashinfer", "disable_radix_cache": arm["name"] == "no-prefix-cache", "chunked_prefill_size": 8192,
                "kv_cache_dtype": "fp8_e4m3" if arm["name"] == "fp8-kv" else "auto"}
        server = {"arm": arm["name"], "launch_command": cmd, "server_info": info, "started_at": clock,
                  "ready_s": 74.8}
        if arm["name"] == "baseline":  # the other arms as from a run before the record said which decode ran
            server["decode"] = "shared-prefix decode: on (SGLang 0.5.17, FlashInfer 0.6.15.post1)"
        (run / "servers").mkdir(parents=True, exist_ok=True)
        (run / "servers" / f"{arm['name']}.json").write_text(json.dumps(server))
    (run / "manifest.json").write_text(json.dumps(manifest_of(run_id, arms, plan, seed), indent=1))
    return run


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/fixtures_bench.py OUT_DIR", file=sys.stderr)
        return 2
    print(make_run(Path(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
