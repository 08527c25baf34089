"""The tuner's pure parts: the search space (coarse, refine), the budget fit, goodput and the ranking with its
paired winner rule, the config.local.env writer, and the tune state's round trip through the manifest."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys

import pytest

from llmhost import stats
from llmhost.bench import arms
from llmhost.bench.arms import ARM_LIFECYCLE_SETTINGS, Arm, unread_flag_problem
from llmhost.bench.costs import CostModel
from llmhost.bench.records import PointRecord, RequestRecord
from llmhost.bench.runner import BenchError
from llmhost.settings import CHECKS
from llmhost.tune import apply, driver, plan, rank, space
from llmhost.tune.rank import RepeatGoodput

ROWS = [("agent", "concurrency", 64, None, 256)]


def test_coarse_trials_start_with_the_defaults_and_probe_every_lever_before_any_middle_value():
    names = [t.name for t in space.coarse_trials(space.SPACE)]
    assert names == ["baseline", "mrr64", "spd", "cps2048", "dbt", "tok8", "splpm", "mix", "sri4", "ps16", "mrr256",
                     "cps16384", "mrr128", "cps4096"]
    flags = {t.name: t.flags() for t in space.coarse_trials(space.SPACE)}
    assert flags["mrr64"] == ("--max-running-requests", "64")
    assert flags["dbt"] == ("--enable-dynamic-batch-tokenizer",)  # a switch: bare
    assert flags["spd"] == ("SHARED_PREFIX_DECODE=on",)  # a setting: as an arm moves it
    # a count alone would launch plain processes (TOKENIZER_WORKER_NUM=8): the trial keeps them batching
    assert flags["tok8"] == ("--tokenizer-worker-num", "8", "--enable-dynamic-batch-tokenizer")
    both = space.trial_of([("--tokenizer-worker-num", "8"), ("--enable-dynamic-batch-tokenizer", space.SWITCH)],
                          space.SPACE, "refine")
    assert both.name == "dbt-tok8"
    assert both.flags() == ("--enable-dynamic-batch-tokenizer", "--tokenizer-worker-num", "8")  # the flag once
    assert arms.server_overrides(both.arm(1)) == (["--enable-dynamic-batch-tokenizer"], {"TOKENIZER_WORKER_NUM": "8"})


def test_a_running_request_cap_that_closed_loop_loads_never_reach_is_not_tried():
    levers, idle = space.binding(space.SPACE, ROWS)  # concurrency 64: no more than 64 requests are ever in flight
    assert [lv.flag for lv in levers] == [lv.flag for lv in space.SPACE[1:]]
    assert idle == ["--max-running-requests 64,128,256 (never binds at concurrency 64)"]
    assert [t.name for t in space.coarse_trials(levers)][:3] == ["baseline", "spd", "cps2048"]
    wider = [("agent", "concurrency", 16, None, 96), ("agent", "concurrency", 128, None, 768)]
    levers, idle = space.binding(space.SPACE, wider)  # the largest load decides: a cap of 64 binds at 128
    assert levers[0].values == ("64",) and idle == ["--max-running-requests 128,256 (never binds at concurrency 128)"]
    poisson = [*wider, ("agent", "qps", None, 8.0, 120)]  # arrivals can queue past any cap
    assert space.binding(space.SPACE, poisson) == (space.SPACE, [])


def test_a_switch_lever_from_the_environment_is_a_bare_flag_and_combines_with_others():
    levers = space.space_from_env({space.SPACE_ENV: "--max-running-requests=8;--enable-mixed-chunk=on"})
    both = space.trial_of([("--enable-mixed-chunk", space.SWITCH), ("--max-running-requests", "8")], levers, "refine")
    assert both.name == "maxrun8-enable" and both.flags() == ("--max-running-requests", "8", "--enable-mixed-chunk")


def test_refine_combines_the_levers_that_beat_the_defaults_then_tries_midpoints_around_each_best():
    tried = space.coarse_trials(space.SPACE)
    scores = {"baseline": 1.0, "mrr64": 1.5, "mrr256": 0.9, "cps2048": 1.2, "splpm": 0.8, "sri4": 1.0}
    names = [t.name for t in space.refine_trials(space.SPACE, scores, tried)]
    assert names == ["mrr64-cps2048", "mrr88", "cps2896"]  # sqrt(64*128)=90.5 -> 88; sqrt(2048*4096)=2896
    assert all(t.stage == "refine" for t in space.refine_trials(space.SPACE, scores, tried))


def test_refine_has_nothing_to_try_when_no_lever_beat_the_defaults():
    tried = space.coarse_trials(space.SPACE)
    assert space.refine_trials(space.SPACE, {t.name: 1.0 for t in tried}, tried) == []


def test_midpoints_of_small_values_are_not_rounded_to_eight():
    lever = space.Lever("--max-running-requests", "maxrun", ("2", "8"), "")
    assert space.midpoints(lever, "2") == ["4"] and space.midpoints(lever, "8") == ["4"]


def test_the_space_can_come_from_the_environment_and_a_malformed_one_is_one_line():
    levers = space.space_from_env({space.SPACE_ENV: "--max-running-requests=2,8;--schedule-policy=lpm"})
    assert [(lv.flag, lv.values) for lv in levers] == [("--max-running-requests", ("2", "8")),
                                                        ("--schedule-policy", ("lpm",))]
    with pytest.raises(ValueError, match="is not FLAG=v1,v2"):
        space.space_from_env({space.SPACE_ENV: "max-running=2"})
    with pytest.raises(ValueError, match="--num-continuous-decode-steps is parsed by SGLang 0.5.17 but read"):
        space.space_from_env({space.SPACE_ENV: "--num-continuous-decode-steps=2,4"})
    assert space.space_from_env({}) == space.SPACE


def test_every_lever_is_a_flag_sglang_takes_and_reads(captures):
    options = set(re.findall(r"--[a-z0-9-]+", (captures / "launch_server_help.txt").read_text()))
    flags = {lv.flag for lv in space.SPACE if not space.is_setting(lv.flag)}
    assert flags <= options
    assert not any(unread_flag_problem([flag]) for flag in flags)
    settings = {lv.flag for lv in space.SPACE} - flags
    assert settings == {"SHARED_PREFIX_DECODE"} and settings <= set(CHECKS) and settings <= set(ARM_LIFECYCLE_SETTINGS)


def test_fit_takes_trials_in_order_while_they_fit_and_names_the_rest():
    model = CostModel()
    trials = space.coarse_trials(space.SPACE)[:4]
    one = plan.trial_s(trials[0], ROWS, 3, model)
    stage = plan.fit(trials, ROWS, 3, model, 2.5 * one)
    assert [t.name for t in stage.trials] == ["baseline", "mrr64"] and [t.name for t in stage.cut] == [
        "spd", "cps2048"]
    assert len(stage.points) == 2 * 3 and math.isclose(stage.estimate_s, 2 * one)
    assert {p.repeat for p in stage.points} == {1, 2, 3}


def _closed_loop(n: int, c: int, e2e_ms: float, ttft_ms: float, out_tokens: int) -> list[RequestRecord]:
    """n requests, c at a time, each send at the completion of the one before in its slot (1 s each here)."""
    return [RequestRecord(start_s=1000.0 + (i // c) * e2e_ms / 1000, ok=True, error="", prompt_tokens=10,
                          output_tokens=out_tokens, ttft_ms=ttft_ms, itl_ms=(), e2e_ms=e2e_ms) for i in range(n)]


def _point(arm: str = "baseline", repeat: int = 1) -> PointRecord:
    return PointRecord(f"{arm}.agent.concurrency.c2.r{repeat}", arm, "agent", "concurrency", 2, None, 12, repeat,
                       attempt=1, status="ok", error=None, started_at=0.0, ended_at=1.0, cache_flushed=True,
                       summary=None, requests_file=f"requests/{arm}.r{repeat}.jsonl")


def test_goodput_is_the_steady_requests_share_within_the_slo_times_the_windows_request_rate():
    rows = _closed_loop(12, 2, 1000.0, 100.0, 11)  # TPOT (1000 - 100) / 10 = 90 ms
    # window: 2nd completion (t=1 s) to the last send (t=5 s); completions in (1, 5] at 2,2,...,5,5 -> 8 in 4 s;
    # steady: the 7 requests sent at 1..4 s after the first 2c - 1 (the warm-up: those sent at 0 s and the refill
    # of the first completion), those at 5 s the drain
    met = rank.repeat_goodput(_point(), rows, stats.Slo(ttft_ms=500, itl_ms=100, pct=99))
    assert met.goodput_rps == pytest.approx(2.0) and (met.good, met.steady) == (7, 7)
    assert met.good_tok_s == pytest.approx(22.0)
    missed = rank.repeat_goodput(_point(), rows, stats.Slo(ttft_ms=500, itl_ms=50, pct=99))
    assert missed.goodput_rps == 0.0 and (missed.good, missed.steady) == (0, 7)
    # the start-up wave's slow first tokens finish inside the window but are the warm-up's, not the steady state's
    slow_start = [dataclasses.replace(r, ttft_ms=900.0) if r.start_s == 1000.0 else r for r in rows]
    assert rank.repeat_goodput(_point(), slow_start, stats.Slo(500, 100, 99)).goodput_rps == pytest.approx(2.0)
    # a slow steady request counts against it: 6 of 7 steady requests met the SLO, at 2 requests per second
    one_slow = [dataclasses.replace(r, ttft_ms=900.0) if i == 4 else r for i, r in enumerate(rows)]
    assert rank.repeat_goodput(_point(), one_slow, stats.Slo(500, 100, 99)).goodput_rps == pytest.approx(2.0 * 6 / 7)


def test_goodput_by_repeat_reads_the_stored_requests_of_ok_points(tmp_path):
    (tmp_path / "requests").mkdir()
    for rep in (1, 2):
        p = _point(repeat=rep)
        (tmp_path / p.requests_file).write_text(
            "".join(json.dumps(r.to_dict()) + "\n" for r in _closed_loop(12, 2, 1000.0, 100.0, 11)))
    failed = dataclasses.replace(_point("mrr64"), status="failed")  # its requests file does not even exist
    latest = {"a": _point(repeat=1), "b": _point(repeat=2), "c": failed}
    measured = rank.goodput_by_repeat(tmp_path, latest, stats.Slo(500, 100, 99))
    assert set(measured) == {("baseline", "c2")} and set(measured["baseline", "c2"]) == {1, 2}


def _reps(*values: float) -> dict[int, RepeatGoodput]:
    return {i + 1: RepeatGoodput(v, 100 * v, 10, 10, True) for i, v in enumerate(values)}


def test_the_winner_is_the_best_ranked_trial_whose_paired_ci_beats_the_defaults():
    measured = {("baseline", "c64"): _reps(1.0, 1.1, 0.9), ("steady", "c64"): _reps(1.5, 1.6, 1.4),
                ("noisy", "c64"): _reps(0.5, 3.5, 2.0)}
    ranking = rank.rank(measured)
    assert [r.trial for r in ranking.rows] == ["noisy", "steady", "baseline"]
    verdicts = {r.trial: r.verdict for r in ranking.rows}
    assert verdicts == {"noisy": "within noise", "steady": "better", "baseline": "reference"}
    assert ranking.winner == "steady" and "+50.0%" in ranking.reason
    steady = ranking.rows[1]
    assert steady.vs_defaults.lo == pytest.approx(0.5) and steady.usd_per_m is None


def test_the_defaults_stay_when_nothing_beats_them_and_no_winner_without_them():
    assert rank.rank({("baseline", "c64"): _reps(1, 1.2), ("x", "c64"): _reps(1.1, 1.0)}).winner == "baseline"
    assert rank.rank({("x", "c64"): _reps(1.1, 1.0)}).winner is None


def test_a_trials_best_load_is_ranked_and_priced_when_a_gpu_price_is_given():
    measured = {("baseline", "c16"): _reps(1, 1), ("baseline", "c64"): _reps(2, 2.2),
                ("x", "c16"): _reps(1, 1), ("x", "c64"): _reps(3, 3.1)}
    rows = {r.trial: r for r in rank.rank(measured, gpu_hourly_usd=3.6).rows}
    assert rows["x"].load == "c64" and rows["x"].vs_defaults.delta == pytest.approx(0.95)
    # 3.6 $/h over 305 good tok/s: 3.6 / (305 * 3600) * 1e6 = 3.28 $ per million
    assert rows["x"].usd_per_m.value == pytest.approx(3.6 / (305 * 3600) * 1e6)


def test_winner_lines_turn_setting_flags_into_settings_and_replace_the_same_extra_flag():
    arm = Arm("t", "t", "#000", ("--chunked-prefill-size", "4096", "--max-running-requests", "64"), "")
    lines = apply.winner_lines(arm, "--max-running-requests 32 --kv-cache-dtype fp8_e5m2")
    assert lines == ["CHUNKED_PREFILL_SIZE=4096",
                     "SERVER_EXTRA_ARGS=--kv-cache-dtype fp8_e5m2 --max-running-requests 64"]
    # a setting lever's trial (the tuner's spd) is written as that setting, beside the flags
    both = space.trial_of([("SHARED_PREFIX_DECODE", "on"), ("--max-running-requests", "64")], space.SPACE, "refine")
    assert both.name == "mrr64-spd" and both.flags() == ("--max-running-requests", "64", "SHARED_PREFIX_DECODE=on")
    assert apply.winner_lines(both.arm(1), "") == ["SHARED_PREFIX_DECODE=on",
                                                   "SERVER_EXTRA_ARGS=--max-running-requests 64"]


def test_apply_keeps_the_users_lines_drops_the_old_values_and_keeps_the_files_mode(tmp_path):
    path = tmp_path / "config.local.env"
    path.write_text("# mine\nPORT=31000\nSERVER_EXTRA_ARGS=--max-running-requests 32\n\n")
    os.chmod(path, 0o600)
    apply.apply(path, ["SERVER_EXTRA_ARGS=--max-running-requests 64"], "run_bench.py --tune, run R1: x")
    assert path.read_text() == ("# mine\nPORT=31000\n\n# run_bench.py --tune, run R1: x\n"
                                "SERVER_EXTRA_ARGS=--max-running-requests 64\n")
    assert path.stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "new.env"
    apply.apply(fresh, ["CHUNKED_PREFILL_SIZE=4096"], "c")
    assert fresh.read_text() == "# c\nCHUNKED_PREFILL_SIZE=4096\n"


def test_a_damaged_tune_record_is_one_line():
    with pytest.raises(BenchError, match="tune record is damaged .KeyError: 'rows'."):
        driver.TuneRun.from_dict({"repeats": 3})


def test_the_tune_state_survives_the_manifests_json():
    tune, stage = driver.new_tune(space.SPACE, ROWS, 3, CostModel(), 3600.0)
    back = driver.TuneRun.from_dict(json.loads(json.dumps(tune.to_dict())))
    assert back == tune and back.points() == stage.points and back.arms()[0].is_baseline
    assert [a.flags for a in back.arms()[1:2]] == [("--max-running-requests", "64")]


def test_the_refine_stage_tries_around_the_best_first_then_the_coarse_trials_the_budget_cut():
    model = CostModel()
    one = plan.trial_s(space.coarse_trials(space.SPACE)[0], ROWS, 3, model)
    tune, _ = driver.new_tune(space.SPACE, ROWS, 3, model, 3.5 * one / plan.COARSE_SHARE)  # 3 coarse trials fit
    assert [t.name for t in tune.trials] == ["baseline", "mrr64", "spd"] and tune.cut[0] == "cps2048"
    measured = {("baseline", "c64"): _reps(1.0, 1.1), ("mrr64", "c64"): _reps(1.5, 1.6),
                ("spd", "c64"): _reps(0.9, 1.0)}
    refined = driver.plan_refine(tune, rank.rank(measured), model, 2.5 * one)
    assert [t.name for t in refined.trials[3:]] == ["mrr88", "cps2048"] and refined.stage == "refine"
    assert refined.cut == ("dbt", "tok8", "splpm", "mix", "sri4", "ps16", "mrr256", "cps16384", "mrr128", "cps4096")


def test_the_tune_ends_saying_how_much_of_its_budget_it_took():
    # the H200's --tune --budget-min 15: 12m54s in one sitting
    assert driver.budget_line(774.0, 900.0) == "took 12m54s of its 15m00s budget (86%)"
    assert driver.budget_line(970.0, 900.0) == "took 16m10s, over its 15m00s budget by 1m10s (108%)"


def test_every_coarse_trial_parses_against_sglangs_captured_launch_options(monkeypatch, repo):
    monkeypatch.syspath_prepend(str(repo / "tests" / "standin"))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    from sglang._standin import args as launch_args  # the stand-in's parser, built from 0.5.17's captured --help

    parser = launch_args.build_parser()
    for trial in space.coarse_trials(space.SPACE):
        flags = tuple((flag, value) for flag, value in trial.settings if not space.is_setting(flag))  # settings: arms
        parsed = vars(parser.parse_args(["--model-path", "m", *dataclasses.replace(trial, settings=flags).flags()]))
        assert all(parsed[flag.lstrip("-").replace("-", "_")] not in (None, False) for flag, _ in flags)


def test_what_the_defaults_already_launch_with_or_would_refuse_is_not_a_trial():
    current = {"--tokenizer-worker-num": "1", "--chunked-prefill-size": "02048", "--enable-dynamic-batch-tokenizer":
               space.SWITCH, "--schedule-policy": "fcfs"}  # TOKENIZER_WORKER_NUM=auto, CHUNKED_PREFILL_SIZE=2048
    levers, same = space.settled(space.SPACE, current, {})
    by_flag = {lv.flag: lv.values for lv in levers}
    assert by_flag["--tokenizer-worker-num"] == ("8",) and by_flag["--chunked-prefill-size"] == ("4096", "16384")
    assert "--enable-dynamic-batch-tokenizer" not in by_flag and by_flag["--schedule-policy"] == ("lpm",)
    assert same == ["--chunked-prefill-size 2048 (the defaults already launch with it)",
                    "--enable-dynamic-batch-tokenizer on (the defaults already launch with it)"]
    eight, same = space.settled(space.SPACE, {"--tokenizer-worker-num": "8"}, {})  # TOKENIZER_WORKER_NUM=8
    assert "--tokenizer-worker-num" not in {lv.flag for lv in eight} and "--enable-dynamic-batch-tokenizer" in \
        {lv.flag for lv in eight} and same == ["--tokenizer-worker-num 8 (the defaults already launch with it)"]
    keyed, why = space.settled(space.SPACE, {}, {"--tokenizer-worker-num": "an API key holds SGLang to one"})
    assert "--tokenizer-worker-num" not in {lv.flag for lv in keyed}
    assert why == ["--tokenizer-worker-num (an API key holds SGLang to one)"]
    assert space.settled(space.SPACE, {}, {}) == (space.SPACE, [])
    # a setting lever is settled by the setting: SHARED_PREFIX_DECODE=on (the default) leaves spd out, off brings it in
    from llmhost import config
    from llmhost.tune import cli

    levers, same = space.settled(space.SPACE, *cli.settled_by(config.load({})))
    assert "SHARED_PREFIX_DECODE" not in {lv.flag for lv in levers}
    assert "SHARED_PREFIX_DECODE on (the defaults already launch with it)" in same
    off = dataclasses.replace(config.load({}), shared_prefix_decode="off")
    assert "SHARED_PREFIX_DECODE" in {lv.flag for lv in space.settled(space.SPACE, *cli.settled_by(off))[0]}
