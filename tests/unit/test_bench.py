"""Arms, telemetry rows and the tool-call scorer (pure parts), and the stand-in load generator's CLI subset."""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from llmhost.bench import arms, telemetry, toolcalls
from llmhost.bench.records import TelemetrySample


def test_builtin_arms_each_change_one_setting_and_the_baseline_comes_first():
    built_in = list(arms.REGISTRY.values())
    assert built_in[0].is_baseline and built_in[0].flags == ()
    assert [a.name for a in built_in] == ["baseline", "no-prefix-cache", "fp8-kv", "page-16", "triton"]
    for arm in built_in[1:]:
        assert not arm.is_baseline and sum(f.startswith("--") for f in arm.flags) == 1
    assert len({a.color for a in built_in}) == len(built_in)


def test_builtin_arm_flags_exist_in_the_captured_launch_server_help(captures):
    text = (captures / "launch_server_help.txt").read_text()
    for arm in arms.REGISTRY.values():
        assert all(f in text for f in arm.flags if f.startswith("--"))


def test_user_arms_are_parsed_like_a_shell_line_and_appended():
    chosen = arms.select(None, ['chunk4k=--chunked-prefill-size 4096', "sched=--schedule-policy 'lpm'"])
    assert [a.name for a in chosen][-2:] == ["chunk4k", "sched"]
    assert chosen[-1].flags == ("--schedule-policy", "lpm") and not chosen[-1].is_baseline


@pytest.mark.parametrize("spec", ["nonsense", "Bad Name=--x 1", "x=", "x=value-without-dashes", "x=--a 'open"])
def test_bad_user_arms_fail_with_one_line(spec):
    with pytest.raises(arms.ArmError) as err:
        arms.parse_user_arm(spec)
    assert "\n" not in str(err.value)


def test_an_arm_of_a_flag_sglang_parses_but_never_reads_is_refused_naming_the_live_one(captures):
    flag = "--num-continuous-decode-steps"
    assert flag in (captures / "launch_server_help.txt").read_text()  # 0.5.17 accepts it ...
    for spec in (f"ncds={flag} 4", f"ncds=--page-size 16 {flag}=4"):
        with pytest.raises(arms.ArmError, match=f"arm ncds: {flag} is parsed by SGLang 0.5.17 but read "
                                                "nowhere, so it changes nothing; use --scheduler-recv-interval"):
            arms.parse_user_arm(spec)  # ... and an arm of it would measure the baseline twice
    assert arms.parse_user_arm("sri=--scheduler-recv-interval 4").flags == ("--scheduler-recv-interval", "4")


def test_select_keeps_registry_order_and_rejects_unknown_and_duplicate_names():
    assert [a.name for a in arms.select(["triton", "baseline"], [])] == ["baseline", "triton"]
    with pytest.raises(arms.ArmError, match="unknown arm nope"):
        arms.select(["nope"], [])
    with pytest.raises(arms.ArmError, match="defined twice"):
        arms.select(None, ["triton=--page-size 32"])
    with pytest.raises(arms.ArmError, match="defined twice"):
        arms.select(None, ["mine=--page-size 32"], ["mine=--page-size 64"])


def test_an_arm_given_with_arm_runs_even_when_arms_lists_others():
    """`--arms baseline --arm ref=...` used to drop ref silently; BENCH_USER_ARMS arms are only candidates."""
    chosen = arms.select(["baseline"], ["ref=--page-size 32"], ["cfg=--page-size 64"])
    assert [a.name for a in chosen] == ["baseline", "ref"]
    assert [a.name for a in arms.select(["cfg"], ["ref=--page-size 32"], ["cfg=--page-size 64"])] == ["ref", "cfg"]
    assert [a.name for a in arms.select(None, [], ["cfg=--page-size 64"])][-1] == "cfg"


def test_arm_flags_travel_as_launch_flags():
    assert arms.server_overrides(arms.REGISTRY["fp8-kv"]) == (["--kv-cache-dtype", "fp8_e5m2"], {})
    assert arms.config_arm_specs(" a=--x 1 ; ;b=--y 2") == ["a=--x 1", "b=--y 2"]


def test_an_arm_on_a_flag_serve_sh_owns_travels_as_its_setting():
    """The launch spec refuses --chunked-prefill-size among extra flags: the README's chunk4k example used to fail."""
    chunk = arms.parse_user_arm('chunk4k="--chunked-prefill-size 4096"'.replace('"', ""))
    assert arms.server_overrides(chunk) == ([], {"CHUNKED_PREFILL_SIZE": "4096"})
    both = arms.parse_user_arm("mix=--tokenizer-worker-num=1 --max-running-requests 32")
    assert arms.server_overrides(both) == (["--max-running-requests", "32"], {"TOKENIZER_WORKER_NUM": "1"})
    with pytest.raises(arms.ArmError, match="--port is set by PORT"):
        arms.parse_user_arm("p=--port 31000")
    with pytest.raises(arms.ArmError, match="needs a value"):
        arms.parse_user_arm("c=--chunked-prefill-size")


def test_tensor_and_data_parallel_arms_travel_as_tp_size_and_dp_size():
    """An arm may compare TP=2 or DP=2 with one GPU: the restart gets the setting, which start checks against the GPUs."""
    assert arms.server_overrides(arms.parse_user_arm("tp2=--tp-size 2")) == ([], {"TP_SIZE": "2"})
    assert arms.server_overrides(arms.parse_user_arm("dp2=--data-parallel-size 2")) == ([], {"DP_SIZE": "2"})
    assert arms.server_overrides(arms.parse_user_arm("dp2=--dp-size=2")) == ([], {"DP_SIZE": "2"})


def test_an_arm_may_change_a_lifecycle_setting_as_key_value():
    """FREEZE_GC is not a launch flag: `gc-live=FREEZE_GC=off` compares the defaults with an unfrozen collector."""
    live = arms.parse_user_arm("gc-live=FREEZE_GC=off")
    assert arms.server_overrides(live) == ([], {"FREEZE_GC": "off"})
    mixed = arms.parse_user_arm("article=--tokenizer-worker-num 1 --context-length 32768 FREEZE_GC=off")
    assert arms.server_overrides(mixed) == (["--context-length", "32768"], {"TOKENIZER_WORKER_NUM": "1",
                                                                           "FREEZE_GC": "off"})
    with pytest.raises(arms.ArmError, match="PORT is not a setting an arm can change"):
        arms.parse_user_arm("p=PORT=31000")
    with pytest.raises(arms.ArmError, match="FREEZE_GC=maybe must be on or off"):
        arms.parse_user_arm("g=FREEZE_GC=maybe")
    sglang_graphs = arms.parse_user_arm(
        "sglang-graphs=CUDA_GRAPH_PREFILL_TOKENS=auto 'CUDA_GRAPH_DECODE_BATCHES=1 2 4'")
    assert arms.server_overrides(sglang_graphs) == ([], {"CUDA_GRAPH_PREFILL_TOKENS": "auto",
                                                         "CUDA_GRAPH_DECODE_BATCHES": "1 2 4"})
    with pytest.raises(arms.ArmError, match="CUDA_GRAPH_DECODE_BATCHES=1,2 must be auto or whole numbers"):
        arms.parse_user_arm("g=CUDA_GRAPH_DECODE_BATCHES=1,2")


def test_an_arm_may_give_the_server_an_environment_but_no_secret_in_it():
    """SERVER_ENV in place of config.env's for one arm (a toggle read from the environment); arms are recorded in
    the results, so a secret-looking name is refused there."""
    one = arms.parse_user_arm("check=SERVER_ENV=LLMHOST_SHARED_PREFIX_CHECK=1")
    assert arms.server_overrides(one) == ([], {"SERVER_ENV": "LLMHOST_SHARED_PREFIX_CHECK=1"})
    two = arms.parse_user_arm("two='SERVER_ENV=A=1 B=2' --max-running-requests 64")
    assert arms.server_overrides(two) == (["--max-running-requests", "64"], {"SERVER_ENV": "A=1 B=2"})
    with pytest.raises(arms.ArmError, match="SERVER_ENV sets HF_TOKEN, a secret, and arms are recorded"):
        arms.parse_user_arm("t='SERVER_ENV=A=1 HF_TOKEN=hf_abc'")
    with pytest.raises(arms.ArmError, match="is not NAME=VALUE"):
        arms.parse_user_arm("b=SERVER_ENV=oops")


def _metrics_body(captures) -> str:
    return (captures / "GET_metrics.txt").read_text().replace("\r\n", "\n").split("\n\n", 1)[1]


def test_metric_rows_keep_the_live_series_with_their_labels(captures):
    rows = telemetry.metric_rows(_metrics_body(captures), 100.0, "p1")
    names = {r.name for r in rows}
    assert {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate"} <= names
    assert names <= set(telemetry.METRICS_KEPT)
    running = next(r for r in rows if r.name == "sglang:num_running_reqs")
    assert running.labels["model_name"] == "qwen3-4b" and running.t == 100.0 and running.point_id == "p1"
    assert running.source == "metrics"


def test_a_nan_gauge_is_a_missing_sample_not_a_broken_telemetry_file():
    rows = telemetry.metric_rows("sglang:token_usage 0.5\nsglang:cache_hit_rate NaN\n", 1.0, None)
    assert [(r.name, r.value) for r in rows] == [("sglang:token_usage", 0.5)]


def test_smi_rows_convert_units_and_skip_unreadable_cells():
    rows = telemetry.smi_rows("0, 97, 40960, 612.5, 1980\n1, 3, 1024, [N/A], 345\n", 5.0, None)
    by = {(r.labels["gpu"], r.name): r.value for r in rows}
    assert by[("0", "gpu_util_pct")] == 97 and by[("0", "gpu_mem_used_gb")] == 40.0
    assert by[("0", "gpu_power_w")] == 612.5 and by[("1", "gpu_sm_clock_mhz")] == 345
    assert ("1", "gpu_power_w") not in by


def test_sampler_tags_rows_with_the_running_point_and_keeps_ticking_without_a_server(free_port):
    collected: list[list[dict]] = []
    sampler = telemetry.Sampler(f"http://127.0.0.1:{free_port}", collected.append, interval_s=0.05)
    sampler._gpu = lambda t, p: [TelemetrySample(t, "gpu", "gpu_util_pct", {"gpu": "0"}, 1.0, p)]
    sampler.point_id = "x"
    rows = sampler.sample_once()
    assert rows and rows[0].point_id == "x" and rows[0].source == "gpu"


def test_toolcall_cases_cover_every_tool_and_no_tool_prompts():
    expected = [c.expected_tool for c in toolcalls.CASES]
    assert 36 <= len(expected) <= 44 and len({c.case_id for c in toolcalls.CASES}) == len(expected)
    assert {"get_weather", "search_docs", "create_ticket", None} == set(expected)


def test_toolcall_scoring_needs_the_right_tool_and_the_right_arguments():
    case = next(c for c in toolcalls.CASES if c.case_id == "weather-0")  # Paris, celsius
    assert toolcalls.score(case, "get_weather", json.dumps({"city": "paris", "unit": "celsius"})) == (True, True)
    assert toolcalls.score(case, "search_docs", json.dumps({"city": "Paris", "unit": "celsius"})) == (True, False)
    assert toolcalls.score(case, "get_weather", json.dumps({"city": "Lyon", "unit": "celsius"})) == (False, False)
    assert toolcalls.score(case, "get_weather", "{not json") == (False, False)
    none = next(c for c in toolcalls.CASES if c.expected_tool is None)
    assert toolcalls.score(none, None, None) == (True, True) and toolcalls.score(none, "get_weather", "{}")[1] is False


def test_toolcalls_are_skipped_with_a_reason_on_dummy_weights():
    rows = toolcalls.check("fp8-kv", client=None, model="m", load_format="dummy")
    assert len(rows) == 1 and rows[0].arm == "fp8-kv" and "dummy" in rows[0].skipped


def _fake_client(answer):
    def create(**kwargs):
        assert kwargs["tools"] and kwargs["tool_choice"] == "auto"
        call = answer(kwargs["messages"][0]["content"])
        calls = [SimpleNamespace(function=SimpleNamespace(name=call[0], arguments=call[1]))] if call else None
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(tool_calls=calls))])
    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def test_toolcall_rows_follow_the_contract_and_record_errors_as_data():
    def answer(prompt):
        if "weather" in prompt:
            return "get_weather", json.dumps({"city": prompt.split(" in ")[1].split(" ")[0].rstrip("?")})
        if "ticket" in prompt:
            raise RuntimeError("boom")
        return None
    rows = toolcalls.check("baseline", _fake_client(answer), "m", "auto", workers=2)
    assert len(rows) == len(toolcalls.CASES) and {r.arm for r in rows} == {"baseline"}
    by = {r.case_id: r for r in rows}
    assert by["none-0"].ok and not by["docs-0"].ok and by["none-0"].error == ""
    assert not by["weather-0"].ok and by["weather-0"].called_tool == "get_weather"  # unit missing
    assert by["ticket-0"].error.startswith("RuntimeError") and not by["ticket-0"].ok


def test_standin_load_generator_accepts_only_options_of_the_captured_help(captures, monkeypatch, repo):
    monkeypatch.syspath_prepend(str(repo / "tests" / "standin"))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    from sglang.benchmark import serving

    text = (captures / "bench_serving_help.txt").read_text()
    options = [o for a in serving.build_parser()._actions for o in a.option_strings if o.startswith("--")]
    assert options and all(o in text for o in options)
    assert set(serving.ASYNC_REQUEST_FUNCS) <= set(text.split("--backend {")[1].split("}")[0].split(","))


def test_nvml_reader_skips_a_counter_the_board_does_not_support(monkeypatch):
    class NVMLError(Exception):
        pass

    def no_power(handle):
        raise NVMLError("Not Supported")

    fake = SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetPowerUsage=no_power,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=40 * 2**30),
        nvmlDeviceGetClockInfo=lambda h, clock: 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    rows = telemetry.gpu_reader()(7.0, "p1")  # one unsupported counter used to raise and end the sampler thread
    by = {r.name: r.value for r in rows}
    assert by == {"gpu_util_pct": 97.0, "gpu_mem_used_gb": 40.0, "gpu_sm_clock_mhz": 1980.0}


def test_the_sampler_scrapes_each_worker_behind_the_router_and_labels_its_samples():
    layout = ({"name": "worker0", "port": 30001, "gpus": "0", "tp_size": 1, "dp_size": 1},
              {"name": "worker1", "port": 30002, "gpus": "1", "tp_size": 1, "dp_size": 1},
              {"name": "router", "port": 30000, "gpus": None, "tp_size": None, "dp_size": None})
    base = "http://10.0.0.5:30000"
    assert telemetry.scrape_targets(layout, base, []) == [("worker0", "http://127.0.0.1:30001"),
                                                          ("worker1", "http://127.0.0.1:30002")]
    assert telemetry.scrape_targets(layout[2:], base, ["http://10.0.0.2:30000", "http://10.0.0.3:30000"]) == [
        ("10.0.0.2:30000", "http://10.0.0.2:30000"), ("10.0.0.3:30000", "http://10.0.0.3:30000")]
    one = ({"name": "server", "port": 30000, "gpus": "0,1", "tp_size": 2, "dp_size": 1},)
    assert telemetry.scrape_targets(one, base, []) == telemetry.scrape_targets((), base, []) == [("", base)]


def test_each_scraped_worker_gets_its_own_samples_and_a_dead_one_none(free_port):
    import http.server
    import threading

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"sglang:token_usage{{tp_rank=\"0\"}} 0.{self.server.server_port % 7}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics) for _ in range(2)]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        sampler = telemetry.Sampler(f"http://127.0.0.1:{free_port}", lambda rows: None)
        sampler.scrape([(f"worker{i}", f"http://127.0.0.1:{s.server_port}") for i, s in enumerate(servers)]
                       + [("worker2", f"http://127.0.0.1:{free_port}")])  # nothing listens there
        rows = sampler.sample_once()
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
    assert [(r.labels, r.value) for r in rows] == [
        ({"tp_rank": "0", "worker": f"worker{i}"}, float(f"0.{s.server_port % 7}")) for i, s in enumerate(servers)]


def test_nvml_samples_every_gpu_of_the_host_labelled_by_its_index(monkeypatch):
    fake = SimpleNamespace(
        NVMLError=Exception, NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetPowerUsage=lambda h: 100_000 * (h + 1),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=10 * h),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=(h + 1) * 2**30),
        nvmlDeviceGetClockInfo=lambda h, clock: 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    rows = telemetry.gpu_reader()(7.0, None)
    by = {(r.labels["gpu"], r.name): r.value for r in rows}
    assert by[("0", "gpu_mem_used_gb")] == 1.0 and by[("1", "gpu_mem_used_gb")] == 2.0
    assert by[("1", "gpu_util_pct")] == 10.0 and by[("1", "gpu_power_w")] == 200.0 and len(by) == 8
