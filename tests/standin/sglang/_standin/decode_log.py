"""The scheduler's `Decode batch` log line, as SGLang 0.5.17 writes it (scheduler_components/metrics_reporter.py):

    Decode batch, #running-req: 1, #token: 194, token usage: 0.00, cuda graph: True, gen throughput (token/s): 259.67, #queue-req: 0

every --decode-log-interval decode steps (default 40). The stand-in's requests wait on one step clock (engine.py) but
report their tokens one by one, so one token of a request running beside R-1 others counts 1/R step. As in SGLang,
gen throughput is the tokens since the previous line over the wall time since it, so the first line after an idle
spell counts that spell.
With --enable-mfu-metrics (and --enable-metrics, as SGLang requires) the estimate suffix follows, computed as for
Qwen3-4B in bf16 (8.04 GB of weights read per step, 2 x 4.02 G FLOPs and 147,456 KV bytes written per token); with
SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 the occupancy suffix, STANDIN_FWD_OCCUPANCY percent (default 85).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

WEIGHT_BYTES = 8.044e9  # Qwen3-4B, bf16: read once per decode step
FLOPS_PER_TOKEN = 2 * 4.022e9
KV_BYTES_PER_TOKEN = 36 * 2 * 8 * 128 * 2  # layers x K,V x KV heads x head_dim x bf16


class DecodeLog:
    def __init__(self, interval: int, mfu: bool, occupancy_pct: float | None, log: Callable[[str], None],
                 max_total_tokens: int):
        self.interval, self.mfu, self.occupancy_pct = interval, mfu, occupancy_pct
        self.log, self.max_total_tokens = log, max_total_tokens
        self.lock = threading.Lock()
        self.steps, self.tokens, self.next_at = 0.0, 0, interval
        self.tic = time.perf_counter()
        self.lines = 0  # lines logged: SGLang counts a decode pass in /metrics per line (cuda_graph_passes_total)

    def step(self, running: int, pool: Callable[[], tuple[int, int]]) -> None:
        """One decode token of a request among `running`; `pool()` -> (used tokens, queued requests), asked only
        when a line is due."""
        with self.lock:
            self.tokens += 1
            self.steps += 1 / max(running, 1)
            if self.steps < self.next_at:
                return
            self.next_at += self.interval
            self.lines += 1
            now = time.perf_counter()
            gap_s, tokens = now - self.tic, self.tokens
            self.tic, self.tokens = now, 0
        used, queued = pool()
        msg = (f"Decode batch, #running-req: {running}, #token: {used}, token usage: {used / self.max_total_tokens:.2f}"
               f", cuda graph: True, gen throughput (token/s): {tokens / gap_s:.2f}, #queue-req: {queued}")
        if self.mfu and gap_s > 0:
            msg += (f", est. decode TFLOPS/s (per GPU): {tokens * FLOPS_PER_TOKEN / gap_s / 1e12:.2f}, "
                    f"est. read BW (GB/s per GPU): {self.interval * WEIGHT_BYTES / gap_s / 1e9:.2f}, "
                    f"est. write BW (GB/s per GPU): {tokens * KV_BYTES_PER_TOKEN / gap_s / 1e9:.2f}")
        if self.occupancy_pct is not None:
            msg += f", fwd occupancy: {self.occupancy_pct:.2f}%"
        self.log(msg)
