"""What bounds a decode step at each steady closed-loop load: the bytes it must read against the time it took.
Pure: a run's manifest (model shape, GPU), its servers' KV cache dtype and the steady rows (llmhost.report.steady)
in, plain-dict rows out (the dashboard renders them; summary.json carries them).

Every decode step reads the weights once and, for each running request, that request's whole KV context: FlashInfer's
paged decode reads a request's pages even where its prefix is shared with other requests. At a closed-loop
concurrency c with mean context L tokens (prompt + half the output, the mean over a request's decode steps):

    KV read per step = c x L x (layers x 2 x KV heads x head_dim x KV dtype bytes)
    Qwen3-4B, agent c=64 (H200):  64 x 4,579 x 147,456 B = 43.2 GB / 4.8 TB/s = 9.0 ms
    weight read per step = 8.04 GB / 4.8 TB/s = 1.68 ms       roofline step = 10.7 ms, measured 10.0 ms

These are the bytes the kernels ask for, not what HBM delivers: requests of one prefix group decode side by side
and ask for the same prefix pages, and the L2 cache serves most of the repeats. `fi_bench.py sparse` measured how
much on the H200: with every 4 of 64 requests × 4,608 tokens sharing 15/16 of their pages, decode attention took
0.54-0.61x the time of private pages. So where most prompt tokens came from the prefix cache, the KV part is an
upper bound, a floor near the measured step does not show that the bytes bind (agent c=64: floor 10.7 ms, measured
10.0 ms, but its attention ~5.6 ms by that measurement), and the reading says so instead of naming the bytes.

The requests a step carries are SGLang's own running-requests gauge over the steady window (telemetry) when it was
sampled, else the closed loop's c: a request between turns or in prefill is not decoding, so c overstates the
batch (agent c=64 on the H200: 45 of 64 running on average over a whole point, start-up and drain included; 64
inside its steady window).

The floor is set against the measured step: SGLang's own mean time per output token over the steady window (its
inter-token-latency histogram), else the client's. A roofline near the measured step says memory reads bind and
names which bytes to cut; one far below says compute or overhead binds instead.
"""
from __future__ import annotations

import math
from typing import Any

from llmhost.bench import floor
from llmhost.bench.model_shape import ModelShape
from llmhost.fi import gpu_specs
from llmhost.report.load import Run

# The roofline must explain at least half the measured step before the reading names the bytes as the bound:
# below that, more than half the step is something else (compute, launch overhead, scheduling), and cutting bytes
# would shorten the step by less than that something else.
MEMORY_BOUND_SHARE = 0.5
# At least this share of the prompt tokens from the prefix cache, the KV part is read as an upper bound: where the
# cached prefix is one that requests decoding together share, the L2 cache serves most of its repeated reads.
CACHED_SHARE = 0.5
# KV cache dtypes by bytes per element (SGLang's --kv-cache-dtype; "auto" is the model's dtype, any "fp8_*" 1).
# FP4 and MX formats carry block scales besides their elements and are not counted.
KV_DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "float16": 2}


def kv_dtype(run: Run, arm: str) -> str:
    """The arm's --kv-cache-dtype as its server reported it; "auto" when no server record says."""
    server = run.servers.get(arm)
    return str(server.server_info.get("kv_cache_dtype") or "auto") if server else "auto"


def quantization(run: Run, arm: str) -> str | None:
    """The arm's --quantization as its server reported it (None: none, or no server record)."""
    server = run.servers.get(arm)
    value = server.server_info.get("quantization") if server else None
    return str(value) if value else None


def kv_dtype_bytes(dtype: str, shape: ModelShape) -> int | None:
    """Bytes per KV element of a --kv-cache-dtype value; None for one this count does not cover."""
    if dtype == "auto":
        return shape.dtype_bytes
    return 1 if dtype.startswith("fp8") else KV_DTYPE_BYTES.get(dtype)


def unavailable(run: Run) -> str:
    """Why no step can be set against its byte floor ("" when the manifest has what it takes)."""
    manifest = run.manifest
    if manifest.model_shape is None:
        return ("this run recorded no model shape " + (f"({manifest.model_shape_note})" if manifest.model_shape_note
                                                        else "(it predates the record: run ./run_bench.py again)"))
    return ""


def peak_gb_s(run: Run) -> float | None:
    spec = gpu_specs.lookup(run.manifest.provenance.gpu.name)
    return spec.peak_gb_s if spec else None


def measured_step(row: dict[str, Any]) -> tuple[float, str]:
    """(ms, whose): SGLang's mean time per output token, else the client's; (nan, "") when neither was measured."""
    for key, whose in (("server_itl_mean_ms", "SGLang"), ("client_itl_mean_ms", "client")):
        value = row.get(key)
        if value is not None and math.isfinite(value):
            return float(value), whose
    return math.nan, ""


def running_requests(row: dict[str, Any]) -> tuple[float, str]:
    """(requests per decode step, whose): SGLang's running-requests gauge over the window, else the concurrency."""
    value = row.get("running_reqs_mean")
    if value is not None and math.isfinite(value) and value > 0:
        return float(value), "SGLang"
    return float(row["concurrency"]), "c"


def _ms(n_bytes: float, peak: float | None) -> float:
    ms = floor.read_ms(n_bytes, peak)
    return math.nan if ms is None else ms


def reading(kv_ms: float, weights_ms: float, measured_ms: float, kv_bytes_each: int,
            cached_share: float = math.nan) -> str:
    """One line: which reads bound the step, or that the step is far above its byte floor; with most prompt tokens
    from the prefix cache, that the KV reads are an upper bound."""
    roofline = kv_ms + weights_ms
    if not (math.isfinite(roofline) and math.isfinite(measured_ms) and measured_ms > 0):
        return "no step time to compare" if math.isfinite(roofline) else "no peak bandwidth for this GPU"
    if roofline < MEMORY_BOUND_SHARE * measured_ms:
        return f"the step is {measured_ms / roofline:.1f}× its byte floor: compute or overhead, not memory, binds"
    if kv_ms > weights_ms and cached_share >= CACHED_SHARE:
        return (f"KV reads at most {kv_ms:.1f} of {measured_ms:.1f} ms: {100 * cached_share:.0f}% of the prompt tokens "
                "came from the prefix cache, and the L2 cache serves most repeated reads of a prefix that requests "
                "decoding together share (fi_bench.py sparse --placements contiguous,shared measures how much on "
                "this GPU): profile the step before cutting KV bytes")
    if kv_ms > weights_ms:
        lever = "FP8 KV" if kv_bytes_each > 1 else "shorter contexts or fewer running requests"
        share = (f"KV reads {kv_ms:.1f} of {measured_ms:.1f} ms" if roofline <= measured_ms else
                 f"the step ({measured_ms:.1f} ms) beat its byte floor ({roofline:.1f} ms, {kv_ms:.1f} of it KV): "
                 "L2 served part of the shared prefix pages")
        return f"{share}: fewer KV bytes per step ({lever}) would do more here than scheduling"
    return (f"weight reads {weights_ms:.1f} of {measured_ms:.1f} ms bound it: a larger batch shares them over more "
            "tokens")


def cached_share(row: dict[str, Any]) -> float:
    """Mean prefix-cached prompt tokens / mean prompt tokens over the steady window; nan when not reported."""
    cached, prompt = row.get("cached_tokens_mean", math.nan), row["prompt_tokens_mean"]
    return cached / prompt if math.isfinite(cached) and prompt > 0 else math.nan


def bound_row(row: dict[str, Any], shape: ModelShape, dtype: str, peak: float | None,
              quant: str | None = None) -> dict[str, Any]:
    """One steady closed-loop row's step: bytes read, their time at peak bandwidth, the measured step. `quant`: the
    server's --quantization (its weights read at their own size)."""
    context = row["prompt_tokens_mean"] + row["output_tokens_mean"] / 2
    each = kv_dtype_bytes(dtype, shape)
    per_token = shape.kv_bytes_per_token(each) if each else None
    running, running_by = running_requests(row)
    kv_bytes = running * context * per_token if per_token else math.nan
    weights = shape.weights_read(quant)
    kv_ms, weights_ms = _ms(kv_bytes, peak), _ms(weights if weights else math.nan, peak)
    measured, whose = measured_step(row)
    line = (f"KV cache dtype {dtype} is not counted here" if not each else
            f"weights quantized with {quant} are not counted here" if not weights else
            reading(kv_ms, weights_ms, measured, each, cached_share(row)))
    return {"arm": row["arm"], "workload": row["workload"], "load": row["load"], "concurrency": row["concurrency"],
            "running": running, "running_by": running_by, "context_tokens": context, "kv_cache_dtype": dtype,
            "quantization": quant, "kv_bytes_per_token": per_token,
            "kv_bytes": kv_bytes, "weight_bytes": weights, "weights_ms": weights_ms, "kv_ms": kv_ms,
            "roofline_ms": kv_ms + weights_ms, "measured_ms": measured, "measured_by": whose,
            "kv_share_pct": 100 * kv_ms / measured if measured > 0 else math.nan,
            "cached_share_pct": 100 * cached_share(row), "reading": line}


def with_profiles(bound: list[dict[str, Any]], profiled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its load's --kernel-profile (llmhost.report.load_kernels_page rows, same arm, workload and
    concurrency): the attention a decode step measured, a pass's span and a decode step on the GPU's clock beside
    the bytes it asked for; where the profile told its passes apart, the reading is the profile's."""
    by_load = {(p["arm"], p["workload"], p["load"]): p for p in profiled if p["status"] == "ok"}
    out = []
    for row in bound:
        found = by_load.get((row["arm"], row["workload"], f"c={row['concurrency']}"))
        joined = {**row, "profiled_attention_ms": found["decode_attention_ms"] if found else None,
                  "profiled_span_ms": found["span_ms"] if found else None,
                  "profiled_decode_step_ms": found.get("decode_step_ms") if found else None}
        if found and found.get("decode_step_ms") and found.get("decode_attention_ms"):
            joined["reading"] = profiled_reading(found)
        out.append(joined)
    return out


def profiled_reading(p: dict[str, Any]) -> str:
    """One line from a load's kernel profile: the decode step and its attention, the extends' share of the profiled
    passes, and the decode-only bound that only a faster step raises."""
    step, attention = p["decode_step_ms"], p["decode_attention_ms"]
    decode_ms = p["decode_steps"] * step
    extend_ms = p["extend_passes"] * (p.get("extend_pass_ms") or 0.0)
    share = 100 * extend_ms / (decode_ms + extend_ms) if decode_ms + extend_ms > 0 else 0.0
    bound = p.get("decode_only_tok_s")
    return (f"profiled: a decode step took {step:.1f} ms on the GPU's clock, attention {attention:.1f} ms of it "
            f"({100 * attention / step:.0f}%); extends took {share:.0f}% of the profiled passes"
            + (f"; decode-only bound {bound:,.0f} tok/s: only a faster decode step raises it" if bound else ""))


def bound_rows(run: Run, steady_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per steady closed-loop point (at least one steady repeat); none when the run has no model shape."""
    shape = run.manifest.model_shape
    if shape is None:
        return []
    peak = peak_gb_s(run)
    return [bound_row(r, shape, kv_dtype(run, r["arm"]), peak, quantization(run, r["arm"])) for r in steady_rows
            if r["pattern"] == "concurrency" and r["concurrency"] and r["repeats_steady"]
            and math.isfinite(r["prompt_tokens_mean"])]
