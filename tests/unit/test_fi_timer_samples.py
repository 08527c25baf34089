"""The GPU timers' samples and summaries by hand, with a stand-in for torch's CUDA API: graph replay divides each
replay's event gap by the calls it holds, the event timer times only the call (not the L2 flush before it, which
reads 2 x L2), and the summaries are medians and percentiles of the samples, in the units their names say."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from llmhost.fi import timing


class FakeCuda:
    """A GPU clock in ms: a graph replay, a call and an L2 flush each advance it by a fixed amount."""

    def __init__(self, call_ms: float, flush_ms: float = 0.0) -> None:
        self.now, self.call_ms, self.flush_ms = 0.0, call_ms, flush_ms
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t = None

            def record(self) -> None:
                self.t = cuda.now

            def elapsed_time(self, end: "Event") -> float:
                return end.t - self.t

        class Graph:
            def replay(self) -> None:
                cuda.now += timing.CALLS_PER_GRAPH * cuda.call_ms

        class Buffer:
            def amax(self) -> None:
                cuda.now += cuda.flush_ms

        class Context:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        self.buffers: list[int] = []  # element counts of the buffers allocated

        def ones(count: int, **kwargs) -> Buffer:
            self.buffers.append(count)
            return Buffer()

        self.module = SimpleNamespace(
            int32="int32", ones=ones,
            cuda=SimpleNamespace(
                Stream=lambda: SimpleNamespace(wait_stream=lambda other: None),
                current_stream=lambda: SimpleNamespace(wait_stream=lambda other: None),
                stream=lambda s: Context(), graph=lambda g: Context(), CUDAGraph=Graph, Event=Event,
                synchronize=lambda: None,
                get_device_properties=lambda i: SimpleNamespace(L2_cache_size=60 * 2**20)))

    def call(self) -> None:
        self.now += self.call_ms


def test_graph_replay_sample_is_the_event_gap_over_the_calls_per_graph(monkeypatch):
    cuda = FakeCuda(call_ms=0.08)  # one replay of 10 calls: 0.8 ms between its events
    monkeypatch.setitem(sys.modules, "torch", cuda.module)
    got = timing.gpu_time_ms(cuda.call, repeat=5, method="graph")
    assert got == pytest.approx([0.08] * 5)


def test_event_timer_gives_one_sample_per_call_without_the_l2_flush(monkeypatch):
    cuda = FakeCuda(call_ms=0.05, flush_ms=1.0)
    monkeypatch.setitem(sys.modules, "torch", cuda.module)
    got = timing.gpu_time_ms(cuda.call, repeat=6, method="event")
    assert got == pytest.approx([0.05] * 6)


def test_the_l2_flush_reads_a_buffer_of_twice_the_l2_size(monkeypatch):
    cuda = FakeCuda(call_ms=0.05)
    monkeypatch.setitem(sys.modules, "torch", cuda.module)
    timing.L2Flush()
    assert cuda.buffers == [2 * 60 * 2**20 // 4]  # int32 elements of 2 x a 60 MiB L2


def test_summary_is_the_median_and_linear_percentiles_of_skewed_samples():
    # sorted [1, 1, 1, 1, 10]: median 1 (the mean would be 2.8); p90 at rank 3.6 = 1 + 0.6 x 9 = 6.4
    got = timing.summarize([1.0, 10.0, 1.0, 1.0, 1.0])
    assert got == {"median_ms": 1.0, "p10_ms": pytest.approx(1.0), "p90_ms": pytest.approx(6.4), "n": 5}


def test_timed_states_median_p10_p90_in_us_and_compares_with_the_event_median(monkeypatch):
    # graph samples 0.1, 0.1, 0.5 ms: median 100 us, p10 100 us, p90 at rank 1.8 = 0.1 + 0.8 x 0.4 = 0.42 ms
    # event samples 0.13, 0.13, 0.9 ms: median 130 us (the mean would be 387 us)
    fake = {"graph": lambda fn, repeat: [0.1, 0.5, 0.1], "event": lambda fn, repeat: [0.13, 0.9, 0.13]}
    monkeypatch.setattr(timing, "TIMERS", fake)
    got = timing.timed(lambda: None, repeat=3, method="graph", compare_events=True)
    assert got["median_us"] == pytest.approx(100.0) and got["p10_us"] == pytest.approx(100.0)
    assert got["p90_us"] == pytest.approx(420.0)
    assert got["event_median_us"] == pytest.approx(130.0) and got["event_over_precise"] == pytest.approx(1.3)


def test_the_largest_gap_is_the_ratio_furthest_from_one_on_either_side():
    cases = [{"timing": "graph", "name": "a", "median_us": 100.0, "event_median_us": 110.0, "event_over_precise": 1.1},
             {"timing": "graph", "name": "b", "median_us": 100.0, "event_median_us": 70.0, "event_over_precise": 0.7}]
    got = timing.timer_comparison(cases, lambda c: c["name"])
    assert got["largest_gap_case"] == "b" and got["largest_gap_us"] == pytest.approx(-30.0)
