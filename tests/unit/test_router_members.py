"""ROUTER=on's members: local workers (ports, GPUs, shared-GPU pools, launch order), the router's command (loopback
metrics, no key on it), servers elsewhere, and the stand-in router's CLI."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from llmhost import config
from llmhost.serve import parallel, router, service, spec
from llmhost.serve.spec import SpecError, build_spec, write_launch_files

H200 = (143771.0, 143771.0)  # (free, total) MiB of an empty H200


@pytest.fixture
def cfg(tmp_path) -> config.Config:
    return dataclasses.replace(config.load({}), work_dir=str(tmp_path / "work"), model_dir=str(tmp_path / "model"),
                               sglang_python="/opt/venv/bin/python", router="on", port=30000, dp_size=2)


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def env(member: router.Member) -> dict[str, str]:
    return dict(member.spec.env)


def test_local_workers_are_whole_servers_on_loopback_ports_after_port_and_the_router_comes_last(cfg):
    cfg = dataclasses.replace(cfg, tp_size=2, gpus="0,1,2,3", host="0.0.0.0")
    workers = router.members(cfg, ["0", "1", "2", "3"], H200)
    assert [m.name for m in workers] == ["worker0", "worker1", "router"]
    for i, worker in enumerate(workers[:2]):
        argv = worker.spec.argv
        assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == str(30001 + i)
        assert flag(argv, "--tp-size") == "2" and "--dp-size" not in argv  # data parallel: the router's job
        assert flag(argv, "--tokenizer-worker-num") == "4" and "--enable-dynamic-batch-tokenizer" in argv
        assert worker.after == worker.after_pool == ()  # own GPUs: both start at once
    assert env(workers[0])["CUDA_VISIBLE_DEVICES"] == "0,1" and env(workers[1])["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_the_router_listens_on_host_port_keeps_its_metrics_on_loopback_and_waits_for_every_worker(cfg):
    cfg = dataclasses.replace(cfg, host="0.0.0.0", router_metrics_port=29100, router_policy="round_robin")
    front = router.members(cfg, ["0", "1"], H200)[-1]
    argv = list(front.spec.argv)
    assert argv[:2] == ["/opt/venv/bin/python", str(router.ROUTER_MAIN)]
    assert flag(argv, "--host") == "0.0.0.0" and flag(argv, "--port") == "30000"
    assert argv[argv.index("--worker-urls") + 1:argv.index("--policy")] == ["http://127.0.0.1:30001",
                                                                          "http://127.0.0.1:30002"]
    assert flag(argv, "--policy") == "round_robin"
    assert flag(argv, "--prometheus-host") == "127.0.0.1" and flag(argv, "--prometheus-port") == "29100"
    assert front.after == ("worker0", "worker1") and "CUDA_VISIBLE_DEVICES" not in env(front)


def test_with_a_key_the_router_reads_it_from_the_workers_yaml_never_from_its_command_line(cfg, tmp_path):
    cfg = dataclasses.replace(cfg, api_key_file=str(tmp_path / "key"), tokenizer_worker_num="auto")
    *workers, front = router.members(cfg, ["0", "1"], H200)
    yaml = str(cfg.state_dir / "sglang_config.yaml")
    assert flag(front.spec.argv, "--api-key-from") == yaml and "--api-key" not in front.spec.argv
    assert all(flag(w.spec.argv, "--config") == yaml for w in workers)


def test_two_workers_on_one_gpu_launch_in_turn_with_equal_pools(cfg):
    cfg = dataclasses.replace(cfg, gpus="0,0")
    first, second, _ = router.members(cfg, ["0", "0"], H200)
    assert (first.after, second.after) == ((), ())
    assert (first.after_pool, second.after_pool) == ((), ("worker0",))  # launched once worker0 holds its KV pool
    assert flag(first.spec.argv, "--mem-fraction-static") == "0.403"
    assert flag(second.spec.argv, "--mem-fraction-static") == "0.806"
    assert env(first)["CUDA_VISIBLE_DEVICES"] == env(second)["CUDA_VISIBLE_DEVICES"] == "0"


def test_equal_pools_leave_every_sharers_runtime_reserve(cfg):
    free, total = H200
    fractions = router.shared_fractions(2, free, total)
    reserve = 0.097 * total
    pool = fractions[0] * free
    assert pool == pytest.approx(fractions[1] * (free - pool - reserve), rel=1e-2)
    assert 2 * pool + 2 * reserve == pytest.approx(free, rel=1e-2)
    with pytest.raises(SpecError, match="8 workers cannot share a GPU with 50.0 GiB free"):
        router.shared_fractions(8, 50 * 1024, total)


def test_a_later_sharers_fraction_is_refit_to_what_the_earlier_one_really_holds(cfg, monkeypatch):
    """H200, SGLang 0.5.17: worker0 (0.403 of 143,770 MiB free) held its 57,940 MiB pool plus ~5 GiB once it served,
    not plus its 13,946 MiB reserve, so the planned 0.806 gave worker1 a KV pool of 415,389 tokens against 352,876.
    Re-fit to the memory free at its launch, its static pool is worker0's."""
    cfg = dataclasses.replace(cfg, gpus="0,0")
    first, second, front = router.members(cfg, ["0", "0"], H200)
    pool = router.shared_pool_mib(2, *H200)
    assert (first.pool_mib, second.pool_mib, front.pool_mib) == (None, pool, None)  # only a later sharer
    free_now = H200[0] - pool - 5 * 1024
    command, planned, now = service.refit_fraction(list(second.spec.command), pool, free_now, H200[1])
    assert (planned, now) == (0.806, round(pool / free_now, 3)) and now * free_now == pytest.approx(pool, rel=1e-3)
    assert flag(command, "--mem-fraction-static") == str(now) and len(command) == len(second.spec.command)
    # the earlier worker took more than planned: the later one keeps its runtime reserve, with a smaller pool
    crowded = H200[0] - pool - 20 * 1024
    _, _, tight = service.refit_fraction(list(second.spec.command), pool, crowded, H200[1])
    assert tight * crowded == pytest.approx(crowded - spec.gpu_reserve_mib(H200[1]), rel=1e-3)
    assert tight * crowded < pool

    said: list[bytes] = []
    record = {"name": "worker1", "command": list(second.spec.command), "pool_mib": pool}
    monkeypatch.setattr(service.gpu, "free_total_mib", lambda index: (free_now, H200[1]) if index == 0 else None)
    refit = service.refit_member(record, [said.append])
    assert flag(refit["command"], "--mem-fraction-static") == str(now)
    assert said == [f"[serve] worker1: --mem-fraction-static 0.806 -> {now:g}, its {pool / 1024:.1f} GiB static "
                    f"pool of the {free_now / 1024:.1f} GiB free on GPU 0 now\n".encode()]
    monkeypatch.setattr(service.gpu, "free_total_mib", lambda index: None)  # no driver to ask: as planned
    assert service.refit_member(record, [said.append]) == record


def test_an_explicit_memory_fraction_is_each_workers_own(cfg):
    cfg = dataclasses.replace(cfg, gpus="0,0", mem_fraction_static="0.4")
    assert [flag(m.spec.argv, "--mem-fraction-static") for m in router.members(cfg, ["0", "0"], H200)[:2]] == [
        "0.4", "0.4"]


def test_an_arms_flags_go_to_the_workers_not_the_router(cfg):
    *workers, front = router.members(cfg, ["0", "1"], H200, extra_args=["--page-size", "16"])
    assert all(flag(w.spec.argv, "--page-size") == "16" for w in workers) and "--page-size" not in front.spec.argv


def test_servers_elsewhere_get_only_a_router_and_no_gpu_of_this_host(cfg):
    cfg = dataclasses.replace(cfg, worker_urls="http://10.0.0.2:30000 http://10.0.0.3:30000")
    (front,) = router.members(cfg, [], None)
    assert front.after == () and router.worker_ports(cfg) == []
    assert flag(front.spec.argv, "--worker-urls") == "http://10.0.0.2:30000"
    assert parallel.gpus_per_node(cfg) == 0 and parallel.gpu_problem(cfg, {}, [], []) is None


def test_the_router_does_not_span_hosts_itself(cfg):
    cfg = dataclasses.replace(cfg, nnodes=2, tp_size=2, dist_init_addr="10.0.0.1:25000")
    with pytest.raises(SpecError, match="ROUTER=on with NNODES > 1"):
        router.members(cfg, ["0", "1"], H200)


def test_only_the_routers_local_workers_may_share_a_gpu(cfg):
    assert parallel.layout_problem(dataclasses.replace(cfg, gpus="0,0")) is None
    alone = dataclasses.replace(cfg, gpus="0,0", router="off")
    assert parallel.layout_problem(alone).startswith("GPUS=0,0 lists a GPU twice")


def test_the_standin_router_takes_exactly_the_captured_options(repo):
    run = [sys.executable, "-m", "sglang_router.launch_router"]
    env = {"PYTHONPATH": str(repo / "tests" / "standin")}
    bad = subprocess.run([*run, "--workers", "http://x:1"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unrecognized arguments: --workers" in bad.stderr
    bad = subprocess.run([*run, "--policy", "fastest"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "invalid choice: 'fastest'" in bad.stderr


def test_the_layout_says_which_processes_served_on_which_gpus_and_ranks(cfg, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    service.write_members(router.members(dataclasses.replace(cfg, tp_size=2), ["0", "1", "2", "3"], H200), state)
    assert service.layout(state) == [
        {"name": "worker0", "port": 30001, "gpus": "0,1", "tp_size": 2, "dp_size": 1},
        {"name": "worker1", "port": 30002, "gpus": "2,3", "tp_size": 2, "dp_size": 1},
        {"name": "router", "port": 30000, "gpus": None, "tp_size": None, "dp_size": None}]


def test_one_servers_layout_comes_from_its_recorded_command(cfg, tmp_path):
    one = dataclasses.replace(cfg, router="off", dp_size=2, gpus="4,5")
    write_launch_files(build_spec(one), tmp_path, None)
    assert service.layout(tmp_path) == [{"name": "server", "port": 30000, "gpus": "4,5", "tp_size": 1, "dp_size": 2}]
    assert service.layout(tmp_path / "nothing") == []


def test_the_workers_the_router_routes_to_are_read_from_its_readiness_as_captured(captures):
    captured = captures.joinpath("router_routes.txt").read_text().split("=== GET /readiness\n")[1]
    body = captured.split("\n\n", 1)[1].split("\n===")[0].strip()
    assert router.healthy_workers(body) == 2  # {"status":"ready","healthy_workers":2,"total_workers":2}
    assert router.healthy_workers('{"status":"not ready","reason":"insufficient healthy workers"}') is None
    assert router.healthy_workers("OK") is None


def test_a_later_sharer_launched_while_the_earlier_one_captures_graphs_leaves_both_reserves_free(cfg):
    """worker1 launches once worker0 holds its KV pool, before worker0's CUDA graphs and activations (SGLang's
    runtime reserve): what worker1's pool leaves free must still hold worker0's reserve besides its own."""
    cfg = dataclasses.replace(cfg, gpus="0,0")
    _, second, _ = router.members(cfg, ["0", "0"], H200)
    pool, reserve = router.shared_pool_mib(2, *H200), spec.gpu_reserve_mib(H200[1])
    free_now = H200[0] - pool - 1024  # worker0: its static pool and a CUDA context, no graphs yet
    _, _, now = service.refit_fraction(list(second.spec.command), pool, free_now, H200[1])
    assert now * free_now == pytest.approx(pool, rel=1e-3)  # equal pools still
    assert free_now - now * free_now >= 2 * reserve - 1024 - 1  # worker0's reserve (less what it holds) + worker1's


def test_a_worker_holds_its_pool_once_sglang_logged_it_or_once_it_answers_http(tmp_path, monkeypatch):
    answering: set[int] = set()
    monkeypatch.setattr(service, "_answers", lambda port: port in answering)
    waits = service.Waits(tmp_path)
    assert not waits.holds_pool("worker0", 30001)  # no log yet
    log = tmp_path / "worker0.log"
    log.write_text("[2026-12-03 13:49:03] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 352876\n")
    assert not waits.holds_pool("worker0", 30001)
    with log.open("a") as out:
        out.write("[2026-12-03 13:49:03] Memory pool end. avail mem=82.40 GB\n")  # captured: SGLang 0.5.17
    assert waits.holds_pool("worker0", 30001)
    answering.add(30002)
    assert waits.holds_pool("worker1", 30002)  # a version that logs it otherwise: once its HTTP server is up


def test_a_member_that_answered_once_is_not_asked_again_while_later_launches_wait(tmp_path, monkeypatch):
    """The router waits for worker1's HTTP server: worker0, up long before, is not asked again on every poll."""
    asked: list[int] = []
    answering = {30001}
    monkeypatch.setattr(service, "_answers", lambda port: asked.append(port) or port in answering)
    members = [{"name": "worker0", "port": 30001, "after": [], "after_pool": []},
               {"name": "worker1", "port": 30002, "after": [], "after_pool": ["worker0"]},
               {"name": "router", "port": 30000, "after": ["worker0", "worker1"], "after_pool": []}]
    waits = service.Waits(tmp_path)
    assert waits.met(members[1], members)  # worker0 answers, so it holds its pool (no log here)
    assert not waits.met(members[2], members) and not waits.met(members[2], members)
    answering.add(30002)
    assert waits.met(members[2], members)
    assert asked == [30001, 30002, 30002, 30002]  # worker0 once, worker1 until it answered
    answering.clear()
    assert waits.met(members[2], members) and asked[4:] == []  # never asked again: an exit ends the service


def test_a_server_answers_http_with_any_status_and_not_before_it_listens(monkeypatch):
    """SGLang's HTTP server comes up after its KV pool and CUDA graphs; with an API key /model_info says 401."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401 if self.path == "/model_info" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        assert service._answers(port)
        server.shutdown()
    assert not service._answers(port)  # closed: refused


def test_the_router_process_never_imports_sglang_for_the_mini_balancers_tracing(tmp_path, repo):
    """sglang-router 0.3.2's launch_router imports its mini load balancer, which tries SGLang's tracing module:
    Python imports the `sglang` package first (transformers and SGLang's modules: 4.4-4.7 s on the H200 host)."""
    package = tmp_path / "sglang"
    (package / "srt" / "tracing").mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    for sub in ("srt", "srt/tracing"):
        (package / sub / "__init__.py").write_text("")
    (package / "srt" / "tracing" / "trace.py").write_text("def trace_req_start(): pass\n")
    mini_lb = ("try:\n    from sglang.srt.tracing.trace import trace_req_start\n    print('traced')\n"
               "except ImportError:\n    print('untraced')\n")  # the shape of sglang_router/mini_lb.py's import
    env = {"PYTHONPATH": f"{tmp_path}:{repo}"}
    run = [sys.executable, "-c", "from llmhost.serve import router_main; router_main.keep_sglang_out()\n" + mini_lb]
    out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "untraced" and not (tmp_path / "imported").exists(), out.stderr
    out = subprocess.run([sys.executable, "-c", mini_lb], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "traced" and (tmp_path / "imported").exists()  # what it spares the router
