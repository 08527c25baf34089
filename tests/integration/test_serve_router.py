"""ROUTER=on through serve.sh, with REAL tmux, stand-in SGLang workers and the stand-in sglang-router: two workers on one
GPU behind the router start, pass the smoke test, report per worker and stop together; a dead worker ends the
service; the API key holds at the router and never reaches a command line; servers elsewhere are only routed to;
a small benchmark runs behind it, records which workers served, samples each worker's /metrics and each GPU, and
its dashboard draws them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchrun import bench, isolated_env
from standin import harness
from test_dashboard import render
from test_serve import Serve, get, write_key

from llmhost.serve import procfs, startup

REPO = Path(__file__).resolve().parents[2]

ONE_H200 = """#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.used,memory.total) echo "0, NVIDIA H200, 1, 143771" ;;
  --query-gpu=index,gpu_uuid) echo "0, GPU-aaaa" ;;
  --query-compute-apps=pid,gpu_uuid,used_memory) ;;
  *) exit 9 ;;
esac
"""
TWO_H200 = """#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.used,memory.total) printf '0, NVIDIA H200, 1, 143771\n1, NVIDIA H200, 1, 143771\n' ;;
  --query-gpu=index,gpu_uuid) printf '0, GPU-aaaa\n1, GPU-bbbb\n' ;;
  --query-gpu=index,utilization.gpu,memory.used,power.draw,clocks.sm) printf '0, 91, 70000, 600, 1980\n1, 87, 69000, 590, 1980\n' ;;
  --query-compute-apps=pid,gpu_uuid,used_memory) ;;
  *) exit 9 ;;
esac
"""


@pytest.fixture
def routed(tmp_path):
    """make(**settings) -> a Serve with ROUTER=on and a driver that shows one empty H200 (a fake nvidia-smi)."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(ONE_H200)
    smi.chmod(0o755)
    made: list[Serve] = []

    def make(**overrides: str) -> Serve:
        settings = {"ROUTER": "on", "GPUS": "0,0", "DP_SIZE": "2", "LOAD_FORMAT": "dummy",
                    "PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}", **overrides}
        made.append(Serve(tmp_path / f"s{len(made)}", **settings))
        made[-1].env["ROUTER_METRICS_PORT"] = str(harness.free_port())
        return made[-1]

    yield make
    for s in made:
        s.cleanup()


def member_pids(s: Serve) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in s.state.glob("*.pid") if p.stem in ("worker0", "worker1", "router")}


def test_two_workers_on_one_gpu_behind_the_router_serve_the_smoke_test_and_stop_together(routed):
    # each worker holds its KV pool 1.6 s after its launch, answers HTTP after 8 s and serves after 10 s (the
    # stand-in's timeline); its /health takes a second, as SGLang 0.5.17's does once it serves
    s = routed(SERVER_ENV=f"PYTHONPATH={REPO / 'tests' / 'standin'} STANDIN_STARTUP_S=10 STANDIN_HEALTH_S=1")
    started = s("start")
    assert started.returncode == 0, started.stderr
    assert "ready after" in started.stdout
    assert "the router routes to all 2 workers, and each generated" in started.stdout
    assert "launching worker1 once worker0 holds its KV pool" in started.stdout  # one GPU: the second sizes its pool
    assert "launching router once worker0, worker1 answer HTTP" in started.stdout
    assert "garbage collector frozen after start-up (FREEZE_GC=on, 2 servers)" in started.stdout
    timeline = next(line for line in started.stdout.splitlines() if "ready in " in line)  # the slower worker's
    assert "weights " in timeline and "decode graphs " in timeline, timeline
    launched = {name: float((s.state / f"{name}.launched").read_text()) for name in ("worker0", "worker1", "router")}
    assert launched["worker0"] <= launched["worker1"] <= launched["router"]
    # once worker0's pool was allocated (1.6 s), not once it answered HTTP (8 s): the log's clock, however slow the box
    http_up = next(line for line in (s.state / "worker0.log").read_text().splitlines() if "Uvicorn running" in line)
    assert launched["worker1"] < startup.log_epoch(http_up[1:20]), http_up
    fired_up = next(line for line in (s.state / "worker1.log").read_text().splitlines() if "fired up" in line)
    # once worker1's HTTP server answered, during its warm-up, not once its /health said 200 (a second after ready)
    assert launched["router"] < startup.log_epoch(fired_up[1:20]) + 1, fired_up
    assert timeline.split(", ")[-1].startswith("router + first generation "), timeline
    pane_start = startup.utc_epoch((s.state / "started_at").read_text())
    # worker1 counts its start-up from its own launch; the wait for worker0 before it is a phase of its own
    assert ("earlier workers" in timeline) == (int(launched["worker1"]) > pane_start), timeline
    commands = (s.state / "launch_command.txt").read_text().splitlines()
    assert [c.split("--mem-fraction-static ")[1].split()[0] for c in commands[:2]] == ["0.403", "0.806"]
    assert "--worker-urls" in commands[2] and f"--port {s.port}" in commands[2]

    smoke = subprocess.run([sys.executable, str(REPO / "smoke_test.py"), "check", "--json"], env=s.env, cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert json.loads(smoke.stdout.splitlines()[-1])["ok"] is True
    # the router has no /server_info to pass on (captured on the H200): the smoke test says why it assumed random
    assert "assumed random: SGLang's router answers" in smoke.stdout + smoke.stderr

    status = s("status")
    assert status.returncode == 0, status.stderr
    pids = member_pids(s)
    for name in ("worker0", "worker1"):
        assert f"{name}, pid {pids[name]}, GPUs 0" in status.stdout
    assert "router       : cache_aware policy, /readiness -> 200 (routes to 2 of 2 workers)" in status.stdout
    assert "Starting router on 127.0.0.1" in s("logs", "-m", "router").stdout
    logged = s("logs", "-n", "500").stdout
    assert "[worker1]" in logged
    # planned as if worker0 held its whole runtime reserve; re-fit to what is free at worker1's launch (this fake GPU
    # never fills, so worker1 gets worker0's fraction)
    assert "[serve] worker1: --mem-fraction-static 0.806 -> 0.403, its 56.6 GiB static pool of the 140.4 GiB free" \
        in logged

    assert s("restart").returncode == 0  # each member's log starts afresh, the previous one kept once
    for name in ("worker0", "worker1"):
        assert (s.state / f"{name}.log").read_text().count("Load weight end") == 1
        assert (s.state / f"{name}.log.1").read_text().count("Load weight end") == 1
    pids = member_pids(s)
    assert s("stop").returncode == 0
    assert not [name for name, pid in pids.items() if procfs.pid_alive(pid)]
    assert s("running").returncode == 1


def test_a_worker_that_dies_ends_the_whole_service(routed):
    s = routed(DP_SIZE="2", GPUS="0,0")
    assert s("start").returncode == 0
    pids = member_pids(s)
    os.kill(pids["worker0"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while s("running").returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert s("running").returncode == 1
    assert not [name for name, pid in pids.items() if procfs.pid_alive(pid)]
    assert "worker0 exited with code 137; the service is stopped" in (s.state / "server.log").read_text()


def test_a_router_metrics_port_on_a_workers_port_is_refused_before_anything_launches(routed):
    s = routed()
    s.env["ROUTER_METRICS_PORT"] = str(s.port + 1)  # free until worker0 binds it
    result = s("start")
    assert result.returncode == 1
    assert result.stderr.strip() == (f"[serve] error: ROUTER_METRICS_PORT={s.port + 1} is PORT or a worker's port "
                                     f"(PORT+1..PORT+2) — set ROUTER_METRICS_PORT to another port")
    assert not (s.state / "pgid").exists()


def test_the_api_key_holds_at_the_router_and_never_reaches_a_command_line(routed, tmp_path):
    key = "sk-router-5e0a"
    s = routed(API_KEY_FILE=str(write_key(tmp_path / "key", key)))
    started = s("start")
    assert started.returncode == 0, started.stderr
    chat = f"http://127.0.0.1:{s.port}/v1/chat/completions"
    assert get(chat)[0] == 401
    assert s("status").returncode == 0
    leaks = [p for p in s.work.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    assert leaks == [s.state / "sglang_config.yaml"]
    for pid in member_pids(s).values():
        assert key not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert key not in s.pane() + started.stdout + started.stderr


def test_servers_elsewhere_are_routed_to_but_neither_launched_nor_stopped(routed, tmp_path):
    with harness.launch(harness.free_port(), "--served-model-name", "qwen3-4b", "--enable-metrics") as far:
        far.wait_ready()
        s = routed(WORKER_URLS=far.url, GPUS="", DP_SIZE="1")
        started = s("start")
        assert started.returncode == 0, started.stderr
        assert "launching router:" in started.stdout and "worker0" not in started.stdout
        assert f"{far.url} ok — elsewhere (WORKER_URLS)" in s("status").stdout
        assert get(f"http://127.0.0.1:{s.port}/v1/models")[0] == 200
        assert s("stop").returncode == 0
        assert far.proc.poll() is None


def routed_bench_env(tmp_path: Path, driver: str, gpus: str, dp_size: str = "2"):
    """isolated_env with ROUTER=on, DP_SIZE=dp_size over `gpus`, and `driver` as nvidia-smi; yields it, then cleans
    up."""
    environments = isolated_env(tmp_path)
    env = next(environments)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(driver)
    smi.chmod(0o755)
    env.update(ROUTER="on", GPUS=gpus, DP_SIZE=dp_size, ROUTER_METRICS_PORT=str(harness.free_port()),
               PATH=f"{smi.parent}{os.pathsep}{env['PATH']}")
    yield env
    next(environments, None)


def test_a_small_benchmark_runs_behind_the_router_and_records_which_workers_served(tmp_path):
    environments = routed_bench_env(tmp_path, ONE_H200, "0,0")
    env = next(environments)
    try:
        proc = bench(env, "--quick", "--arms", "baseline", timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        final = json.loads(proc.stdout.strip().splitlines()[-1])
        assert final["points_ok"] == final["points_planned"] and final["points_failed"] == 0
        server = json.loads((Path(final["run_dir"]) / "servers" / "baseline.json").read_text())
        assert [(m["name"], m["gpus"]) for m in server["layout"]] == [("worker0", "0"), ("worker1", "0"),
                                                                      ("router", None)]
        assert server["server_info"]["load_format"] == "dummy"  # worker0's: the router has no /server_info of its own
    finally:
        next(environments, None)


def test_a_benchmark_behind_the_router_records_and_draws_each_workers_metrics_and_each_gpu(tmp_path):
    """DP=2 over two GPUs: the sampler scrapes both workers (the router serves no SGLang /metrics) and both GPUs
    (here nvidia-smi's, as without NVML), and the dashboard draws them and names the layout beside the arm."""
    environments = routed_bench_env(tmp_path, TWO_H200, "0,1")
    env = next(environments)
    try:
        proc = bench(env, "--quick", "--arms", "baseline", timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        run_dir = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    finally:
        next(environments, None)
    samples = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    running = {s["labels"].get("worker") for s in samples if s["name"] == "sglang:num_running_reqs"}
    assert running == {"worker0", "worker1"}
    assert {s["labels"]["gpu"] for s in samples if s["name"] == "gpu_mem_used_gb"} == {"0", "1"}
    made = subprocess.run([sys.executable, str(REPO / "make_dashboard.py"), str(run_dir)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert made.returncode == 0, made.stderr
    html = (run_dir / "dashboard.html").read_text()
    label = "Baseline (FlashInfer) [router → 2 workers, GPUs 0 | 1]"
    for name in (f"{label} · worker0", f"{label} · worker1", f"{label} · GPU 0", f"{label} · GPU 1"):
        assert json.dumps(name)[1:-1] in html, name  # a trace of the page's figures (JSON-escaped)
    dom, _ = render(run_dir / "dashboard.html", tmp_path / "profile")
    assert 'data-js-errors="0"' in dom and dom.count('class="main-svg"') >= html.count('class="plotly-graph-div"')


@pytest.mark.slow
def test_the_two_gpu_comparison_boots_each_arms_layout_and_pairs_them_at_one_load(tmp_path):
    """The benchmark tests/gpu/test_5_two_gpus_gpu.py names for a two-GPU host (ROUTER=on GPUS=0,1; arms baseline,
    tp2, dp2), small: each arm boots its own layout behind the router, records it, and the arms are compared with the
    one-GPU baseline, paired, at the same load."""
    environments = routed_bench_env(tmp_path, TWO_H200, "0,1", dp_size="1")
    env = next(environments)
    try:
        proc = bench(env, "--arms", "baseline", "--arm", "tp2=--tp-size 2", "--arm", "dp2=--dp-size 2",
                     "--workloads", "agent", "--patterns", "concurrency", "--concurrency", "4", "--repeat", "2",
                     "--duration-s", "1", timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        run_dir = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    finally:
        next(environments, None)
    layouts = {arm: [(m["name"], m["gpus"], m["tp_size"]) for m in
                     json.loads((run_dir / "servers" / f"{arm}.json").read_text())["layout"]]
               for arm in ("baseline", "tp2", "dp2")}
    assert layouts == {"baseline": [("worker0", "0", 1), ("router", None, None)],
                       "tp2": [("worker0", "0,1", 2), ("router", None, None)],
                       "dp2": [("worker0", "0", 1), ("worker1", "1", 1), ("router", None, None)]}
    made = subprocess.run([sys.executable, str(REPO / "make_dashboard.py"), str(run_dir)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert made.returncode == 0, made.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert sorted(r["arm"] for r in summary["paired"]) == ["dp2", "tp2"]  # each against the one GPU, same seeds
    assert all(r["load"] == "c=4" and r["output_throughput_pairs"] >= 1 for r in summary["paired"])
    html = (run_dir / "dashboard.html").read_text()
    for label in ("Baseline (FlashInfer) [router → 1 worker, GPUs 0]", "tp2 [router → 1 worker × TP 2, GPUs 0,1]",
                  "dp2 [router → 2 workers, GPUs 0 | 1]"):  # each arm named with its layout on the page
        assert json.dumps(label)[1:-1] in html, label
