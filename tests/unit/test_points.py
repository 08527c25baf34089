"""Points: the plan and the user's loads, paired seeds and the boot order, bench_serving arguments checked against the
captured --help, and the summary of the captured --output-details JSONL of SGLang 0.5.17."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmhost import files, stats
from llmhost.bench import arms, loadgen, points, runner, window
from llmhost.bench.records import RequestRecord
from llmhost.bench.workloads import AGENT_GROUPS, REGISTRY as WORKLOADS

REPO = Path(__file__).resolve().parents[2]

ALL_ARMS = list(arms.REGISTRY.values())


def help_text(captures) -> str:
    return (captures / "bench_serving_help.txt").read_text()


def test_quick_plan_runs_the_agent_point_on_every_arm_and_extras_on_the_baseline_only():
    plan = points.build_plan(ALL_ARMS, list(WORKLOADS), quick=True, repeat=1)
    per_arm = {a.name: [p for p in plan if p.arm == a.name] for a in ALL_ARMS}
    assert all(any(p.workload == "agent" and p.pattern == "concurrency" for p in ps) for ps in per_arm.values())
    assert len(per_arm["baseline"]) > len(per_arm["triton"]) == 1
    assert [p.arm for p in plan] == sorted((p.arm for p in plan), key=list(arms.REGISTRY).index)


def test_quick_plan_fits_the_documented_seven_minutes_with_its_restarts():
    # run_bench.py --help and the README: "~7 min on an H200 incl. 5 restarts", each restart the runner's own
    # estimate (runner.arm_overhead_s), the figure run_bench --dry-run adds per arm too
    plan = points.build_plan(ALL_ARMS, list(WORKLOADS), quick=True, repeat=1)
    restarts_s = len({p.arm for p in plan}) * runner.arm_overhead_s(quick=True)
    assert len({p.arm for p in plan}) == 5
    assert 6.5 * 60 < sum(map(points.estimate_s, plan)) + restarts_s <= 7.5 * 60


def test_full_plan_has_every_pattern_and_unique_point_ids_across_repeats():
    plan = points.build_plan(ALL_ARMS[:2], list(WORKLOADS), quick=False, repeat=2)
    assert {p.pattern for p in plan} == {"concurrency", "qps", "long", "burst", "cold", "warm"}
    assert len({p.point_id for p in plan}) == len(plan)
    burst = [p for p in plan if p.pattern == "burst"]
    assert burst and all(p.num_prompts >= 1000 and p.request_rate is None and p.concurrency is None for p in burst)
    long = [p for p in plan if p.pattern == "long"]
    assert long and all(stats.is_sufficient(p.num_prompts, 99.9) for p in long)


def test_plan_keeps_only_the_chosen_workloads():
    plan = points.build_plan(ALL_ARMS[:1], ["chat"], quick=False, repeat=1)
    assert plan and {p.workload for p in plan} == {"chat"}


def test_point_id_follows_the_contract_and_never_gets_an_extra_dot():
    assert points.make_point("fp8-kv", "chat", "qps", None, 0.5, 10, 3).point_id == "fp8-kv.chat.qps.r0p5.r3"
    assert points.make_point("baseline", "chat", "burst", None, None, 1000, 1).point_id == "baseline.chat.burst.inf.r1"
    p = points.make_point("baseline", "agent", "concurrency", 8, None, 40, 1)
    assert p.point_id == "baseline.agent.concurrency.c8.r1" and p.num_prompts == 48  # gsp: whole groups of 16


@pytest.mark.parametrize("pattern,conc,rate", [("concurrency", 4, None), ("qps", None, 2.0), ("burst", None, None),
                                               ("warm", 16, None)])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_every_generated_flag_exists_in_the_captured_bench_serving_help(captures, workload, pattern, conc, rate):
    point = points.make_point("baseline", workload, pattern, conc, rate, 32, 1)
    for prime in (False, True) if WORKLOADS[workload].kind != "random-ids" else (False,):
        argv = points.bench_argv(point, WORKLOADS[workload], base_url="http://127.0.0.1:30000", model_dir="/m",
                                 served_model_name="qwen3-4b", seed=1, output_file=Path("o"), prime=prime)
        assert points.unknown_flags(argv, help_text(captures)) == []
        assert "--request-rate" in argv and ("--max-concurrency" in argv) == bool(conc)
        assert "--cache-report" in argv and "--output-details" in argv  # cached tokens per request, every pass


def test_unknown_flags_names_an_option_the_installed_version_lacks(captures):
    assert points.unknown_flags(["--num-prompts", "3", "--gsp-no-such-thing", "x"], help_text(captures)) == \
        ["--gsp-no-such-thing"]


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_warm_point_asks_new_questions_over_the_system_prompts_its_priming_pass_cached(tmp_path):
    w, point = WORKLOADS["agent"], points.make_point("b", "agent", "warm", 16, None, 48, 1)
    common = dict(base_url="u", model_dir="m", served_model_name="s", seed=7, output_file=tmp_path / "o")
    warm, prime = points.bench_argv(point, w, **common), points.bench_argv(point, w, prime=True, **common)
    cold = points.bench_argv(points.make_point("b", "agent", "cold", 16, None, 48, 1), w, **common)
    assert "--flush-cache" not in warm and _arg(warm, "--warmup-requests") == "0"
    assert "--flush-cache" in cold and "--flush-cache" in prime
    # Same seed and system prompts (gsp draws them first); one 1-token question per group, not the measured ones.
    for flag in ("--seed", "--gsp-num-groups", "--gsp-system-prompt-len"):
        assert _arg(prime, flag) == _arg(warm, flag)
    assert (_arg(prime, "--gsp-prompts-per-group"), _arg(prime, "--gsp-question-len")) == ("1", "1")
    assert (_arg(warm, "--gsp-prompts-per-group"), _arg(warm, "--gsp-question-len")) == ("3", "128")
    with pytest.raises(ValueError, match="^workload chat has no shared prefixes to prime$"):
        WORKLOADS["chat"].dataset_args(32, prime=True)


@pytest.mark.parametrize("workload, pattern, rate, primed", [
    ("agent", "concurrency", None, True), ("agent", "qps", 4.0, True), ("agent-tools", "concurrency", None, True),
    ("agent", "warm", None, True), ("agent", "cold", None, False), ("chat", "concurrency", None, False),
    ("chat", "burst", None, False), ("long", "concurrency", None, False)])
def test_sweep_points_with_shared_prefixes_are_measured_on_primed_prompts_and_cold_stays_cold(
        workload, pattern, rate, primed, tmp_path):
    point = points.make_point("b", workload, pattern, None if rate else 8, rate, 48, 1)
    measured = points.bench_argv(point, WORKLOADS[workload], base_url="u", model_dir="m", served_model_name="s",
                                 seed=7, output_file=tmp_path / "o")
    assert points.is_primed(point) is primed
    # primed: no warm-up request and no flush of what the priming pass cached; else one warm-up, then a flush
    assert ("--flush-cache" not in measured and _arg(measured, "--warmup-requests") == "0") is primed


def test_the_estimate_counts_a_priming_pass_its_overhead_and_one_prompts_prefill_per_group():
    primed = points.make_point("b", "agent", "concurrency", 8, None, 48, 1)
    cold = dataclasses.replace(primed, pattern="cold")  # the same closed loop on a flushed cache
    assert points.estimate_s(primed) - points.estimate_s(cold) == pytest.approx(
        points.LOADGEN_OVERHEAD_S + AGENT_GROUPS * WORKLOADS["agent"].input_len / points.PREFILL_TOK_S)


def _summary_rows(details: dict) -> list[RequestRecord]:
    """Request records as the load generator writes them, from the captured per-request lists."""
    outs = [SimpleNamespace(success=not e, error=e, start_time=10.0 + i, latency=0.5, ttft=t, itl=itl, prompt_len=n,
                            output_len=o, cached_tokens=0)
            for i, (e, t, itl, n, o) in enumerate(zip(details["errors"], details["ttfts"], details["itls"],
                                                      details["input_lens"], details["output_lens"]))]
    return [RequestRecord.from_dict(loadgen.request_row(o, 1000.0)) for o in outs]


def test_summary_copies_throughputs_and_counts_samples(captures):
    details = files.read_jsonl(captures / "gsp.jsonl").rows[-1]
    rows = _summary_rows(details)
    s = points.summarize(details, rows, None)
    assert s.output_throughput == details["output_throughput"] and s.duration_s == details["duration"]
    assert s.samples["ttft_ms"] == 16 and s.samples["itl_ms"] == sum(len(x) for x in details["itls"])
    # 16 requests: even the median rests on 8 samples; 1,008 ITL gaps support p99 but not p99.9.
    assert {"ttft_ms.p50", "ttft_ms.p99", "itl_ms.p99.9"} <= set(s.low_support)
    assert "itl_ms.p99" not in s.low_support


def test_percentile_support_needs_ten_samples_beyond_it():
    assert points.low_support({"x": 10_000}) == []
    assert points.low_support({"x": 9_999}) == ["x.p99.9"]
    assert points.low_support({"x": 1_000}) == ["x.p99.9"]
    assert points.low_support({"x": 999}) == ["x.p99", "x.p99.9"]
    # 100 * (1 - 0.9) is 9.999999999999998 in floating point: p90 of exactly 100 samples is still supported
    assert points.low_support({"x": 100}) == ["x.p99", "x.p99.9"]
    assert points.low_support({"x": 19}) == ["x.p50", "x.p90", "x.p99", "x.p99.9"]


def _rows_at(rate: float, n: int) -> list[RequestRecord]:
    return [RequestRecord(i / rate, True, "", 1, 1, 1.0, (), 1.0) for i in range(n)]


def test_client_bound_when_requests_left_well_below_the_offered_rate():
    assert points.summarize({"duration": 10.0}, _rows_at(5.0, 401), 10.0).client_bound is True
    ok = points.summarize({"duration": 10.0}, _rows_at(9.8, 401), 10.0)
    assert ok.client_bound is False and ok.achieved_rate == pytest.approx(9.8)


def test_client_bound_tolerates_poisson_noise_of_a_short_run():
    # 64 requests: 3 sigma of the mean inter-arrival time is 3/sqrt(63) = 38 %, so 75 % of offered is still noise.
    assert points.summarize({"duration": 10.0}, _rows_at(7.5, 64), 10.0).client_bound is False


def test_timeouts_are_generous_multiples_of_the_estimate():
    p = points.make_point("b", "long", "concurrency", 1, None, 16, 1)
    assert points.timeout_s(p) > 5 * points.estimate_s(p) > 0 and math.isfinite(points.timeout_s(p))


def _loads(plan: list) -> list[tuple]:
    return [(p.workload, p.pattern, p.concurrency, p.request_rate) for p in plan]


def test_concurrency_and_rates_replace_the_sweep_levels_of_every_workload_that_has_them():
    plan = points.build_plan(ALL_ARMS[:1], ["agent", "chat"], False, 1,
                             points.Loads(concurrency=(1, 16, 64, 128), rates=(2.0, 8.0)))
    got = _loads(plan)
    for w in ("agent", "chat"):
        assert [c for wl, pat, c, _ in got if wl == w and pat == "concurrency"] == [1, 16, 64, 128]
        assert [r for wl, pat, _, r in got if wl == w and pat == "qps"] == [2.0, 8.0]
    # the other patterns stay as planned
    assert ("agent", "cold", 16, None) in got and ("chat", "long", 128, None) in got and ("chat", "burst", None, None) in got
    c128 = next(p for p in plan if p.workload == "chat" and p.concurrency == 128)
    assert c128.num_prompts == 6 * 128  # two warm-up waves, then four: two turnovers per window half


def test_duration_sizes_the_concurrency_and_rate_points_and_nothing_else():
    plan = points.build_plan(ALL_ARMS[:1], ["chat"], False, 1, points.Loads(rates=(8.0,), duration_s=60))
    qps = next(p for p in plan if p.pattern == "qps")
    # 8 req/s x (60 s of steady window + one request's latency of warm-up)
    assert qps.num_prompts == math.ceil(8 * (60 + points.request_s(points.WORKLOADS["chat"])))
    c16 = next(p for p in plan if p.pattern == "concurrency" and p.concurrency == 16)
    # two warm-up waves of 16, then about 60 s of steady waves
    steady_waves = c16.num_prompts // 16 - points.WARMUP_WAVES
    assert c16.num_prompts % 16 == 0 and 50 <= steady_waves * points.request_s(points.WORKLOADS["chat"], 16) <= 70
    assert next(p for p in plan if p.pattern == "long").num_prompts == 10_000


def test_duration_never_leaves_a_closed_loop_without_a_steady_window():
    # 10 s at agent c=128 is fewer than two waves of ~3.9 s: the H200 run that asked for it got 256 requests and a
    # window of 4-44 ms; now two warm-up waves and four steady ones, two turnovers per half for the drift check
    plan = points.build_plan(ALL_ARMS[:1], ["agent"], False, 1,
                             points.Loads(concurrency=(128,), patterns=("concurrency",), duration_s=10))
    assert [p.num_prompts for p in plan] == [128 * (points.WARMUP_WAVES + points.MIN_STEADY_WAVES)]
    assert points.MIN_STEADY_WAVES == 2 * window.MIN_HALF_TURNOVERS


def test_every_planned_closed_loop_is_long_enough_for_its_drift_check():
    rows = points.FULL_SWEEP + points.BASELINE_RUNS + points.QUICK_ALL + points.QUICK_BASELINE_EXTRA
    closed = [r for r in rows if r[2] and r[1] not in window.TRANSIENT_PATTERNS]
    assert {r[0] for r in closed} == {"agent", "chat", "long", "agent-tools"}
    for workload, pattern, c, _, n in closed:
        whole_turnovers = n // c - points.WARMUP_WAVES  # the warm-up ends one send into the second turnover
        assert whole_turnovers >= 2 * window.MIN_HALF_TURNOVERS, (workload, pattern, c, n)


def test_patterns_keep_only_those_kinds_of_point_with_the_users_loads():
    plan = points.build_plan(ALL_ARMS[:1], ["agent", "chat"], False, 2,
                             points.Loads(concurrency=(64,), patterns=("concurrency",)))
    assert sorted(p.point_id for p in plan) == sorted(f"baseline.{w}.concurrency.c64.r{r}"
                                                      for w in ("agent", "chat") for r in (1, 2))
    assert {p.pattern for p in points.build_plan(ALL_ARMS[:1], ["chat"], False, 1,
                                                  points.Loads(patterns=("burst", "long")))} == {"burst", "long"}


def test_repeats_get_consecutive_seeds_that_every_arm_shares():
    plan = points.build_plan(ALL_ARMS[:2], ["agent"], True, 3)
    seeds = {(p.arm, p.repeat): points.point_seed(5, p) for p in plan}
    for rep in (1, 2, 3):
        assert seeds[("baseline", rep)] == seeds[("no-prefix-cache", rep)] == 5 + rep - 1


def test_boot_order_is_a_seeded_shuffle_that_a_resume_repeats():
    plan = points.build_plan(ALL_ARMS[:1], list(WORKLOADS), False, 2)
    once, again = points.boot_order(plan, 1), points.boot_order(list(reversed(plan)), 1)
    assert once == again and sorted(p.point_id for p in once) == sorted(p.point_id for p in plan)
    assert once != plan and points.boot_order(plan, 2) != once
