"""Where a closed loop's steady rate goes: each slot's time per request, split into decoding at the streams' own
pace, the gaps longer than that pace, the wait for the first token, and the time the slot held no request.

A closed loop of c slots that completed `completed` requests in a steady window of D seconds gives each slot one
request every cycle = c * D / completed. The requests completed in the window say where a cycle went:

    decode     (N - 1) x pace: every token after the first at the pace, the median gap between two chunks of a
               stream (a decode step as the streams see it)
    stalls     (N - 1) x (mean gap - pace): gaps longer than the pace (the prefills of later arrivals, which every
               running stream waits for, and any other longer step)
    first      TTFT: the request waiting for its first token, its slot decoding nothing
    between    cycle - e2e: the slot without a request (the load generator's refill, the window's edges)

(N: mean output tokens; mean gap = sum(e2e - TTFT) / sum(N - 1)), so the four shares of a cycle add up to 1 and the
window's rate = c x 1000 / pace x decode share x N / (N - 1): the rate every slot decoding at the pace all the time
would make (pace_rate), less each share. Pure arithmetic over the stored requests; a window with no request completed
after its first token, or no gap, has no budget. What the stalls look like from a stream: its gaps of at least
STALL_X times the pace, how many a request met and how long they were on average.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

PARTS = ("decode", "stalls", "first", "between")  # the shares of a cycle, in a request's order
STALL_X = 2.0  # a gap of at least this many paces is a stall: a step that ran as long as two


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    pace_ms: float  # median gap between two chunks of a stream
    pace_rate: float  # output tok/s if every slot decoded at the pace all the time: c * 1000 / pace_ms
    shares: dict[str, float]  # PARTS -> share of a slot's cycle (sum 1)
    rate: float  # the window's output tok/s, as pace_rate x decode share x N / (N - 1)
    stalls_per_request: float  # gaps of at least STALL_X paces a request met
    stall_ms: float  # their mean length (nan: none)


def budget(concurrency: int, window_s: float, completed: int, output_tokens: np.ndarray, ttft_ms: np.ndarray,
           e2e_ms: np.ndarray, gaps_ms: np.ndarray) -> Budget | None:
    """The budget of one steady window of a closed loop: `completed` requests finished in its `window_s` seconds,
    and of those that streamed (ok, a first token) their output tokens, TTFT, e2e and every gap between chunks."""
    many = output_tokens > 1
    if concurrency < 1 or window_s <= 0 or completed < 1 or not many.any() or gaps_ms.size == 0:
        return None
    pace = float(np.median(gaps_ms))
    n = float(output_tokens.mean())
    mean_gap = float((e2e_ms[many] - ttft_ms[many]).sum() / (output_tokens[many] - 1).sum())
    cycle = 1000.0 * concurrency * window_s / completed
    if pace <= 0 or not math.isfinite(mean_gap):
        return None
    parts = {"decode": (n - 1) * pace, "stalls": (n - 1) * (mean_gap - pace), "first": float(ttft_ms.mean())}
    parts["between"] = cycle - sum(parts.values())
    shares = {name: parts[name] / cycle for name in PARTS}
    pace_rate = 1000.0 * concurrency / pace
    stalls = gaps_ms[gaps_ms >= STALL_X * pace]
    return Budget(pace, pace_rate, shares, pace_rate * shares["decode"] * n / (n - 1),  # n > 1: `many`
                  stalls.size / output_tokens.size, float(stalls.mean()) if stalls.size else math.nan)
