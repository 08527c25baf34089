"""t(0.975, df), the quantile every Student-t CI uses, against the t distribution itself: the density
Γ((ν+1)/2) / (sqrt(νπ) Γ(ν/2)) (1 + x²/ν)^(-(ν+1)/2) integrated numerically, read where the CDF reaches 0.975."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmhost import stats

_X = np.linspace(0.0, 20.0, 400_001)


def t_quantile_975(df: int) -> float:
    """x with P(T <= x) = 0.975 for T ~ t(df): the density's integral from 0 reaches 0.475 (trapezoid rule)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = c * (1.0 + _X * _X / df) ** (-(df + 1) / 2)
    cdf = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) / 2 * np.diff(_X))])
    return float(np.interp(0.475, cdf, _X))


@pytest.mark.parametrize("df", range(1, 31))
def test_each_tabled_quantile_is_the_t_quantile_to_three_decimals(df: int) -> None:
    """The table holds t(0.975, df) rounded to 3 decimals: within half a unit of the last place."""
    assert abs(stats.t975(df) - t_quantile_975(df)) <= 0.0005 + 1e-6


@pytest.mark.parametrize("df", [31, 40, 60, 120])
def test_beyond_the_table_the_expansion_is_within_a_thousandth(df: int) -> None:
    assert abs(stats.t975(df) - t_quantile_975(df)) < 1e-3


def test_the_quantile_falls_as_degrees_of_freedom_grow_towards_z() -> None:
    """More degrees of freedom never widen an interval; the limit is the normal 1.96."""
    qs = [stats.t975(df) for df in range(1, 200)]
    assert all(a > b for a, b in zip(qs, qs[1:]))
    assert 1.959964 < qs[-1] < 1.975  # t(0.975, 199) = 1.972
