"""Points: the plan, bench_serving arguments checked against the captured --help, and result parsing on the
captured --output-details JSONL of SGLang 0.5.17."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmhost.bench import arms, points, runner
from llmhost import stats
from llmhost.bench.records import RequestRecord
from llmhost.bench.workloads import REGISTRY as WORKLOADS

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


def test_quick_plan_fits_the_documented_thirteen_minutes_with_its_restarts():
    # run_bench.py --help and the README: "~13 min on an H200 incl. 5 restarts", each restart the runner's own
    # estimate (runner.arm_overhead_s), the figure run_bench --dry-run adds per arm too
    plan = points.build_plan(ALL_ARMS, list(WORKLOADS), quick=True, repeat=1)
    restarts_s = len({p.arm for p in plan}) * runner.arm_overhead_s(quick=True)
    assert len({p.arm for p in plan}) == 5
    assert 10 * 60 < sum(map(points.estimate_s, plan)) + restarts_s <= 13.5 * 60


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
    for measured in (True, False):
        argv = points.bench_argv(point, WORKLOADS[workload], base_url="http://127.0.0.1:30000", model_dir="/m",
                                 served_model_name="qwen3-4b", seed=1, output_file=__import__("pathlib").Path("o"),
                                 measured=measured)
        assert points.unknown_flags(argv, help_text(captures)) == []
        assert "--request-rate" in argv and ("--max-concurrency" in argv) == bool(conc)


def test_unknown_flags_names_an_option_the_installed_version_lacks(captures):
    assert points.unknown_flags(["--num-prompts", "3", "--gsp-no-such-thing", "x"], help_text(captures)) == \
        ["--gsp-no-such-thing"]


def test_warm_measurement_skips_the_warm_up_and_flush_that_other_points_use(tmp_path):
    w = WORKLOADS["agent"]
    warm = points.bench_argv(points.make_point("b", "agent", "warm", 16, None, 48, 1), w, base_url="u", model_dir="m",
                             served_model_name="s", seed=1, output_file=tmp_path / "o")
    cold = points.bench_argv(points.make_point("b", "agent", "cold", 16, None, 48, 1), w, base_url="u", model_dir="m",
                             served_model_name="s", seed=1, output_file=tmp_path / "o")
    assert "--flush-cache" not in warm and warm[warm.index("--warmup-requests") + 1] == "0"
    assert "--flush-cache" in cold and "--output-details" in cold


@pytest.mark.parametrize("name", ["gsp.jsonl", "oaichat.jsonl"])
def test_captured_output_details_become_one_contract_row_per_request(captures, name):
    details = points.read_details(captures / name)
    n = len(details["ttfts"])
    starts = [[-1, 1000.0, 0.5]] + [[i, 2000.0 + i, 0.25] for i in range(n)]  # a warm-up first, then n requests
    rows = points.request_rows(details, starts, fallback_start_s=0.0)
    assert len(rows) == n == details["completed"]
    assert [r.start_s for r in rows] == [2000.0 + i for i in range(n)]
    assert all(r.ok and r.e2e_ms == 250.0 for r in rows)
    assert rows[0].ttft_ms == pytest.approx(details["ttfts"][0] * 1000)
    assert rows[0].itl_ms == pytest.approx([x * 1000 for x in details["itls"][0]])
    assert sum(r.output_tokens for r in rows) == details["total_output_tokens"]
    assert sum(r.prompt_tokens for r in rows) == details["total_input_tokens"]


def test_without_start_records_e2e_is_ttft_plus_the_token_gaps(captures):
    details = points.read_details(captures / "gsp.jsonl")
    rows = points.request_rows(details, [], fallback_start_s=5.0)
    assert rows[0].start_s == 5.0
    assert rows[0].e2e_ms == pytest.approx(details["ttfts"][0] * 1000 + sum(details["itls"][0]) * 1000)


def test_failed_requests_have_no_ttft_and_keep_their_error():
    details = {"ttfts": [0.1, 0.0], "itls": [[0.01], []], "errors": ["", "Bad Request: boom"],
               "input_lens": [10, 10], "output_lens": [2, 0], "duration": 1.0, "completed": 1}
    rows = points.request_rows(details, [[0, 1.0, 0.2], [1, 1.5, 0.0]], 0.0)
    assert rows[1] == RequestRecord(start_s=1.5, ok=False, error="Bad Request: boom", prompt_tokens=10,
                                    output_tokens=0, ttft_ms=None, itl_ms=(), e2e_ms=0.0)
    summary = points.summarize(details, rows, None)
    assert summary.failed == 1 and summary.completed == 1 and summary.offered_rate is None


def test_summary_copies_throughputs_and_counts_samples(captures):
    details = points.read_details(captures / "gsp.jsonl")
    rows = points.request_rows(details, [], 0.0)
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


def test_read_details_skips_a_torn_last_line(tmp_path, captures):
    path = tmp_path / "o.jsonl"
    path.write_text((captures / "gsp.jsonl").read_text() + '{"torn": ')
    assert points.read_details(path)["completed"] == 16
    path.write_text("")
    with pytest.raises(ValueError):
        points.read_details(path)


def test_loadgen_wrapper_rejects_a_missing_separator(capsys):
    assert points.loadgen_main(["json", "x", "not-the-separator"]) == 2
    assert points.loadgen_main(["json"]) == 2
    assert "usage" in capsys.readouterr().err


def test_wrapper_records_start_times_in_creation_order_even_via_the_deprecated_path(tmp_path, monkeypatch):
    """The wrapper hooks the names bench_serving itself uses (checked on the stand-in's module layout)."""
    import sys as _sys
    import warnings
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[1] / "standin"))
    for name in [m for m in _sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(_sys.modules, name)
    mod = __import__("sglang.benchmark.serving", fromlist=["x"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        shim = __import__("sglang.bench_serving", fromlist=["x"])
    called = []

    def fake_cli_main() -> None:
        called.append(list(_sys.argv))

    fake_cli_main.__module__ = mod.__name__
    monkeypatch.setattr(mod, "cli_main", fake_cli_main)
    monkeypatch.setattr(shim, "cli_main", fake_cli_main)
    starts = tmp_path / "s.json"
    assert points.loadgen_main(["sglang.bench_serving", str(starts), "--", "--num-prompts", "1"]) == 0
    assert called == [["sglang.bench_serving", "--num-prompts", "1"]] and json.loads(starts.read_text()) == []
    first = mod.RequestFuncInput("p", "u", 1, 1, "m", None, None, {})
    second = mod.RequestFuncInput("p", "u", 1, 1, "m", None, None, {})
    assert (first.llmhost_seq, second.llmhost_seq) == (0, 1)


def test_ctrl_c_during_a_point_also_stops_the_load_generator(tmp_path):
    pid_file = tmp_path / "pid"
    stmt = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):  # `python -m timeit STMT` stands in for bench_serving
        points.run_loadgen(sys.executable, "timeit", ["-n", "1", stmt], starts_file=tmp_path / "starts",
                           log_file=tmp_path / "log", env=dict(os.environ), limit_s=60)
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running in its own session
        os.kill(int(pid_file.read_text()), 0)


def test_a_sigkilled_run_bench_takes_its_load_generator_with_it(tmp_path):
    """SIGKILL runs no cleanup in run_bench.py: the kernel must end the load generator (own session) itself."""
    pid_file = tmp_path / "pid"
    stmt = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    parent_code = (
        "import os, sys; from pathlib import Path; from llmhost.bench import points; "
        f"points.run_loadgen(sys.executable, 'timeit', ['-n', '1', {stmt!r}], starts_file=Path({str(tmp_path / 's')!r}), "
        f"log_file=Path({str(tmp_path / 'log')!r}), env=dict(os.environ), limit_s=60)")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    os.kill(child, 0)  # running, in its own session
    assert os.getsid(child) != os.getsid(0)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
