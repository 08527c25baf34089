"""One repeat's window against the telemetry sampled beside it, on a worked closed loop: SGLang's own mean TTFT and
time per token over the window set against the client's for the same requests, the time to response headers, the
load generator's CPU in the ticks a wave was sent and between them, SGLang's running requests, and the waves; only
the point's own samples count, and the run's windows are built from its telemetry."""
from __future__ import annotations

import types

import numpy as np
import pytest

from llmhost.bench.records import Point, PointRecord, RequestRecord, TelemetrySample
from llmhost.bench.telemetry import CLIENT_CPU
from llmhost.report import client_overhead, load, steady, tables


def _request(t: float, ttft: float = 100.0, ok: bool = True, headers: float = 10.0) -> RequestRecord:
    return RequestRecord(start_s=t, ok=ok, error="" if ok else "reset", prompt_tokens=100, output_tokens=10,
                         ttft_ms=ttft, itl_ms=(100.0,) * 9, e2e_ms=1000.0, cached_tokens=0 if t == 2 else 64,
                         headers_ms=headers)


def _rows() -> list[RequestRecord]:
    # c = 2 in lockstep: two requests sent at 0, 1, ..., 5 s, each 1 s long, first token after 100 ms. The window is
    # (1, 5] s, its steady requests the seven sent at 1-4 s after the first 2c - 1 (test_steady_repeat_counts.py).
    # The wave at 1 s waited 40 ms for its headers and its steady request 300 ms for its first token; the first
    # request sent at 3 s failed after its first token. Every prompt but those of the wave at 2 s found 64 of its 100
    # tokens in the prefix cache.
    rows = [_request(float(t), headers=40.0 if t == 1 else 10.0) for t in range(6) for _ in range(2)]
    rows[3] = _request(1.0, ttft=300.0, headers=40.0)
    rows[6] = _request(3.0, ok=False)
    return rows


def _sample(t: float, name: str, value: float, point: str = "p", source: str = "metrics") -> TelemetrySample:
    return TelemetrySample(t=t, source=source, name=name, labels={}, value=value, point_id=point)


def _telemetry(point: str = "p", scale: float = 1.0) -> list[TelemetrySample]:
    out = []
    # SGLang's TTFT histogram: 8 first tokens and 0.4 s between the ticks at the window's ends (1 s and 5 s)
    for t, total, count in ((0.0, 0.0, 0), (1.0, 0.1, 2), (3.0, 0.3, 6), (5.0, 0.5, 10), (6.0, 0.6, 12)):
        out += [_sample(t, client_overhead.SUM, scale * total, point), _sample(t, client_overhead.COUNT, count, point)]
    # its time per output token: 0.8 s over 80 tokens between the same ticks
    for t, total, count in ((1.0, 0.2, 20), (5.0, 1.0, 100)):
        out += [_sample(t, f"{client_overhead.ITL_HISTOGRAM}_sum", scale * total, point),
                _sample(t, f"{client_overhead.ITL_HISTOGRAM}_count", count, point)]
    # the load generator's CPU every 0.5 s: 60% in the ticks a wave (1, 2, 3, 4 s) was sent, 20% between; 999% outside
    for t in np.arange(0.75, 5.5, 0.5):
        inside = 1.0 < t <= 5.0
        value = (60.0 if round(t % 1, 2) == 0.25 else 20.0) if inside else 999.0
        out.append(_sample(float(t), CLIENT_CPU, scale * value, point, source="client"))
    for t, running in ((0.5, 99.0), (2.0, 2.0), (3.0, 1.0), (4.0, 2.0), (5.5, 99.0)):
        out.append(_sample(t, client_overhead.RUNNING, scale * running, point))
    return out


def _record() -> PointRecord:
    point = Point("p", "baseline", "chat", "concurrency", 2, None, 12, 1)
    return PointRecord.of(point, attempt=1, status="ok", error=None, started_at=0.0, ended_at=6.0,
                          cache_flushed=True, summary=None, requests_file="requests/p.jsonl")


TELEMETRY = tuple(_telemetry() + _telemetry(point="q", scale=7.0))  # another point's samples, 7x: never counted


def _windowed() -> steady.RepeatWindow:
    return steady.window_repeat(_record(), load.requests_from_records(_rows()), telemetry=TELEMETRY)


def test_sglangs_mean_ttft_is_set_against_the_clients_for_the_first_tokens_between_the_same_ticks() -> None:
    r = _windowed()
    assert (r.window.t_start, r.window.t_end) == (1.0, 5.0)
    # first tokens in (1, 5]: the two sent at 1 s (one 300 ms), 2 s, 4 s and the one that succeeded at 3 s; not the
    # failed request, whose first token came too
    server, client, counted = r.server_ttft
    assert server == pytest.approx(50.0) and counted == 8
    assert client == pytest.approx((300.0 + 6 * 100.0) / 7)
    assert r.client_headers_ms == pytest.approx((2 * 40.0 + 5 * 10.0) / 7)


def test_sglangs_time_per_token_is_set_against_the_clients_streams_inside_the_window() -> None:
    server, client = _windowed().itl
    assert server == pytest.approx(10.0)
    # the 7 streams from first token to end inside (1, 5]: 0.7 s and 6 x 0.9 s over 9 gaps each
    assert client == pytest.approx(1000.0 * (0.7 + 6 * 0.9) / (7 * 9))


def test_the_load_generators_cpu_is_averaged_in_the_window_and_split_at_the_waves() -> None:
    r = _windowed()
    assert r.client_cpu_pct == pytest.approx(40.0)
    at, between, extra = r.client_cpu_waves
    # each wave: 40% of a core more over a 0.5 s tick, for one wave = 200 ms of the load generator's CPU
    assert (at, between, extra) == pytest.approx((60.0, 20.0, 200.0))


def test_running_requests_waves_and_steady_headers_are_the_windows() -> None:
    r = _windowed()
    assert r.running == pytest.approx(5.0 / 3.0)
    assert (r.arrivals.mean_size, r.arrivals.period_s, r.arrivals.count) == pytest.approx((7 / 4, 1.0, 4))
    assert sorted(r.steady_headers_ms) == [10.0] * 5 + [40.0]  # the successful steady requests'
    assert sorted(r.prefix.hit_ttft_ms) == [100.0] * 3 + [300.0] and list(r.prefix.miss_ttft_ms) == [100.0] * 2


def test_without_telemetry_the_measuring_side_is_unmeasured() -> None:
    r = steady.window_repeat(_record(), load.requests_from_records(_rows()))
    assert r.server_ttft[2] == 0 and np.isnan(r.server_ttft[0]) and np.isnan(r.client_cpu_pct)
    assert np.isnan(r.running) and np.isnan(r.client_headers_ms) and all(np.isnan(r.itl))


def test_a_runs_windows_read_its_telemetry() -> None:
    record = _record()
    group = tables.Group("baseline", "chat", "concurrency", 2, None, 12, (record,),
                         load.requests_from_records(_rows()))
    run = types.SimpleNamespace(requests={"p": load.requests_from_records(_rows())}, telemetry=TELEMETRY)
    (r,) = steady.window_groups(run, [group])[group.key]
    assert r.server_ttft[0] == pytest.approx(50.0) and r.client_cpu_pct == pytest.approx(40.0)
