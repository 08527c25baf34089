"""The one check of SLO values both run_bench.py and make_dashboard.py use: each flag's bound, named in the line."""
from __future__ import annotations

import math

import pytest

from llmhost import slo


@pytest.mark.parametrize("ttft,itl,pct,flag", [
    (0.0, None, None, "--slo-ttft-ms"), (-5.0, None, None, "--slo-ttft-ms"), (math.inf, None, None, "--slo-ttft-ms"),
    (None, 0.0, None, "--slo-itl-ms"), (None, math.nan, None, "--slo-itl-ms"),
    (None, None, 0.0, "--slo-pct"), (None, None, 100.5, "--slo-pct"), (None, None, math.nan, "--slo-pct"),
])
def test_each_out_of_range_slo_value_is_named_by_its_flag(ttft, itl, pct, flag):
    problem = slo.problem(ttft, itl, pct)
    assert problem is not None and problem.startswith(flag + " must be")


def test_the_bounds_themselves_and_the_defaults_are_accepted():
    assert slo.problem(0.001, 0.001, 100.0) is None
    assert slo.problem(None, None, None) is None
    assert slo.problem(slo.DEFAULTS["ttft_ms"], slo.DEFAULTS["itl_ms"], slo.DEFAULTS["pct"]) is None
    assert slo.problem(1000.0, 50.0, 99.0) is None
    assert slo.problem(None, None, 1e-9) is None  # any share above 0 is a target
    assert "(got 0)" in slo.problem(0.0, None, None) and "(got 101)" in slo.problem(None, None, 101.0)
