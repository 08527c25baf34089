"""The cost model (learned from synthetic runs, or uncalibrated), the --budget-min planner, adaptive repeats, and
the ETA's stability over a simulated run."""
import dataclasses
import json
import os
import random
import statistics
import sys
import time
from types import SimpleNamespace

import pytest

from llmhost import repeats
from llmhost.bench import arms as arms_mod, budget, costs, points, runner, spread, store
from llmhost.bench.eta import SWING, Eta
from llmhost.config import REPO_ROOT
from llmhost.bench.records import Manifest, PointRecord, PointSummary, RequestRecord, ServerRecord, append_records
from llmhost.provenance import Gpu, Provenance

ALL_ARMS = list(arms_mod.REGISTRY.values())
WORKLOADS = ["agent", "chat", "long", "agent-tools"]


def summary(throughput: float = 1000.0) -> PointSummary:
    return PointSummary(duration_s=10.0, completed=64, failed=0, request_throughput=6.4, input_throughput=1.0,
                        output_throughput=throughput, total_throughput=throughput, offered_rate=None,
                        achieved_rate=6.4, client_bound=False)


def done(point: points.Point, wall_s: float, throughput: float = 1000.0, status: str = "ok") -> PointRecord:
    return PointRecord.of(point, attempt=1, status=status, error=None, started_at=1000.0, ended_at=1000.0 + wall_s,
                          cache_flushed=True, summary=summary(throughput), requests_file="requests/x.jsonl")


def write_run(bench_dir, run_id: str, rows: list[PointRecord], ready_s: dict[str, float]):
    run = bench_dir / run_id
    (run / "servers").mkdir(parents=True)
    append_records(run / "points.jsonl", rows)
    for arm, seconds in ready_s.items():
        rec = ServerRecord(arm=arm, launch_command=None, server_info={}, ready_s=seconds, started_at=f"t-{arm}")
        (run / "servers" / f"{arm}.json").write_text(json.dumps(rec.to_dict()))
    return run


# --- the cost model ----------------------------------------------------------------------------------------------

def test_without_a_run_the_model_is_the_h200_defaults_and_says_uncalibrated(tmp_path):
    model = costs.fit(tmp_path / "bench")
    p = points.make_point("baseline", "chat", "concurrency", 16, None, 64, 1)
    assert not model.is_calibrated and model.label.startswith("uncalibrated")
    assert model.point_s(p) == points.estimate_s(p) and model.boot_s(quick=True) == pytest.approx(costs.RESTART_EST_S)


def test_a_finished_run_prices_its_kinds_per_request_and_others_by_its_bias(tmp_path):
    seen = points.make_point("baseline", "chat", "concurrency", 16, None, 64, 1)
    other = points.make_point("baseline", "agent", "concurrency", 8, None, 32, 1)
    rows = [done(seen, points.LOADGEN_OVERHEAD_S + 64 * 0.5), done(other, 3 * points.estimate_s(other)),
            done(points.make_point("baseline", "chat", "qps", None, 4.0, 64, 1), 60.0, status="failed")]
    write_run(tmp_path / "bench", "20260101-120000", rows, {"baseline": 110.0, "fp8-kv": 150.0})
    model = costs.fit(tmp_path / "bench")
    assert model.is_calibrated and model.label.startswith("calibrated") and model.points_seen == 2
    # the same kind with twice the requests costs twice the load: the per-point overhead + 128 x 0.5 s
    assert model.point_s(points.make_point("x", "chat", "concurrency", 16, None, 128, 2)) == \
        pytest.approx(points.LOADGEN_OVERHEAD_S + 64)
    unseen = points.make_point("baseline", "long", "concurrency", 1, None, 16, 1)
    assert model.point_s(unseen) == pytest.approx(points.estimate_s(unseen) * model.ratio) and model.ratio > 1
    assert model.ready_s == pytest.approx(130.0)  # median of the two boots


def test_the_newest_runs_win_and_a_shared_boot_counts_once(tmp_path):
    p = points.make_point("baseline", "chat", "concurrency", 16, None, 64, 1)
    write_run(tmp_path / "bench", "20250101-000000", [done(p, 200.0)], {"baseline": 500.0})
    for i in range(costs.MAX_RUNS):
        run = write_run(tmp_path / "bench", f"2026010{i + 1}-000000", [done(p, 34.5)], {"baseline": 100.0})
        (run / "servers" / "shared.json").write_text((run / "servers" / "baseline.json").read_text())
    model = costs.fit(tmp_path / "bench")
    assert model.runs[0] == "20260103-000000" and "20250101-000000" not in model.runs
    assert model.point_s(p) == pytest.approx(34.5) and model.ready_s == 100.0 and model.boots_seen == costs.MAX_RUNS


PROVENANCE = Provenance(created_at="2026-01-01T12:00:00Z", command=("run_bench.py",), git_commit=None, versions={},
                        gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)


def write_arms(run, arms: list[arms_mod.Arm]) -> None:
    store.RunStore(run).write_manifest(Manifest("r", PROVENANCE, {}, 1, None, tuple(arms), (), ()))


def test_an_arms_points_are_priced_by_its_launch_flags_and_an_unmeasured_arm_as_the_baseline(tmp_path):
    base, nopc, fp8 = (arms_mod.REGISTRY[n] for n in ("baseline", "no-prefix-cache", "fp8-kv"))
    head = points.make_point("baseline", "agent", "concurrency", 64, None, 256, 1)
    rows = [done(head, points.LOADGEN_OVERHEAD_S + 256 * 0.05),
            done(dataclasses.replace(head, arm="no-prefix-cache"), points.LOADGEN_OVERHEAD_S + 256 * 0.125)]
    write_arms(write_run(tmp_path / "bench", "20260101-120000", rows, {}), [base, nopc])
    model = costs.fit(tmp_path / "bench").with_arms([base, nopc, fp8])
    fixed = points.LOADGEN_OVERHEAD_S + points.priming_s(head)  # measured unprimed, planned primed
    priced = {arm: model.point_s(dataclasses.replace(head, arm=arm))
              for arm in ("baseline", "no-prefix-cache", "fp8-kv")}
    assert priced == pytest.approx({"baseline": fixed + 12.8, "no-prefix-cache": fixed + 32.0,
                                    "fp8-kv": fixed + 12.8})  # never measured: as the baseline
    assert model.label.endswith("never measured here, priced as the baseline: fp8-kv)")
    # the flags decide, not the name: a user arm called no-prefix-cache with other flags is not the measured one
    renamed = arms_mod.Arm("no-prefix-cache", "x", "#000000", ("--page-size", "16"), "user arm")
    assert costs.fit(tmp_path / "bench").with_arms([renamed]).point_s(dataclasses.replace(head, arm=renamed.name)) \
        == pytest.approx(fixed + 12.8)
    # an arm the model was not told of is priced as the baseline; with no baseline measured, as any arm's median
    assert costs.fit(tmp_path / "bench").point_s(head) == pytest.approx(fixed + 12.8)
    (tmp_path / "bench" / "20260101-120000" / "manifest.json").unlink()
    assert costs.fit(tmp_path / "bench").with_arms([base]).point_s(head) == pytest.approx(fixed + 256 * 0.0875)


def test_a_priming_pass_is_priced_apart_so_a_primed_points_requests_are_not_charged_for_it(tmp_path):
    primed = points.make_point("baseline", "agent", "concurrency", 8, None, 48, 1)
    per_s = 0.2
    wall_s = points.LOADGEN_OVERHEAD_S + points.priming_s(primed) + 48 * per_s
    row = dataclasses.replace(done(primed, wall_s), cache_flushed=False)  # measured on the prompts it primed
    write_run(tmp_path / "bench", "20260101-120000", [row], {})
    model = costs.fit(tmp_path / "bench")
    assert model.ratio == pytest.approx(wall_s / points.estimate_s(primed, primed=True))  # the bias of what ran
    twice = points.make_point("baseline", "agent", "concurrency", 8, None, 96, 1)  # twice the requests, one pass
    assert model.point_s(twice) == pytest.approx(points.LOADGEN_OVERHEAD_S + points.priming_s(twice) + 96 * per_s)
    # the same wall time on a flushed cache had no priming pass: all of it was the requests', and scales with them
    (tmp_path / "bench" / "20260101-120000" / "points.jsonl").unlink()
    append_records(tmp_path / "bench" / "20260101-120000" / "points.jsonl", [done(primed, wall_s)])
    flushed = costs.fit(tmp_path / "bench")
    assert flushed.ratio == pytest.approx(wall_s / points.estimate_s(primed, primed=False))
    assert flushed.point_s(twice) - model.point_s(twice) == pytest.approx(points.priming_s(primed) * 96 / 48)


def test_a_boot_is_the_median_whole_boot_the_newest_run_paid(tmp_path):
    p = points.make_point("baseline", "chat", "concurrency", 16, None, 64, 1)
    write_run(tmp_path / "bench", "20260101-000000", [done(p, 30.0)], {"baseline": 70.0})  # no sittings: ready_s
    older = costs.fit(tmp_path / "bench")
    assert older.boot_paid_s is None and older.boot_s(quick=False) == 70.0 + costs.WARM_ARM_EST_S
    run = write_run(tmp_path / "bench", "20260102-000000", [done(p, 30.0)], {"baseline": 99.0})
    boots = [(183.0, "plan", ""), (107.0, "resume", ""), (119.0, "plan", ""), (104.0, "resume", ""),
             (131.0, "plan", ""), (40.0, "fault", ""), (900.0, "plan", "the server never came up")]
    (run / "sittings.jsonl").write_text("".join(
        json.dumps({"sitting": 1, "arm": "baseline", "started_at": 1000.0 + i, "boot_s": s, "cause": c, "error": e,
                    "event": "boot"}) + "\n" for i, (s, c, e) in enumerate(boots)))
    model = costs.fit(tmp_path / "bench")
    # a fault's restart-only boot and a failed boot say nothing about a planned boot; the older run's are not used
    assert model.boot_s(quick=False) == model.boot_s(quick=True) == 119.0 and model.boots_seen == 5
    assert "5 boots: boot 119 s" in model.label
    # a newer run of one boot is one draw: the older run's boots join it (median of 107 and the five above)
    newer = write_run(tmp_path / "bench", "20260103-000000", [done(p, 30.0)], {"baseline": 99.0})
    (newer / "sittings.jsonl").write_text(json.dumps({"sitting": 1, "arm": "baseline", "started_at": 5.0,
                                                      "boot_s": 107.0, "cause": "plan", "error": "",
                                                      "event": "boot"}) + "\n")
    mixed = costs.fit(tmp_path / "bench")
    assert mixed.boots_seen == 6 and mixed.boot_s(quick=False) == statistics.median([107.0, 183, 107, 119, 104, 131])
    # a newest run of three boots is enough alone
    (newer / "sittings.jsonl").write_text("".join(json.dumps(
        {"sitting": 1, "arm": "baseline", "started_at": 5.0 + i, "boot_s": s, "cause": "plan", "error": "",
         "event": "boot"}) + "\n" for i, s in enumerate((150.0, 140.0, 160.0))))
    alone = costs.fit(tmp_path / "bench")
    assert alone.boots_seen == 3 and alone.boot_s(quick=False) == 150.0


def steady_runs(arm: str, workload: str, values: list[float], start: int = 1) -> list[PointRecord]:
    rows = headline_runs(arm, workload, values, start)
    return [dataclasses.replace(r, summary=dataclasses.replace(r.summary, steady_window_s=12.0,
                                                               steady_output_throughput=v))
            for r, v in zip(rows, values)]


def test_the_model_learns_each_arms_spread_from_the_newest_run_that_repeated_it(tmp_path):
    base, nopc, fp8 = (arms_mod.REGISTRY[n] for n in ("baseline", "no-prefix-cache", "fp8-kv"))
    older = steady_runs("baseline", "agent", [1000.0, 1500.0, 500.0]) + steady_runs("fp8-kv", "agent",
                                                                                       [900.0, 1000.0, 1100.0])
    write_arms(write_run(tmp_path / "bench", "20260101-110000", older, {}), [base, fp8])
    newer = steady_runs("baseline", "agent", [5765.0, 5572.0, 5706.0, 5206.0, 5465.0, 5380.0]) + \
        steady_runs("no-prefix-cache", "agent", [1986.0, 1986.0]) + steady_runs("baseline", "chat", [6207.0])
    write_arms(write_run(tmp_path / "bench", "20260101-120000", newer, {}), [base, nopc])
    model = costs.fit(tmp_path / "bench").with_arms([base, nopc, fp8, arms_mod.REGISTRY["page-16"]])
    head = {arm: points.make_point(arm, "agent", "concurrency", 64, None, 256, 1)
            for arm in ("baseline", "no-prefix-cache", "fp8-kv", "page-16")}
    assert model.spread(head["baseline"]) == pytest.approx(3.79, abs=0.01)  # the newest run's, not the older's
    assert model.spread(head["fp8-kv"]) == pytest.approx(10.0)  # only the older run repeated it
    assert model.spread(head["no-prefix-cache"]) is None  # two repeats say nothing
    assert model.spread(head["page-16"]) is None  # never measured: not borrowed from the baseline
    assert model.spread(points.make_point("baseline", "chat", "concurrency", 64, None, 256, 1)) is None
    assert [budget.planned_repeats(model, head[a]) for a in head] == [9, 3, 10, 3]


def test_the_budget_keeps_for_adaptive_repeats_what_the_headline_spread_calls_for():
    arms = [arms_mod.REGISTRY[n] for n in ("baseline", "no-prefix-cache", "fp8-kv")]
    flat = costs.CostModel().with_arms(arms)
    noisy = dataclasses.replace(flat, spread_pct={((), ("agent", "concurrency", 64, None)): 3.79,
                                                  (("--kv-cache-dtype", "fp8_e5m2"),
                                                   ("agent", "concurrency", 64, None)): 2.2})
    one = {a.name: flat.point_s(points.make_point(a.name, "agent", "concurrency", 64, None, 384, 1))
           for a in arms}
    assert budget.expected_extra_s([points.make_point(a.name, "agent", "concurrency", 64, None, 384, r)
                                    for a in arms for r in (1, 2, 3)], noisy) == \
        pytest.approx(6 * one["baseline"] + 2 * one["fp8-kv"])
    budget_s = 20 * 60  # 15% of it, 180 s, holds fewer than the 8 repeats
    lean, kept = (budget.plan(arms, WORKLOADS, points.Loads(), m, budget_s) for m in (flat, noisy))
    assert lean.reserve_s >= budget.RESERVE_SHARE * budget_s and lean.left_out
    assert kept.reserve_s >= 6 * one["baseline"] + 2 * one["fp8-kv"] > lean.reserve_s
    assert len(kept.points) < len(lean.points)  # the sweep gave way, never a headline repeat
    heads = lambda plan: [p for p in plan.points if budget.is_headline(p.workload, p.pattern, p.concurrency)]  # noqa
    assert heads(kept) == heads(lean)


def test_a_boot_leaves_the_later_boots_what_their_spread_calls_for_and_keeps_at_least_an_even_share():
    fp8 = arms_mod.REGISTRY["fp8-kv"]
    model = dataclasses.replace(costs.CostModel().with_arms([ALL_ARMS[0], fp8]), spread_pct={
        (tuple(fp8.flags), ("agent", "concurrency", 64, None)): 2.2})
    later = [points.make_point("fp8-kv", w, "concurrency", 64, None, 384, r) for w in ("agent", "chat")
             for r in (1, 2, 3)]
    two_s = 2 * model.point_s(later[0])  # fp8-kv agent c=64 needs 5 repeats: 2 more
    assert budget.boot_share_s(300.0, later, 1, model) == pytest.approx(300.0 - two_s)
    assert budget.boot_share_s(300.0, later[3:], 1, model) == pytest.approx(300.0)  # chat needs none
    assert budget.boot_share_s(60.0, later, 1, model) == pytest.approx(30.0)  # never below an even share


# --- the planner -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("minutes", [20, 45, 90])
def test_the_plan_fits_the_budget_with_three_repeats_on_each_planned_arms_headline(minutes):
    model = costs.CostModel()
    planned = budget.plan(ALL_ARMS, WORKLOADS, points.Loads(), model, minutes * 60)
    boots = len(arms_mod.boots([a for a in ALL_ARMS if any(p.arm == a.name for p in planned.points)]))
    assert planned.estimate_s == pytest.approx(model.plan_s(planned.points, boots, False))
    assert planned.estimate_s <= minutes * 60 and len({p.point_id for p in planned.points}) == len(planned.points)
    planned_arms = {p.arm for p in planned.points}
    assert planned_arms == {a.name for a in ALL_ARMS} if minutes >= 45 else "baseline" in planned_arms
    for arm in [a for a in ALL_ARMS if a.name in planned_arms]:
        # the headline points the arm's setting can change: no chat c=64 without a prefix cache (chat has none)
        heads = [r for r in budget.arm_rows(arm, WORKLOADS, points.Loads()) if budget.is_headline(*r[:3])]
        assert len(heads) == (1 if arm.name == "no-prefix-cache" else 2)
        for workload, pattern, concurrency, _, _ in heads:
            reps = {p.repeat for p in planned.points
                    if (p.arm, p.workload, p.pattern, p.concurrency) == (arm.name, workload, pattern, concurrency)}
            assert reps == {1, 2, 3}
    other = [p for p in planned.points if not budget.is_headline(p.workload, p.pattern, p.concurrency)]
    assert all(p.repeat == 1 for p in other)


def test_a_20_minute_budget_holds_the_baseline_and_two_arms_with_three_headline_repeats():
    chosen = ALL_ARMS[:3]
    planned = budget.plan(chosen, WORKLOADS, points.Loads(), costs.CostModel(), 20 * 60)
    assert {p.arm for p in planned.points} == {a.name for a in chosen} and planned.estimate_s <= 20 * 60
    # agent and chat c=64 x 3 repeats on baseline and fp8-kv, agent c=64 x 3 without a prefix cache
    assert len([p for p in planned.points if budget.is_headline(p.workload, p.pattern, p.concurrency)]) == 5 * 3


def test_a_generous_budget_runs_each_arm_only_where_its_setting_matters():
    planned = budget.plan(ALL_ARMS, WORKLOADS, points.Loads(), costs.CostModel(), 10 * 3600)
    assert not planned.left_out and planned.reserve_s > 0
    by_arm = {a.name: {(p.workload, p.pattern) for p in planned.points if p.arm == a.name} for a in ALL_ARMS}
    assert {("chat", "long"), ("chat", "burst"), ("long", "concurrency")} <= by_arm["baseline"]
    assert {p.num_prompts for p in planned.points if p.pattern in ("long", "burst")} == {10_000, 2_000}
    assert all(p.arm == "baseline" for p in planned.points if p.pattern in ("long", "burst"))
    # no long-context or chat points without a prefix cache: those prompts share no prefix to cache
    assert by_arm["no-prefix-cache"] == budget.ARM_SCOPE["no-prefix-cache"]
    assert ("long", "concurrency") in by_arm["fp8-kv"]  # an arm not in ARM_SCOPE can change every sweep point


def test_a_tight_budget_leaves_out_the_last_arms_sweep_first():
    planned = budget.plan(ALL_ARMS, WORKLOADS, points.Loads(), costs.CostModel(), 45 * 60)
    assert planned.left_out and all(not budget.is_headline(p.workload, p.pattern, p.concurrency)
                                    for p in planned.left_out)
    assert any(p.arm == "triton" for p in planned.left_out)
    assert not any(p.arm == "baseline" and p.pattern == "concurrency" for p in planned.left_out)


def test_a_headline_point_may_use_the_whole_budget_and_every_unit_that_does_not_fit_is_left_out():
    model = costs.CostModel()
    head = points.make_point("baseline", "agent", "concurrency", 64, None, 384, 1)
    assert budget.kept_s(head, [], model, 1200.0) == 0.0
    sweep = points.make_point("baseline", "agent", "concurrency", 8, None, 48, 1)
    assert budget.kept_s(sweep, [], model, 1200.0) == budget.RESERVE_SHARE * 1200.0
    heads = budget.plan(ALL_ARMS[:1], WORKLOADS, points.Loads(), model, 3600).points
    need = costs.RUN_FIXED_S + model.boot_s(False) + sum(
        model.point_s(p) for p in heads if budget.is_headline(p.workload, p.pattern, p.concurrency))
    exact = budget.plan(ALL_ARMS[:1], WORKLOADS, points.Loads(), model, need)  # no reserve kept from these
    assert all(budget.is_headline(p.workload, p.pattern, p.concurrency) for p in exact.points)
    assert len(exact.points) == 3 * len({spread.series(p) for p in exact.points})
    assert len(exact.left_out) == len(heads) - len(exact.points) > 1  # every unit left out is named


def test_the_users_loads_drive_the_budget_plan_too():
    planned = budget.plan(ALL_ARMS[:1], ["chat"], points.Loads(concurrency=(4, 64)), costs.CostModel(), 3600)
    assert {p.concurrency for p in planned.points if p.pattern == "concurrency"} == {4, 64}


# --- adaptive repeats --------------------------------------------------------------------------------------------

def headline_runs(arm: str, workload: str, values: list[float], start: int = 1) -> list[PointRecord]:
    return [done(points.make_point(arm, workload, "concurrency", 64, None, 256, r), 40.0, v)
            for r, v in enumerate(values, start)]


def test_extra_repeats_go_to_headline_points_whose_ci_is_still_wide():
    tight = headline_runs("baseline", "agent", [1000.0, 1001.0, 999.0])  # half-width ~0.25%
    wide = headline_runs("baseline", "chat", [900.0, 1100.0, 1000.0])  # half-width ~25%
    wider = headline_runs("fp8-kv", "chat", [500.0, 1500.0, 1000.0])
    extra = budget.extra_repeats(tight + wide + wider, {"baseline", "fp8-kv"}, costs.CostModel(), 3600)
    assert [p.point_id for p in extra] == ["fp8-kv.chat.concurrency.c64.r4", "baseline.chat.concurrency.c64.r4"]
    assert budget.extra_repeats(tight + wide, {"fp8-kv"}, costs.CostModel(), 3600) == []  # not this boot's arm


def test_the_h200_chat_c64_repeats_have_a_5_5_pct_ci_and_their_steady_windows_one_of_2_1_pct():
    """gpu4 run on the H200 (SGLang 0.5.17): chat c=64, 640 prompts, three repeats. Whole points: 6287, 6044,
    6279 tok/s -> 6203 [5861, 6546], half-width 5.5% (t(0.975, 2) = 4.30): an adaptive repeat. Their steady
    windows, which the headline card quotes: 6304, 6289, 6389 -> 2.1%: none."""
    ci = repeats.across_repeats([6287.06, 6044.0, 6279.0])
    assert (round(ci.value), round(ci.lo), round(ci.hi)) == (6203, 5860, 6546)
    assert repeats.half_width_pct(ci) == pytest.approx(5.53, abs=0.01)
    whole = headline_runs("baseline", "chat", [6287.06, 6044.0, 6279.0])
    assert [p.point_id for p in budget.extra_repeats(whole, {"baseline"}, costs.CostModel(), 3600)] == \
        ["baseline.chat.concurrency.c64.r4"]
    windowed = [dataclasses.replace(r, summary=dataclasses.replace(r.summary, steady_window_s=20.8,
                                                                   steady_output_throughput=v))
                for r, v in zip(whole, [6304.0, 6289.0, 6389.0])]
    assert budget.extra_repeats(windowed, {"baseline"}, costs.CostModel(), 3600) == []
    # a repeat that was not steady leaves two, fewer than a quotable CI needs: one more repeat (numbered after
    # every recorded one)
    unsteady = windowed[:2] + [dataclasses.replace(windowed[2], summary=dataclasses.replace(
        windowed[2].summary, steady_output_throughput=None))]
    assert [p.point_id for p in budget.extra_repeats(unsteady, {"baseline"}, costs.CostModel(), 3600)] == \
        ["baseline.chat.concurrency.c64.r4"]


def test_the_runner_records_a_closed_loop_points_steady_window_in_its_summary():
    point = points.make_point("baseline", "chat", "concurrency", 4, None, 40, 1)
    # 10 waves of 4 requests, 1 s each, 100 tokens: the window runs from the 4th completion (1001) to the last send
    # (1009) and counts the requests that end in (1001, 1009]: 8 waves x 400 tokens / 8 s, the rate of work done
    rows = [RequestRecord(start_s=1000.0 + i // 4, ok=True, error="", prompt_tokens=10, output_tokens=100,
                          ttft_ms=50.0, itl_ms=(9.5,) * 99, e2e_ms=1000.0, end_s=1001.0 + i // 4)
            for i in range(40)]
    out = runner.with_window(point, summary(), rows)
    assert out.steady_window_s == pytest.approx(8.0) and out.steady_output_throughput == pytest.approx(400.0)
    burst = points.make_point("baseline", "chat", "burst", None, None, 40, 1)
    assert runner.with_window(burst, summary(), rows) == summary()  # no window: nothing recorded


def test_extra_repeats_wait_for_the_minimum_and_stop_when_the_budget_does():
    model = costs.CostModel()
    two = headline_runs("baseline", "chat", [900.0, 1100.0])
    assert budget.extra_repeats(two, {"baseline"}, model, 3600) == []
    wide = headline_runs("baseline", "chat", [900.0, 1100.0, 1000.0])
    one_s = model.point_s(points.make_point("baseline", "chat", "concurrency", 64, None, 256, 4))
    assert budget.extra_repeats(wide, {"baseline"}, model, one_s * 0.9) == []
    capped = headline_runs("baseline", "chat", [900.0, 1100.0] * (budget.MAX_REPEATS // 2))
    assert budget.extra_repeats(capped, {"baseline"}, model, 3600) == []
    # each repeat taken is paid out of the spare time: 2.5 repeats' worth buys the two widest of three
    wider = headline_runs("fp8-kv", "chat", [500.0, 1500.0, 1000.0])
    widest = headline_runs("page-16", "chat", [200.0, 1800.0, 1000.0])
    got = budget.extra_repeats(wide + wider + widest, {"baseline", "fp8-kv", "page-16"}, model, one_s * 2.5)
    assert [p.point_id for p in got] == ["page-16.chat.concurrency.c64.r4", "fp8-kv.chat.concurrency.c64.r4"]
    # a repeated point that is not a headline one is not repeated again, however wide
    sweep = [done(points.make_point("baseline", "chat", "concurrency", 8, None, 64, r), 40.0, v)
             for r, v in enumerate([500.0, 1500.0, 1000.0], 1)]
    assert budget.extra_repeats(sweep, {"baseline"}, model, 3600) == []


def test_a_boot_builds_ahead_the_datasets_of_the_adaptive_repeats_its_spare_time_could_pay_for():
    """b20v2 on the H200: the agent c=64 repeats added after the planned ones built their 400 prompts inside the
    point and took 35 s instead of 24 s; the boot now builds them with the planned points' datasets."""
    model = costs.CostModel()
    todo = [points.make_point("baseline", w, "concurrency", c, None, n, r)
            for w, c, n in (("agent", 64, 384), ("chat", 64, 384)) for r in (3, 1, 2)]
    todo.append(points.make_point("baseline", "agent", "concurrency", 8, None, 48, 1))  # not a headline point
    one = {w: model.point_s(points.make_point("baseline", w, "concurrency", 64, None, 384, 4))
           for w in ("agent", "chat")}
    ahead = budget.likely_extra(todo, model, 2 * one["agent"] + one["chat"] + 1.0)
    # one more repeat per headline point a round, after the highest one planned, while the spare time lasts
    assert [p.point_id for p in ahead] == ["baseline.agent.concurrency.c64.r4", "baseline.chat.concurrency.c64.r4",
                                           "baseline.agent.concurrency.c64.r5"]
    assert budget.likely_extra(todo, model, 0.5 * min(one.values())) == []
    capped = budget.likely_extra(todo, model, 1e9)  # never past MAX_REPEATS
    assert max(p.repeat for p in capped) == budget.MAX_REPEATS
    assert len(capped) == 2 * (budget.MAX_REPEATS - 3)
    # what the spread calls for comes first: agent c=64 (3.8%: 9 repeats) before a chat c=64 that needs none
    noisy = dataclasses.replace(model.with_arms([ALL_ARMS[0]]),
                                spread_pct={((), ("agent", "concurrency", 64, None)): 3.79})
    first = budget.likely_extra(todo, noisy, 3 * one["agent"] + 1.0)
    assert [p.point_id for p in first] == [f"baseline.agent.concurrency.c64.r{r}" for r in (4, 5, 6)]


def test_the_runner_builds_ahead_what_the_budget_left_after_the_plan_could_pay_for():
    model = costs.CostModel()
    todo = [points.make_point("baseline", "agent", "concurrency", 64, None, 384, r) for r in (1, 2, 3)]
    one_s = model.point_s(points.make_point("baseline", "agent", "concurrency", 64, None, 384, 4))
    clock = SimpleNamespace(model=model, seconds_left=lambda: 600.0)
    bench = SimpleNamespace(budget_end=time.monotonic() + 600.0 + 2.5 * one_s, clock=clock)
    assert [p.repeat for p in runner.adaptive_ahead(bench, todo)] == [4, 5]
    assert runner.adaptive_ahead(SimpleNamespace(budget_end=None, clock=clock), todo) == []  # no budget


def test_a_budget_runs_end_says_how_wide_each_headline_ci_came_out():
    """b20v2 on the H200: steady windows of 6 agent and 3 chat c=64 repeats on the baseline."""
    done = steady_runs("baseline", "agent", [5765.0, 5572.0, 5706.0, 5206.0, 5465.0, 5380.0]) + \
        steady_runs("baseline", "chat", [6207.0, 6222.0, 6200.0]) + steady_runs("fp8-kv", "chat", [5996.0])
    assert budget.headline_line(done) == (
        "headline throughput, 95% CI over repeats: baseline agent c=64 5,516 tok/s ±4.0% (6 repeats), baseline chat "
        "c=64 6,210 tok/s ±0.4% (3 repeats); wider than the ±3% target: baseline agent c=64")
    assert budget.headline_line(done[6:]).endswith("; all within the ±3% target")
    assert budget.headline_line(done[-1:]) is None  # one repeat: no CI to speak of
    two = steady_runs("fp8-kv", "agent", [4400.0, 4600.0])  # two repeats: a CI, however wide
    assert budget.headline_line(done + two).endswith(
        "fp8-kv agent c=64 4,500 tok/s ±28.2% (2 repeats); wider than the ±3% target: baseline agent c=64, "
        "fp8-kv agent c=64")
    sweep = [dataclasses.replace(r, point_id=r.point_id.replace("c64", "c8"), concurrency=8) for r in done[:6]]
    assert budget.headline_line(sweep) is None  # only headline points are quoted


# --- the ETA -----------------------------------------------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(plan: list[points.Point], slowdown: dict[str, float], seed: int) -> list[tuple[bool, float, float]]:
    """Run the plan on a fake clock, each point taking its estimate x its arm's slowdown x noise; per point
    (first of its arm?, ETA just before it finished counted down, ETA just after)."""
    clock, model, rng = FakeClock(), costs.CostModel(), random.Random(seed)
    eta = Eta(model, plan, boots=len({p.arm for p in plan}), quick=False, clock=clock)
    seen, trace = set(), []
    for arm in dict.fromkeys(p.arm for p in plan):
        clock.now += model.boot_s(False) * slowdown[arm]
        eta.boot_done(model.boot_s(False) * slowdown[arm])
        for p in [p for p in plan if p.arm == arm]:
            wall_s = model.point_s(p) * slowdown[arm] * rng.uniform(0.5, 2.0)
            clock.now += wall_s
            before = eta.seconds_left()
            eta.point_done(p, wall_s)
            trace.append((p.arm not in seen, before, eta.seconds_left()))
            seen.add(p.arm)
    return trace


@pytest.mark.parametrize("seed", range(5))
def test_the_eta_never_swings_more_than_25_percent_after_an_arms_first_point(seed):
    plan = points.build_plan(ALL_ARMS[:3], ["agent", "chat"], quick=False, repeat=1)
    trace = simulate(plan, {"baseline": 2.0, "no-prefix-cache": 1.2, "fp8-kv": 3.0}, seed)
    for is_first, before, after in trace[:-1]:  # the last point leaves exactly nothing
        if not is_first and before > 0:
            assert (1 - SWING) * before - 1e-6 <= after <= (1 + SWING) * before + 1e-6
    assert trace[-1][2] == 0.0
    assert sum(is_first for is_first, _, _ in trace) == 3 and sum(b > 0 for _, b, _ in trace) > len(trace) / 2


def test_the_eta_learns_a_slow_host_at_an_arms_first_point():
    plan = points.build_plan(ALL_ARMS[:1], ["chat"], quick=False, repeat=1)
    clock, model = FakeClock(), costs.CostModel()
    eta = Eta(model, plan, boots=1, quick=False, clock=clock)
    eta.boot_done(model.boot_s(False))
    left_s = sum(model.point_s(p) for p in plan[1:])
    clock.now += 3 * model.point_s(plan[0])
    eta.point_done(plan[0], 3 * model.point_s(plan[0]))
    assert eta.seconds_left() == pytest.approx(2 * left_s)  # ratio 3, damped by the prior 1: (1 + 3) / 2


def test_a_boot_spends_its_share_of_the_spare_budget_on_repeats_until_the_ci_is_narrow(tmp_path, monkeypatch):

    run = store.RunStore.create(tmp_path)
    planned = headline_runs("baseline", "chat", [970.0, 1030.0, 1000.0])
    provenance = Provenance(created_at="2026-12-01T10:00:00Z", command=("run_bench.py",), git_commit=None,
                            versions={}, gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)
    plan = tuple(points.make_point("baseline", "chat", "concurrency", 64, None, 256, r) for r in (1, 2, 3))
    run.write_manifest(Manifest("r", provenance, {}, 1, None, (), (), plan))
    for rec in planned:
        run.append_point(rec)
    ran: list[str] = []

    def run_point(b, arm, p, last):  # each new repeat lands on the mean: the CI narrows as repeats add up
        ran.append(p.point_id)
        b.store.append_point(done(p, 40.0, 1000.0))

    monkeypatch.setattr(runner, "run_point", run_point)
    model = costs.CostModel()
    b = SimpleNamespace(store=run, clock=Eta(model, [], boots=0, quick=False), total=3, progress=lambda text: None,
                        budget_end=time.monotonic() + 3600)
    runner.run_extra_repeats(b, {"baseline": ALL_ARMS[0]})
    values = [970.0, 1030.0, 1000.0] + [1000.0] * len(ran)
    assert ran[0] == "baseline.chat.concurrency.c64.r4" and 3 + len(ran) < budget.MAX_REPEATS
    assert b.total == 3 + len(ran)
    manifest = run.read_manifest()  # each joined the plan before it ran: a --resume would run it
    assert manifest.adaptive_repeats == tuple(ran) and [p.point_id for p in manifest.plan[3:]] == ran
    assert repeats.half_width_pct(repeats.across_repeats(values)) <= budget.CI_TARGET_PCT
    assert repeats.half_width_pct(repeats.across_repeats(values[:-1])) > budget.CI_TARGET_PCT
    b.budget_end, ran[:] = time.monotonic(), []  # no budget left: no repeats, however wide
    run.append_point(done(points.make_point("baseline", "agent", "concurrency", 64, None, 256, 1), 40.0, 1.0))
    runner.run_extra_repeats(b, {"baseline": ALL_ARMS[0]})
    assert ran == []


def test_a_boot_takes_the_spare_time_the_later_boots_are_not_expected_to_need(tmp_path, monkeypatch):
    """A later boot whose spread calls for no more repeats leaves this boot all of the spare time, not half."""
    run = store.RunStore.create(tmp_path)
    provenance = Provenance(created_at="2026-12-01T10:00:00Z", command=("run_bench.py",), git_commit=None,
                            versions={}, gpu=Gpu("NVIDIA H200", 1, 139.8, "580"), git_dirty=None)
    plan = tuple(points.make_point("baseline", "chat", "concurrency", 64, None, 256, r) for r in (1, 2, 3))
    run.write_manifest(Manifest("r", provenance, {}, 1, None, (), (), plan))
    for rec in headline_runs("baseline", "chat", [900.0, 1100.0, 900.0]):
        run.append_point(rec)
    ran: list[str] = []

    def run_point(b, arm, p, last):  # the CI never narrows: only the time stops the repeats
        ran.append(p.point_id)
        b.store.append_point(done(p, 40.0, 1100.0 if len(ran) % 2 else 900.0))  # the ETA holds it till time passes

    monkeypatch.setattr(runner, "run_point", run_point)
    model = costs.CostModel()
    later = [points.make_point("fp8-kv", "chat", "concurrency", 64, None, 256, r) for r in (1, 2, 3)]
    one_s = model.point_s(points.make_point("baseline", "chat", "concurrency", 64, None, 256, 4))
    clock = Eta(model, later, boots=1, quick=False)
    b = SimpleNamespace(store=run, clock=clock, total=3, progress=lambda text: None,
                        budget_end=time.monotonic() + clock.seconds_left() + 3.5 * one_s)
    runner.run_extra_repeats(b, {"baseline": ALL_ARMS[0]})
    assert len(ran) == 3  # split evenly with the later boot it would have been 1


def test_the_dry_run_estimate_says_whether_this_hosts_last_run_calibrated_it(tmp_path, capsys, run_bench,
                                                                             monkeypatch):
    standin = str(REPO_ROOT / "tests" / "standin")
    monkeypatch.setenv("SGLANG_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (standin, os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("RESULTS_DIR", str(tmp_path))
    args = ["--arms", "baseline", "--workloads", "chat", "--concurrency", "64", "--budget-min", "20", "--dry-run"]
    assert run_bench.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert "uncalibrated" in next(line for line in out if line.startswith("[bench] estimate:"))
    doc = json.loads(out[-1])
    assert not doc["calibrated"] and doc["budget_s"] == 1200 and doc["estimate_s"] <= 1200
    head = points.make_point("baseline", "chat", "concurrency", 64, None, 256, 1)
    run = store.RunStore.create(tmp_path)
    run.append_point(PointRecord.of(head, attempt=1, status="ok", error=None, started_at=0.0, ended_at=60.0,
                                    cache_flushed=True, summary=None, requests_file="requests/x.jsonl"))
    assert run_bench.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert next(line for line in out if line.startswith("[bench] estimate:")).endswith(
        f"calibrated on this host's last 1 run(s), newest {run.run_id} (1 points, 0 boots: "
        f"boot {costs.RESTART_EST_S + costs.WARM_ARM_EST_S:.0f} s, unseen points x{60 / points.estimate_s(head):.2f})")
    assert json.loads(out[-1])["calibrated"]
    assert "calls for" not in next(line for line in out if line.startswith("[bench] budget"))
    # a run that repeated chat c=64 on these flags: its spread is said, and what it calls for
    run.write_manifest(Manifest(run.run_id, PROVENANCE, {}, 1, None, (arms_mod.REGISTRY["baseline"],), (), ()))
    for r, v in enumerate([900.0, 1100.0, 1000.0], 1):
        run.append_point(dataclasses.replace(done(points.make_point("baseline", "chat", "concurrency", 64, None, 256,
                                                                     r), 60.0, v), started_at=0.0, ended_at=60.0))
    assert run_bench.main(args) == 0
    said = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("[bench] budget"))
    assert said.endswith("the spread of the last run that repeated them calls for chat c=64 on baseline 10 repeats "
                         "(10.0%)")
