"""Lockstep waves in a closed-loop point: requests sent in clusters rather than one by one.

A closed loop sends a request when one finishes. When every answer has the same length (the built-in workloads
ask for exactly 256 tokens and ignore EOS), the requests that started together finish together and are replaced
together, so the steady state stays a train of waves: c requests sent within milliseconds, then none until that
wave ends. Each wave's TTFT then includes prefilling all of it at once, and TTFT percentiles measure the wave, not a
request arriving alone; traffic whose answers vary in length spreads out instead. This module finds the waves in a
steady window's send times: sends closer than GAP_S to the previous one belong to the same wave.

Whether a point runs in lockstep is judged by the wave a request was sent in (its size, the mean over requests), not
the mean over waves: a few stragglers sent one by one between the waves count as many one-request "waves" and pull
the mean over waves down, while most requests, and every slow first token, still came in the large waves (an H200's
agent c=128 repeat: 19 requests a wave, but a request's wave held 76 on average).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

GAP_S = 0.05  # sends closer than this to the previous one join its wave
WAVE_SHARE = 0.25  # a point "runs in waves" when its mean wave holds at least this share of its concurrency


@dataclasses.dataclass(frozen=True, slots=True)
class Waves:
    mean_size: float  # requests per wave (nan without sends)
    period_s: float  # mean time from one wave's first send to the next's (nan with fewer than two waves)
    count: int
    seen_size: float  # the size of the wave a request was sent in, mean over requests (nan without sends)

    def in_lockstep(self, concurrency: int | None) -> bool:
        return bool(concurrency) and math.isfinite(self.seen_size) and self.seen_size >= WAVE_SHARE * concurrency \
            and self.seen_size >= 2


def _first_of_wave(sorted_s: np.ndarray) -> np.ndarray:
    """Which of these ascending send times starts a wave (the first, and each more than GAP_S after the one before)."""
    return np.concatenate(([True], np.diff(sorted_s) > GAP_S)) if sorted_s.size else np.zeros(0, bool)


def starts(start_s: np.ndarray) -> np.ndarray:
    """Each wave's first send time (ascending)."""
    t = np.sort(start_s)
    return t[_first_of_wave(t)]


def _waves_in_send_order(start_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the sends' ascending order, each sorted send's wave: 1, 1, 2, ...)."""
    order = np.argsort(start_s, kind="stable")
    return order, np.cumsum(_first_of_wave(start_s[order]))


def sizes(start_s: np.ndarray) -> np.ndarray:
    """The size of the wave each of these sends belongs to, in their order (any order)."""
    order, wave = _waves_in_send_order(start_s)
    out = np.zeros(start_s.size, dtype=int)
    out[order] = np.bincount(wave)[wave]
    return out


def find(start_s: np.ndarray) -> Waves:
    """The waves of these send times (any order)."""
    if start_s.size == 0:
        return Waves(math.nan, math.nan, 0, math.nan)
    firsts = starts(start_s)
    period = float(np.diff(firsts).mean()) if firsts.size > 1 else math.nan
    return Waves(start_s.size / firsts.size, period, int(firsts.size), float(sizes(start_s).mean()))


def late_in_waves(wave_sizes: np.ndarray, late: np.ndarray, concurrency: int | None) -> tuple[int, int | None]:
    """(how many requests were late, how many of them were sent in a wave of at least WAVE_SHARE of the concurrency):
    are a point's slow first tokens its lockstep waves? None for the second without a concurrency (open loop)."""
    if not concurrency:
        return int(late.sum()), None
    return int(late.sum()), int((wave_sizes[late] >= WAVE_SHARE * concurrency).sum())


MIN_PACED = 8  # a wave needs this many requests with response-header times to say how far apart they came back


def headers_pace_ms(start_s: np.ndarray, headers_ms: np.ndarray) -> float:
    """How far apart the response headers of one wave came back, ms per request: the p10–p90 spread of a wave's
    header times over the requests between those two, the median over waves of at least MIN_PACED timed requests.
    A wave taken up one request at a time spreads its headers by that request's time; one taken up at once gives
    ~0. nan without such a wave."""
    order, wave = _waves_in_send_order(start_s)
    h = headers_ms[order]
    paces = []
    for w in np.unique(wave):
        timed = np.sort(h[(wave == w) & np.isfinite(h)])
        if timed.size >= MIN_PACED:
            lo, hi = np.percentile(timed, [10, 90])
            paces.append(float(hi - lo) / (0.8 * (timed.size - 1)))
    return float(np.median(paces)) if paces else math.nan
