"""How much of a point's numbers is the measuring side's: TTFT as SGLang itself measured it beside the load
generator's over the same steady window, and the load generator's own CPU use.

SGLang's `sglang:time_to_first_token_seconds` histogram is observed in its tokenizer manager: from the request's
arrival there (tokenization included) to the first output batch coming back from the scheduler (0.5.17,
tokenizer_manager.collect_metrics). The load generator's TTFT adds what lies outside: the HTTP request in, the
first chunk's way out, and its own event loop (one Python process streaming every request of the point). The
telemetry sampler reads the histogram's _sum and _count about once a second (telemetry.jsonl, tagged with the
running point), so the server's mean over a window is the difference of the two counters between the last samples
at or before the window's ends, and the client's mean is over the requests whose first token fell between those
same two samples. A client mean far above the server's says the number is partly the measuring side's, not the
server's; the same requests' mean time to their response headers (llmhost.bench.loadgen) says how much of it came
before SGLang's clock started (connection, request body, the server's HTTP parse), the rest being the first chunk's
way out and the client's event loop. Means, not percentiles: the histogram's buckets are too coarse for a p99.
The load generator's CPU use (telemetry's source "client", % of one core per tick) near a full core says the same
from the other side: the client, not the server, set the pace.
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from llmhost.bench.records import TelemetrySample
from llmhost.bench.telemetry import CLIENT_CPU

HISTOGRAM = "sglang:time_to_first_token_seconds"
SUM, COUNT = f"{HISTOGRAM}_sum", f"{HISTOGRAM}_count"
# Time per output token after the first, observed per streamed chunk (sum += the chunk's gap, count += its tokens)
ITL_HISTOGRAM = "sglang:inter_token_latency_seconds"
# Inside SGLang's TTFT, observed in its scheduler per request as each stage ends (0.5.17, req_time_stats.py):
# intake = the scheduler's receipt to its waiting queue, queued = that queue to the request's first forward pass
# (its queue-time histogram), prefill = that first pass to the prefill's result processed (every chunk of it; with
# the overlap scheduler the result is processed during the next step). The rest of SGLang's TTFT is tokenization
# and the trips between its processes (tokenizer manager -> scheduler -> detokenizer -> tokenizer manager).
PER_STAGE = "sglang:per_stage_req_latency_seconds"
QUEUE_HISTOGRAM = "sglang:queue_time_seconds"
TTFT_PARTS: tuple[tuple[str, str, dict[str, str] | None], ...] = (
    ("intake", PER_STAGE, {"stage": "request_process"}), ("queued", QUEUE_HISTOGRAM, None),
    ("prefill", PER_STAGE, {"stage": "prefill_forward"}))
# The page calls the gap out when the client's mean exceeds the server's by both of these
GAP_MS, GAP_SHARE = 50.0, 0.2
BUSY_CLIENT_PCT = 90.0  # the load generator's CPU, % of its one core, from which the page calls it client-bound


def counters(telemetry: Sequence[TelemetrySample], point_id: str, histogram: str = HISTOGRAM,
             where: Mapping[str, str] | None = None) -> tuple[list[float], list[tuple[float, float]]]:
    """The point's sampler ticks (sorted) at which every label set (worker) of the histogram was scraped, and per
    tick its (sum s, count) summed over them; `where`: only the label sets carrying these labels (one stage of
    TTFT_PARTS). A tick that missed a worker is left out: its sum would lack that worker's counts, and a delta to or
    from it would be wrong, even negative."""
    total, count = f"{histogram}_sum", f"{histogram}_count"
    wanted = tuple((where or {}).items())
    ticks: dict[float, dict[tuple, list[float]]] = defaultdict(dict)
    for s in telemetry:
        if s.point_id == point_id and s.name in (total, count) and all(s.labels.get(k) == v for k, v in wanted):
            pair = ticks[s.t].setdefault(tuple(sorted(s.labels.items())), [math.nan, math.nan])
            pair[0 if s.name == total else 1] = s.value
    workers = {key for by in ticks.values() for key in by}
    times = sorted(t for t, by in ticks.items()
                   if set(by) == workers and not any(math.isnan(v) for pair in by.values() for v in pair))
    return times, [(sum(p[0] for p in ticks[t].values()), sum(p[1] for p in ticks[t].values())) for t in times]


def window_delta(telemetry: Sequence[TelemetrySample], point_id: str, histogram: str, t_start: float,
                 t_end: float, where: Mapping[str, str] | None = None) -> tuple[float, float, float, float] | None:
    """(Δsum s, Δcount, first tick, last tick) of the histogram (its label sets with `where`'s labels) between the
    last ticks at or before the window's ends; None when the window has no two such ticks."""
    times, values = counters(telemetry, point_id, histogram, where)
    i0, i1 = bisect.bisect_right(times, t_start) - 1, bisect.bisect_right(times, t_end) - 1
    if math.isnan(t_start) or i0 < 0 or i1 <= i0:
        return None
    (sum0, n0), (sum1, n1) = values[i0], values[i1]
    return sum1 - sum0, n1 - n0, times[i0], times[i1]


def _counted(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float,
             first_token_s: np.ndarray) -> tuple[tuple[float, float, float, float], int, np.ndarray] | None:
    """The TTFT histogram's window delta, the first tokens it counted, and the mask of the client's requests whose
    first token fell between the same two ticks; None when it counted none."""
    delta = window_delta(telemetry, point_id, HISTOGRAM, t_start, t_end)
    count = int(round(delta[1])) if delta else 0
    if delta is None or count <= 0:
        return None
    return delta, count, (first_token_s > delta[2]) & (first_token_s <= delta[3])


def window_means(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float,
                 first_token_s: np.ndarray, ttft_ms: np.ndarray) -> tuple[float, float, int]:
    """(server mean ms, client mean ms, requests the server counted) over [t_start, t_end] snapped to the sampler's
    ticks; nans and 0 when the window has no two ticks or the server counted no first token between them.
    `first_token_s`, `ttft_ms`: the point's successful requests (unix s of their first token, and their TTFT)."""
    counted = _counted(telemetry, point_id, t_start, t_end, first_token_s)
    if counted is None:
        return math.nan, math.nan, 0
    delta, count, inside = counted
    client = float(ttft_ms[inside].mean()) if inside.any() else math.nan
    return 1000.0 * delta[0] / count, client, count


def headers_mean(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float,
                 first_token_s: np.ndarray, headers_ms: np.ndarray) -> float:
    """The client's mean time to the response headers over the requests window_means takes its client mean from:
    the part of that mean spent before SGLang's own clock starts (its HTTP server answers with headers before the
    tokenizer manager sees the request). nan when the window counted none or the run did not record them."""
    counted = _counted(telemetry, point_id, t_start, t_end, first_token_s)
    if counted is None:
        return math.nan
    seen = headers_ms[counted[2] & np.isfinite(headers_ms)]
    return float(seen.mean()) if seen.size else math.nan


def itl_means(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float,
              first_token_s: np.ndarray, end_s: np.ndarray, output_tokens: np.ndarray) -> tuple[float, float]:
    """(SGLang's mean time per output token after the first, the client's) over the window, ms; nans when
    unmeasured. The client's: Σ(end − first token) / Σ(tokens − 1) of the requests streamed wholly inside it."""
    delta = window_delta(telemetry, point_id, ITL_HISTOGRAM, t_start, t_end)
    if delta is None or delta[1] <= 0:
        return math.nan, math.nan
    inside = (first_token_s > delta[2]) & (end_s <= delta[3]) & (output_tokens > 1)
    gaps = float((output_tokens[inside] - 1).sum())
    client = 1000.0 * float((end_s[inside] - first_token_s[inside]).sum()) / gaps if gaps else math.nan
    return 1000.0 * delta[0] / delta[1], client


def ttft_parts(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float,
               t_end: float) -> dict[str, float]:
    """Each of TTFT_PARTS' mean ms over the window (Δsum / Δcount between the last ticks at or before its ends), nan
    where the window has no two ticks or the stage ended no request between them."""
    parts = {}
    for name, histogram, where in TTFT_PARTS:
        delta = window_delta(telemetry, point_id, histogram, t_start, t_end, where)
        parts[name] = 1000.0 * delta[0] / delta[1] if delta and delta[1] > 0 else math.nan
    return parts


PASSES = "sglang:cuda_graph_passes_total"  # SGLang 0.5.17 counts each prefill batch once, mode prefill_cuda_graph|none
PREFILL_MODES = ("prefill_cuda_graph", "prefill_none")


def prefill_batching(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float,
                     t_end: float) -> tuple[float, float]:
    """(requests a prefill batch took on average, prefill batches a second) between the last ticks at or before the
    window's ends: the requests that left SGLang's waiting queue (its queue-time histogram's count) over the prefill
    batches it ran (its forward-pass counter's prefill modes); nans without two such ticks or without a prefill. A
    mode SGLang has not counted yet is absent from its scrape, so a tick with any pass counted reads it as 0."""
    passes: dict[float, float] = defaultdict(float)
    for s in telemetry:
        if s.point_id == point_id and s.name == PASSES:
            passes[s.t] += s.value if s.labels.get("mode") in PREFILL_MODES else 0.0
    queue = window_delta(telemetry, point_id, QUEUE_HISTOGRAM, t_start, t_end)
    if queue is None or queue[2] not in passes or queue[3] not in passes:
        return math.nan, math.nan
    batches = passes[queue[3]] - passes[queue[2]]
    if batches <= 0:
        return math.nan, math.nan
    return queue[1] / batches, batches / (queue[3] - queue[2])


def gap_is_notable(client_ms: float, server_ms: float) -> bool:
    """Whether the client's mean TTFT is far enough above SGLang's to say so on the page."""
    gap = client_ms - server_ms
    return math.isfinite(gap) and gap > GAP_MS and gap > GAP_SHARE * server_ms


def client_cpu_pct(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float) -> float:
    """The load generator's mean CPU use over the ticks in (t_start, t_end], % of one core; nan without any."""
    values = [s.value for s in _in_window(telemetry, "client", CLIENT_CPU, point_id, t_start, t_end)]
    return sum(values) / len(values) if values else math.nan


def client_cpu_at_waves(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float,
                        t_end: float, wave_starts: np.ndarray) -> tuple[float, float, float]:
    """The load generator's CPU in the ticks in (t_start, t_end] in which a wave was sent against the other ticks:
    (mean % of one core at waves, between them, the extra CPU ms a wave cost it), nans for a side without ticks. Each
    tick's value is its CPU since the tick before (the first tick's span is taken as the next one's). Work the load
    generator does for each request of a wave shows as that extra."""
    ticks = sorted(_in_window(telemetry, "client", CLIENT_CPU, point_id, t_start, t_end), key=lambda s: s.t)
    spans = [b.t - a.t for a, b in zip(ticks, ticks[1:])]
    at: list[tuple[float, float, int]] = []  # (value, span s, waves sent in it)
    between: list[float] = []
    for i, tick in enumerate(ticks):
        span = spans[i - 1] if i else (spans[0] if spans else math.nan)  # a lone tick: its span, so its waves, unknown
        sent = int(np.count_nonzero((wave_starts > tick.t - span) & (wave_starts <= tick.t)))
        if sent:
            at.append((tick.value, span, sent))
        else:
            between.append(tick.value)
    if not (at and between):
        return (sum(v for v, _, _ in at) / len(at) if at else math.nan,
                sum(between) / len(between) if between else math.nan, math.nan)
    base = sum(between) / len(between)
    extra = sum((v - base) / 100 * span * 1000 / n for v, span, n in at) / len(at)
    return sum(v for v, _, _ in at) / len(at), base, extra


def _in_window(telemetry: Sequence[TelemetrySample], source: str, name: str, point_id: str, t_start: float,
               t_end: float) -> list[TelemetrySample]:
    """The point's samples of one series in (t_start, t_end]."""
    return [s for s in telemetry
            if s.source == source and s.name == name and s.point_id == point_id and t_start < s.t <= t_end]


RUNNING = "sglang:num_running_reqs"


def running_mean(telemetry: Sequence[TelemetrySample], point_id: str, t_start: float, t_end: float) -> float:
    """SGLang's running-requests gauge over the ticks in (t_start, t_end], summed over workers per tick, then averaged:
    how many requests a decode step really carried (a closed loop's c minus those between turns or in prefill);
    nan without a tick."""
    per_tick: dict[float, float] = {}
    for s in _in_window(telemetry, "metrics", RUNNING, point_id, t_start, t_end):
        per_tick[s.t] = per_tick.get(s.t, 0.0) + s.value
    return sum(per_tick.values()) / len(per_tick) if per_tick else math.nan
