"""The tracer-cost arithmetic: phase metrics from request records, on vs off, and the noise floor between the two
phases of one arm."""
from __future__ import annotations

import pytest

from llmhost.fi.trace import overhead


def requests(start: float, count: int, tokens: int, tpot_s: float, end_after: float) -> list[dict]:
    return [{"ok": True, "start": start, "end": start + end_after, "completion_tokens": tokens, "tpot_s": tpot_s,
             "ttft_s": 0.05} for _ in range(count)]


def test_phase_throughput_counts_tokens_of_its_requests_until_the_last_completion():
    records = requests(100.0, 10, 128, 0.010, 2.0) + [{"ok": False, "start": 100.5, "end": 101.0}]
    got = overhead.phase_metrics("on", 100.0, records)
    assert got["requests"] == 11 and got["ok"] == 10 and got["output_tokens"] == 1280
    assert got["output_tok_s"] == pytest.approx(1280 / 2.0)
    assert got["tpot_ms_median"] == pytest.approx(10.0) and got["ttft_ms_median"] == pytest.approx(50.0)


def test_phase_tpot_p90_interpolates_like_every_other_percentile_and_is_none_without_replies():
    records = requests(0.0, 1, 8, 0.010, 1.0) + requests(0.0, 1, 8, 0.020, 1.0)
    assert overhead.phase_metrics("off", 0.0, records)["tpot_ms_p90"] == pytest.approx(19.0)  # 10 + 0.9 * 10
    assert overhead.phase_metrics("off", 0.0, [{"ok": False, "start": 0.0, "end": 1.0}])["tpot_ms_p90"] is None


def test_a_cost_beyond_the_noise_is_reported_and_one_inside_it_is_not():
    def phase(arm: str, tok_s: float, tpot_ms: float) -> dict:
        return {"arm": arm, "output_tok_s": tok_s, "tpot_ms_median": tpot_ms}

    clear = overhead.compare([phase("off", 1000, 10.0), phase("on", 900, 11.0), phase("on", 905, 11.1),
                              phase("off", 1005, 10.0)])
    assert clear["schedule"] == ["off", "on", "on", "off"]
    assert clear["output_tok_s"]["change_pct"] == pytest.approx(100 * (902.5 / 1002.5 - 1))
    assert clear["output_tok_s"]["noise_pct"] == pytest.approx(100 * 5 / 902.5)  # the wider of the two arms
    assert clear["output_tok_s"]["verdict"] == "tracer costs"
    assert clear["tpot_ms_median"]["verdict"] == "tracer costs"
    noisy = overhead.compare([phase("off", 1000, 10.0), phase("on", 990, 10.1), phase("on", 1030, 9.9),
                              phase("off", 960, 10.2)])
    assert noisy["output_tok_s"]["verdict"] == "within noise"
    assert overhead.compare([phase("off", 1000, 10.0)])["output_tok_s"] is None  # no "on" phase: nothing to say
