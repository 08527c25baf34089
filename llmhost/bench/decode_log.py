"""SGLang's own per-step figures: the scheduler's `Decode batch` log line (SGLang 0.5.17), parsed. Pure, stdlib.

sglang/srt/managers/scheduler_components/metrics_reporter.py writes it every --decode-log-interval decode steps
(default 40), on the first TP rank, after SGLang's `[YYYY-mm-dd HH:MM:SS] ` stamp:

    Decode batch, #running-req: 1, #token: 194, token usage: 0.00, cuda graph: True, gen throughput (token/s): 259.67, #queue-req: 0

`#token: N, token usage: U` is pool_stats.get_decode_usage_msg_parts() (hybrid models write other parts there); the
graph label is "cuda graph" on CUDA ("cpu graph", "npu graph", "musa graph" elsewhere); True when the step replayed
a CUDA graph. gen throughput = tokens generated since the previous Decode line / wall seconds since it, so at one
running request 1000 / it is the milliseconds per decode step, everything between two forwards included.
Two optional suffixes, in this order:

    --enable-mfu-metrics (with --enable-metrics):
        , est. decode TFLOPS/s (per GPU): X, est. read BW (GB/s per GPU): Y, est. write BW (GB/s per GPU): Z
      followed by a model-specific speed-of-light hook (_decode_sol_suffix), "" in 0.5.17;
    SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 in the server's environment:
        , fwd occupancy: NN.NN%
      GPU time of the forward passes (CUDA events around load_batch + the decode graph replay,
      sglang/srt/utils/device_timer.py; sampling runs outside them) / wall time of the window, capped at 100;
      `nan%` until a window has closed since the last idle spell.

The window quirk: the wall clock of a line runs from the previous Decode line, so the first Decode line after a
Prefill line also counts the idle time before the request and its prefill (the real capture's `2.30 token/s`):
steady() leaves it out.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from pathlib import Path

_DECODE = re.compile(r"Decode batch(?: \[\d+\])?, #running-req: (?P<running>\d+), .*?"
                     r"(?:cuda|cpu|npu|musa) graph: (?P<graph>True|False), "
                     r"gen throughput \(token/s\): (?P<tok_s>[\d.]+|nan|inf)")
_READ_BW = re.compile(r", est\. read BW \(GB/s per GPU\): (?P<v>[\d.]+|nan|inf)")
_OCCUPANCY = re.compile(r", fwd occupancy: (?P<v>[\d.]+|nan)%")


@dataclasses.dataclass(frozen=True, slots=True)
class DecodeLine:
    running: int  # requests in the batch
    graph: bool  # the step replayed a CUDA graph
    gen_tok_s: float  # tokens per second over the window since the previous Decode line
    read_gb_s: float | None  # SGLang's own estimate (--enable-mfu-metrics); None: suffix absent
    occupancy_pct: float | None  # forward GPU time / window wall time (device timer); None: absent or nan

    @property
    def step_ms(self) -> float | None:
        """Wall milliseconds per decode step, valid at one running request (one token per step)."""
        return 1000.0 / self.gen_tok_s if self.gen_tok_s > 0 and math.isfinite(self.gen_tok_s) else None


def _number(match: re.Match[str] | None) -> float | None:
    value = float(match["v"]) if match else None
    return value if value is not None and math.isfinite(value) else None


def parse(line: str) -> DecodeLine | None:
    """The figures of one Decode batch line; None for any other line."""
    m = _DECODE.search(line)
    if m is None:
        return None
    return DecodeLine(int(m["running"]), m["graph"] == "True", float(m["tok_s"]),
                      _number(_READ_BW.search(line, m.end())), _number(_OCCUPANCY.search(line, m.end())))


def steady(lines: Iterable[str]) -> list[DecodeLine]:
    """Every Decode line except the first after each Prefill line (its window holds idle time and a prefill)."""
    out: list[DecodeLine] = []
    after_prefill = False
    for line in lines:
        if "Prefill batch" in line:
            after_prefill = True
            continue
        parsed = parse(line)
        if parsed is not None:
            if not after_prefill:
                out.append(parsed)
            after_prefill = False
    return out


def single_stream(lines: Iterable[str]) -> list[DecodeLine]:
    """The steady lines of one running request on a CUDA graph: those whose step_ms is one token's time."""
    return [d for d in steady(lines) if d.running == 1 and d.graph and d.step_ms is not None]


def read_from(log: Path, offset: int) -> list[str]:
    """The log's lines written after byte `offset` ([] when the file is gone or shorter: it was rotated)."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()
