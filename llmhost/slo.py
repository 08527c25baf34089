"""The service-level objective a benchmark is judged by: its defaults and the one check of values given for it.

run_bench.py records an SLO with every run and make_dashboard.py can override it at build time; both accept the
same values through problem(). Stdlib only, so both scripts check their flags before importing anything heavy.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

# An interactive-chat target: first token within 1 s, >= 20 tok/s streaming (50 ms per token), met by 99% of requests.
DEFAULTS: Dict[str, float] = {"ttft_ms": 1000.0, "itl_ms": 50.0, "pct": 99.0}


def problem(ttft_ms: Optional[float], itl_ms: Optional[float], pct: Optional[float]) -> Optional[str]:
    """Why these SLO values (None = not given) cannot judge a run, naming the --slo-* flag; None when they can."""
    for flag, value in (("--slo-ttft-ms", ttft_ms), ("--slo-itl-ms", itl_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"{flag} must be a number of milliseconds > 0 (got {value:g})"
    if pct is not None and not 0 < pct <= 100:  # nan fails both comparisons
        return f"--slo-pct must be in (0, 100] percent of requests (got {pct:g})"
    return None
