"""What a tune run says when it ends and what the dashboard's Tuner section shows: the ranking's lines
(llmhost.tune.driver.ranking_lines, budget_line, finish, time_left) and the section's cells, its chosen line and its
text (llmhost.report.tuner)."""
from __future__ import annotations

import dataclasses
import json
import math
import types

import pytest

from llmhost import cost, stats
from llmhost.bench.costs import CostModel
from llmhost.bench.runner import BenchError
from llmhost.report import tuner
from llmhost.tune import driver, rank
from llmhost.tune.space import DEFAULTS_NAME, Lever, Trial

NO_CI = stats.Interval(1.0, math.nan, math.nan, 1)


def _row(trial: str, goodput: stats.Interval, verdict: str, diff: stats.Difference = rank.NO_DIFF,
         usd: stats.Interval | None = None, share: float = 0.95, not_steady: int = 0) -> rank.TrialRow:
    return rank.TrialRow(trial, "c64", goodput, stats.Interval(share, share - 0.02, min(0.995, share + 0.02), 3),
                         diff, verdict, usd, not_steady)


BETTER = _row("cps2048", stats.Interval(22.5, 21.0, 24.0, 3), "better",
              stats.Difference(2.5, 1.0, 4.0, 12.5, 5.0, 20.0), stats.Interval(0.125, 0.118, 0.133, 3), 0.99, 1)
DEFAULTS = _row(DEFAULTS_NAME, stats.Interval(20.0, 19.0, 21.0, 3), "reference",
                usd=stats.Interval(0.14, 0.13, 0.15, 3))
RANKING = rank.Ranking([BETTER, DEFAULTS], "cps2048", "cps2048 beats the defaults by its paired CI")


def test_the_ranking_lines_are_a_table_with_the_winner_and_what_was_cut():
    lines = driver.ranking_lines(RANKING, ["sp-lpm", "mix-on"])
    assert lines[0].split() == ["trial", "load", "goodput", "req/s", "[95%", "CI]", "in", "SLO", "vs", "defaults",
                                "[95%", "CI]", "verdict", "$/M", "tok"]
    assert lines[1].split() == ["cps2048", "c64", "22.50", "[21.00,", "24.00]", "99.0%", "+12.5%", "[+5.0,", "+20.0]",
                                "better", "0.125"]
    assert lines[2].split() == [DEFAULTS_NAME, "c64", "20.00", "[19.00,", "21.00]", "95.0%", "-", "reference",
                                "0.140"]
    assert lines[3] == "winner: cps2048 — cps2048 beats the defaults by its paired CI"
    assert lines[4] == "cut by the budget: sp-lpm, mix-on" and len(lines) == 5
    assert len({len(line) for line in lines[:3]}) == 1  # the columns line up


def test_a_trial_without_ci_or_price_and_a_ranking_without_winner_or_cut():
    row = _row("tok8", NO_CI, "within noise")
    lines = driver.ranking_lines(rank.Ranking([row], None, "the defaults were not measured"), [])
    assert lines[1].split() == ["tok8", "c64", "1.00", "95.0%", "-", "within", "noise", "-"]
    assert lines[-1] == "winner: - — the defaults were not measured" and len(lines) == 3


def test_the_budget_line_says_what_the_tune_spent():
    assert driver.budget_line(900.0, 900.0) == "took 15m00s of its 15m00s budget (100%)"
    assert driver.budget_line(0.25, 0.5) == "took 0m00s of its 0m00s budget (50%)"  # any budget above 0 has a share
    assert driver.budget_line(0.0, 0.0) == "took 0m00s of its 0m00s budget (-)"
    assert driver.budget_line(61.0, 0.0) == "took 1m01s, over its 0m00s budget by 1m01s (-)"


def test_time_left_counts_an_earlier_sitting_and_the_clock(monkeypatch):
    clock = iter([100.0, 160.0])
    monkeypatch.setattr(driver.time, "monotonic", lambda: next(clock))
    left = driver.time_left(900.0, 70.0, 200.0)  # started at 70 s on the clock, 200 s spent before this sitting
    assert left() == 900.0 - 200.0 - 30.0 and left() == 900.0 - 200.0 - 90.0


LEVER = Lever("--chunked-prefill-size", "cps", ("2048",), "prefill chunk")
TUNE = driver.TuneRun(rows=(("agent", "concurrency", 64, None, 384),), repeats=3, budget_s=900.0, space=(LEVER,),
                      trials=(Trial(DEFAULTS_NAME, (), "coarse"),
                              Trial("cps2048", (("--chunked-prefill-size", "2048"),), "coarse")),
                      cut=("mix-on",), stage="refine", coarse_estimate_s=600.0)


def test_finish_writes_tune_json_and_the_winners_lines_when_asked(tmp_path, capsys):
    local = tmp_path / "config.local.env"
    closing = driver.finish(tmp_path, "20261205-1200-tune", TUNE, RANKING, "--foo 1", local, 774.0)
    assert closing == {"winner": "cps2048", "reason": RANKING.reason, "lines": ["CHUNKED_PREFILL_SIZE=2048"],
                       "applied": str(local), "trials": 2, "cut": ["mix-on"], "spent_s": 774.0, "budget_s": 900.0}
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert {k: saved[k] for k in closing} == closing and saved["ranking"]["winner"] == "cps2048"
    assert [r["trial"] for r in saved["ranking"]["rows"]] == ["cps2048", DEFAULTS_NAME]
    text = local.read_text()
    assert text.endswith("CHUNKED_PREFILL_SIZE=2048\n") and "run_bench.py --tune, run 20261205-1200-tune" in text
    out = capsys.readouterr().out
    assert "[tune] took 12m54s of its 15m00s budget (86%)" in out
    assert f"[tune] wrote CHUNKED_PREFILL_SIZE to {local}" in out and "[tune] cut by the budget: mix-on" in out


def test_finish_without_apply_prints_the_lines_and_writes_no_config(tmp_path, capsys):
    closing = driver.finish(tmp_path, "r", TUNE, RANKING, "", None, 774.04)
    assert closing["lines"] == ["CHUNKED_PREFILL_SIZE=2048"] and closing["applied"] is None
    assert closing["spent_s"] == 774.0  # to a tenth of a second
    out = capsys.readouterr().out
    assert "\n[tune] to use the winner, add to config.local.env (or run again with --apply):\n" \
           "    CHUNKED_PREFILL_SIZE=2048\n" in out
    assert not (tmp_path / "config.local.env").exists()


BOTH = Trial("cps2048-lpm", (("--chunked-prefill-size", "2048"), ("--schedule-policy", "lpm")), "refine")


def test_a_winner_with_a_launch_flag_joins_the_users_server_extra_args(tmp_path, capsys):
    tune = driver.TuneRun(TUNE.rows, 3, 900.0, TUNE.space, (*TUNE.trials, BOTH), (), "refine", 600.0)
    won = rank.Ranking([dataclasses.replace(BETTER, trial=BOTH.name)], BOTH.name, "it beats the defaults")
    local = tmp_path / "config.local.env"
    closing = driver.finish(tmp_path, "r", tune, won, "--foo=1", local, 10.0)
    assert closing["lines"] == ["CHUNKED_PREFILL_SIZE=2048", "SERVER_EXTRA_ARGS=--foo=1 --schedule-policy lpm"]
    assert f"[tune] wrote CHUNKED_PREFILL_SIZE, SERVER_EXTRA_ARGS to {local}\n" in capsys.readouterr().out


def test_a_ranking_without_the_defaults_measured_writes_nothing(tmp_path):
    unmeasured = rank.Ranking([BETTER], None, "the defaults were not measured")
    closing = driver.finish(tmp_path, "r", TUNE, unmeasured, "", tmp_path / "config.local.env", 10.0)
    assert closing["winner"] is None and closing["lines"] == [] and closing["applied"] is None


def test_when_the_defaults_win_there_is_nothing_to_write(tmp_path, capsys):
    kept = rank.Ranking([DEFAULTS, BETTER], DEFAULTS_NAME, "no trial beats the defaults by its CI")
    closing = driver.finish(tmp_path, "r", TUNE, kept, "", tmp_path / "config.local.env", 10.0)
    assert closing["lines"] == [] and closing["applied"] is None and closing["winner"] == DEFAULTS_NAME
    assert not (tmp_path / "config.local.env").exists() and "add to config.local.env" not in capsys.readouterr().out


FLAGS = {"cps2048": "--chunked-prefill-size 2048", DEFAULTS_NAME: "(the defaults)"}
STAGE = {"cps2048": "coarse", DEFAULTS_NAME: "coarse"}


def test_the_sections_cells():
    cells = tuner._cells(BETTER, FLAGS, STAGE)
    assert cells == {"trial": "cps2048", "stage": "coarse", "flags": "--chunked-prefill-size 2048", "load": "c64",
                     "goodput": "22.50 <span class=noise>[21.00, 24.00]</span>",
                     "share": "99.0 <span class=noise>[97.0, 99.5]</span>", "diff": "+12.5% [+5.0, +20.0]",
                     "verdict": "class=better|better", "usd": "0.125 <span class=noise>[0.118, 0.133]</span>",
                     "not_steady": "1"}
    worse = tuner._cells(_row("x", NO_CI, "worse", usd=stats.Interval(math.inf, math.nan, math.nan, 1)), {}, {})
    assert worse["verdict"] == "class=worse|worse" and worse["usd"] == "∞" and worse["flags"] == ""
    assert worse["stage"] == "" and worse["diff"] == "-" and worse["goodput"] == "1.00"
    plain = tuner._cells(_row("y", NO_CI, "within noise"), {}, {})
    assert plain["verdict"] == "within noise" and plain["usd"] == "—"


def test_what_the_run_chose_is_read_from_its_tune_json(tmp_path):
    run = types.SimpleNamespace(path=tmp_path)
    assert tuner._chosen(run) == ""  # the run has not finished its ranking
    (tmp_path / "tune.json").write_text("{not json")
    assert tuner._chosen(run) == ""
    (tmp_path / "tune.json").write_text(json.dumps({"winner": "cps2048", "lines": ["CHUNKED_PREFILL_SIZE=2048",
                                                                                   "SERVER_EXTRA_ARGS=--x 1"],
                                                    "applied": "/h/config.local.env"}))
    assert tuner._chosen(run) == ("cps2048: CHUNKED_PREFILL_SIZE=2048; SERVER_EXTRA_ARGS=--x 1 — written to "
                                  "/h/config.local.env")
    (tmp_path / "tune.json").write_text(json.dumps({"winner": "cps2048", "lines": ["A=1"], "applied": None}))
    assert tuner._chosen(run) == "cps2048: A=1 — not applied (no --apply)"
    (tmp_path / "tune.json").write_text(json.dumps({"winner": DEFAULTS_NAME, "lines": []}))
    assert tuner._chosen(run) == f"{DEFAULTS_NAME}: nothing to write"


def _run(tmp_path, tune: dict | None) -> types.SimpleNamespace:
    arms = [t.arm(i) for i, t in enumerate(TUNE.trials)]
    return types.SimpleNamespace(path=tmp_path, manifest=types.SimpleNamespace(tune=tune), points=[], arms=arms)


def test_a_run_that_is_not_a_tune_has_no_section(tmp_path):
    assert tuner.section(_run(tmp_path, None), stats.Slo(500, 50, 99), None) == (None, None)


def test_the_section_ranks_under_the_pages_slo_and_shows_the_runs_choice(tmp_path, monkeypatch):
    seen = {}

    def measured(root, latest, slo):
        seen.update(slo=slo, root=root, latest=latest)
        return {}

    def ranked(measured_goodput, price):
        seen["price"] = price
        return RANKING

    monkeypatch.setattr(tuner.rank, "goodput_by_repeat", measured)
    monkeypatch.setattr(tuner.rank, "rank", ranked)
    (tmp_path / "tune.json").write_text(json.dumps({"winner": "cps2048", "lines": ["CHUNKED_PREFILL_SIZE=2048"],
                                                    "applied": None}))
    slo = stats.Slo(300, 40, 95)
    run = _run(tmp_path, TUNE.to_dict())
    run.points = [types.SimpleNamespace(point_id="baseline.agent.concurrency.c64.r1")]
    html, ranking = tuner.section(run, slo, None)
    assert seen["slo"] is slo and seen["price"] is None and seen["root"] == tmp_path
    assert seen["latest"] == {"baseline.agent.concurrency.c64.r1": run.points[0]}  # the run's latest attempts
    assert ranking == rank.to_json(RANKING)
    assert "TTFT ≤ 300 ms, mean ITL ≤ 40 ms" in html
    assert ("mean of 3 paired repeats with a Student-t 95% CI. A trial wins only when its paired difference to the "
            "defaults is above 0 by its CI.</p>") in html
    assert html.count("<th class=l>") == 3  # trial, stage and flags read left-aligned
    assert "<td class='l'>coarse</td>" in html  # each trial's stage, from the manifest's tune
    assert "<b>Winner under this page's SLO:</b> cps2048 — cps2048 beats the defaults by its paired CI" in html
    assert "<b>The run chose:</b> cps2048: CHUNKED_PREFILL_SIZE=2048 — not applied (no --apply)" in html
    assert "Search space: --chunked-prefill-size 2048 — prefill chunk." in html
    assert "Cut by the budget: mix-on." in html and "$ per M good output tokens" not in html
    assert "Dollars at" not in html and "XX" not in html
    assert "<td class='l'>--chunked-prefill-size 2048</td>" in html and "(the defaults)</td>" in html

    price = cost.GpuPrice(2.5, "GPU_HOURLY_USD in config.env")
    html, _ = tuner.section(_run(tmp_path, {**TUNE.to_dict(), "cut": []}), slo, price)
    assert seen["price"] == 2.5  # dollars per million good tokens ranked at the page's price
    assert "$ per M good output tokens" in html and "Dollars at 2.5 $/h (GPU_HOURLY_USD in config.env)." in html
    assert "Cut by the budget" not in html

    wide = {**TUNE.to_dict(), "cut": ["a", "b"],
            "space": [{"flag": "--page-size", "values": ["16", "32"], "why": "pages"},
                      {"flag": "--schedule-policy", "values": ["lpm"], "why": "prefix reuse"}]}
    (tmp_path / "tune.json").unlink()
    html, _ = tuner.section(_run(tmp_path, wide), slo, None)
    assert "Search space: --page-size 16, 32 — pages; --schedule-policy lpm — prefix reuse." in html
    assert "Cut by the budget: a, b." in html and "The run chose" not in html and "XX" not in html
    unnamed = rank.Ranking([BETTER], None, "the defaults were not measured")
    monkeypatch.setattr(tuner.rank, "rank", lambda m, price: unnamed)
    html, _ = tuner.section(_run(tmp_path, wide), slo, None)
    assert "<b>Winner under this page's SLO:</b> — — the defaults were not measured" in html


def test_the_tune_record_travels_through_the_manifest_whole():
    assert driver.TuneRun.from_dict(json.loads(json.dumps(TUNE.to_dict()))) == TUNE
    assert TUNE.to_dict()["space"] == [{"flag": "--chunked-prefill-size", "key": "cps", "values": ["2048"],
                                        "why": "prefill chunk", "also": []}]
    batching = ("--enable-dynamic-batch-tokenizer",)
    tok = dataclasses.replace(TUNE, space=(Lever("--tokenizer-worker-num", "tok", ("8",), "processes", batching),),
                              trials=(Trial("tok8", (("--tokenizer-worker-num", "8"),), "coarse", batching),))
    assert driver.TuneRun.from_dict(json.loads(json.dumps(tok.to_dict()))) == tok
    before = json.loads(json.dumps(TUNE.to_dict()))  # a record written before levers had `also`
    for item in (*before["space"], *before["trials"]):
        del item["also"]
    assert driver.TuneRun.from_dict(before) == TUNE


def test_a_damaged_tune_record_is_one_line_that_says_what_to_do():
    with pytest.raises(BenchError) as err:
        driver.TuneRun.from_dict({k: v for k, v in TUNE.to_dict().items() if k != "space"})
    assert str(err.value) == ("the manifest's tune record is damaged (KeyError: 'space') — start a new "
                              "./run_bench.py --tune")


def test_a_new_tune_starts_in_its_coarse_stage_with_the_defaults_first():
    tune, stage = driver.new_tune((LEVER,), TUNE.rows, 3, CostModel(), 3600.0)
    assert tune.stage == "coarse" and tune.budget_s == 3600.0 and tune.repeats == 3
    assert [t.name for t in tune.trials] == [t.name for t in stage.trials] and tune.trials[0].name == DEFAULTS_NAME
    assert tune.coarse_estimate_s == stage.estimate_s and tune.cut == ()
