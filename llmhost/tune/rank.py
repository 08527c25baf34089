"""The tuner's ranking: goodput (requests per second meeting the SLO) of every trial, with its CI, the paired
difference to the defaults, and the winner.

    measured = goodput_by_repeat(run_root, latest_attempts, slo)   # (trial, load) -> {repeat: RepeatGoodput}
    ranking = rank(measured, price)                                # rows best first, .winner, .reason

Goodput of one repeat: requests per second within the SLO (llmhost.stats.good_mask: TTFT and mean ITL within their
limits) in the point's steady window, the share of its steady requests that met it times the window's request rate
(llmhost.bench.window.Window.goodput_rps, the dashboard's steady goodput too). A trial's score is its best load's mean over repeats with the Student-t 95% CI
(llmhost.repeats); at that load it is compared with the defaults *paired* (repeat k of both ran with the same
seed). The winner is the best-ranked trial whose paired difference is "better" (its CI above 0), so it is at least
as good as the defaults by its CI; when none is, the defaults stay and the winner is the defaults.
Dollars per million output tokens (GPU_HOURLY_USD) are priced on the good requests' output tokens per second:
what the GPU's hour buys in tokens that met the SLO (llmhost.cost, the dashboard's cost card's function).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np

from llmhost import cost, repeats, stats
from llmhost.bench import records, window
from llmhost.bench.records import PointRecord, RequestRecord
from llmhost.tune.space import DEFAULTS_NAME

NO_DIFF = stats.Difference(*([math.nan] * 6))


@dataclasses.dataclass(frozen=True, slots=True)
class RepeatGoodput:
    goodput_rps: float  # requests per second within the SLO in the steady window
    good_tok_s: float  # their output tokens per second
    good: int  # steady requests that met the SLO
    steady: int  # steady requests (sent in the window and finished in it)
    is_steady: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TrialRow:
    trial: str
    load: str  # "c64" / "r8": the trial's best load
    goodput: stats.Interval  # req/s meeting the SLO
    share: stats.Interval  # share of the window's requests meeting it (0..1), llmhost.repeats.goodput_ci
    vs_defaults: stats.Difference  # paired, goodput: this trial - the defaults (none for the defaults)
    verdict: repeats.Verdict | Literal["reference"]  # "reference": the defaults' own row
    usd_per_m: stats.Interval | None  # $ per million SLO-meeting output tokens; None without GPU_HOURLY_USD
    not_steady: int  # repeats whose window failed the steadiness check (kept: a growing queue is the trial's)


@dataclasses.dataclass(frozen=True, slots=True)
class Ranking:
    rows: list[TrialRow]  # best mean goodput first
    winner: str | None  # a trial name (DEFAULTS_NAME: keep the defaults); None: the defaults were not measured
    reason: str


def load_label(r: PointRecord) -> str:
    return f"c{r.concurrency}" if r.request_rate is None else f"r{r.request_rate:g}"


def repeat_goodput(point: PointRecord, rows: list[RequestRecord], slo: stats.Slo) -> RepeatGoodput:
    """Goodput of one repeat inside its steady window (see the module docstring)."""
    rows = sorted(rows, key=lambda r: r.start_s)
    w, steadiness = window.measure(point, rows)
    if not w.has_window:
        return RepeatGoodput(math.nan, math.nan, 0, 0, False)
    ttft = np.array([math.nan if r.ttft_ms is None else r.ttft_ms for r in rows])
    out = np.array([r.output_tokens for r in rows], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (np.array([r.e2e_ms for r in rows]) - ttft) / (out - 1), math.nan)
    steady = w.mask("steady")
    good = stats.good_mask(np.array([r.ok for r in rows]), ttft, tpot, slo) & steady
    n_good, n_steady = int(good.sum()), int(steady.sum())
    rate = w.goodput_rps(n_good, n_steady)
    tokens = float(out[good].sum()) / n_good if n_good else 0.0  # a good request's output tokens, on average
    return RepeatGoodput(rate, rate * tokens, n_good, n_steady, steadiness.is_steady)


def goodput_by_repeat(root: Path, latest: Mapping[str, PointRecord],
                      slo: stats.Slo) -> dict[tuple[str, str], dict[int, RepeatGoodput]]:
    """(trial, load) -> {repeat: goodput} of every ok point of the run (its stored requests)."""
    out: dict[tuple[str, str], dict[int, RepeatGoodput]] = {}
    for rec in latest.values():
        if rec.status != "ok" or rec.pattern not in ("concurrency", "qps"):
            continue
        rows = records.read_records(root / rec.requests_file, RequestRecord.from_dict).records
        out.setdefault((rec.arm, load_label(rec)), {})[rec.repeat] = repeat_goodput(rec, rows, slo)
    return out


def _field(reps: Mapping[int, RepeatGoodput], name: str) -> dict[int, float]:
    return {k: getattr(v, name) for k, v in reps.items()}


def paired_verdict(d: stats.Difference) -> repeats.Verdict:
    """better/worse when the paired CI of the goodput difference excludes 0 — read on the absolute difference,
    which has a CI even where the defaults' goodput is 0 and the relative one has none."""
    if math.isnan(d.delta):
        return "no data"
    if math.isnan(d.lo) or math.isnan(d.hi):
        return "no CI"
    return "better" if d.lo > 0 else "worse" if d.hi < 0 else "within noise"


def trial_row(trial: str, load: str, measured: Mapping[tuple[str, str], dict[int, RepeatGoodput]],
              gpu_hourly_usd: float | None) -> TrialRow:
    reps = measured[(trial, load)]
    mine = _field(reps, "goodput_rps")
    is_defaults = trial == DEFAULTS_NAME
    diff = NO_DIFF if is_defaults else repeats.paired_diff(
        _field(measured.get((DEFAULTS_NAME, load), {}), "goodput_rps"), mine)
    share = repeats.goodput_ci({k: (v.good, v.steady) for k, v in reps.items()})
    return TrialRow(trial, load, repeats.across_repeats(mine), share, diff,
                    "reference" if is_defaults else paired_verdict(diff),
                    cost.usd_per_million_tokens(gpu_hourly_usd, repeats.across_repeats(_field(reps, "good_tok_s"))),
                    sum(not v.is_steady for v in reps.values()))


def _load_score(reps: Mapping[int, RepeatGoodput]) -> float:
    """Mean goodput over repeats; -inf for a load without one (nan), so a measured load is always preferred."""
    value = repeats.across_repeats(_field(reps, "goodput_rps")).value
    return -math.inf if math.isnan(value) else value


def rank(measured: Mapping[tuple[str, str], dict[int, RepeatGoodput]],
         gpu_hourly_usd: float | None = None) -> Ranking:
    """One row per trial at its best load, best first; the winner by the rule in the module docstring."""
    best: dict[str, str] = {}
    for trial, load in measured:
        held = best.get(trial)
        if held is None or _load_score(measured[(trial, load)]) > _load_score(measured[(trial, held)]):
            best[trial] = load
    rows = sorted((trial_row(t, load, measured, gpu_hourly_usd) for t, load in best.items()),
                  key=lambda r: -r.goodput.value if not math.isnan(r.goodput.value) else math.inf)
    return Ranking(rows, *winner(rows))


def winner(rows: list[TrialRow]) -> tuple[str | None, str]:
    if not any(r.trial == DEFAULTS_NAME and not math.isnan(r.goodput.value) for r in rows):
        return None, "the defaults have no measured goodput: nothing to compare with"
    for r in rows:
        if r.trial != DEFAULTS_NAME and r.verdict == "better":
            return r.trial, f"{r.trial}: goodput {diff_text(r.vs_defaults)} vs the defaults (paired 95% CI)"
    return DEFAULTS_NAME, "no trial beat the defaults beyond noise (paired 95% CI): keep the defaults"


def to_json(ranking: Ranking) -> dict:
    """The ranking as stored in tune.json and shown by the dashboard (nan -> None)."""
    def clean(value: object) -> object:
        if isinstance(value, float):
            return None if math.isnan(value) else (str(value) if math.isinf(value) else value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value
    return {"winner": ranking.winner, "reason": ranking.reason,
            "rows": [clean(dataclasses.asdict(r)) for r in ranking.rows]}


def diff_text(d: stats.Difference) -> str:
    """'+12.3% [+8.1, +16.5]', or in req/s where the defaults' goodput is 0 (no relative change); '-' without CI."""
    if d.has_ci:
        return f"{d.rel_pct:+.1f}% [{d.rel_lo:+.1f}, {d.rel_hi:+.1f}]"
    if not (math.isnan(d.lo) or math.isnan(d.hi)):
        return f"{d.delta:+.2f} req/s [{d.lo:+.2f}, {d.hi:+.2f}]"
    return "-"
