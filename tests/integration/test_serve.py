"""serve.sh end to end with REAL tmux (a private socket) and the SGLang stand-in: readiness tied to our process,
idempotent start/stop, foreign port holders, crashes, the API key kept out of argv/logs/pane, dashboard, tunnel."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from llmhost.serve import metrics, procfs
from standin.harness import free_port

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "serve.sh"
STANDIN = REPO / "tests" / "standin"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed (tests/run_cpu.sh installs it)")


class Serve:
    """One isolated serve.sh setup: own WORK_DIR, ports, tmux session and tmux server socket."""

    def __init__(self, root: Path, **overrides: str):
        self.tmux_dir = Path(tempfile.mkdtemp(prefix="tmx", dir="/tmp"))  # short: tmux socket paths are limited
        model = root / "model"
        model.mkdir(parents=True, exist_ok=True)
        (model / "config.json").write_text("{}")
        self.work = root / "work"
        self.port = free_port(block=3)  # ROUTER=on tests put two workers after it
        self.env = {
            **os.environ, "TMUX_TMPDIR": str(self.tmux_dir), "WORK_DIR": str(self.work), "MODEL_DIR": str(model),
            "RESULTS_DIR": str(root / "results"), "SGLANG_PYTHON": sys.executable, "HOST": "127.0.0.1",
            "PORT": str(self.port), "DASHBOARD_PORT": str(free_port()), "TMUX_SESSION": f"t{os.getpid()}{self.port}",
            "SERVER_ENV": f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=1", "API_KEY_FILE": "", "READY_TIMEOUT_S": "60",
            "SERVER_EXTRA_ARGS": "", "TOKENIZER_WORKER_NUM": "auto", "MEM_FRACTION_STATIC": "auto",
            "LLMHOST_CONFIG": "", "SSH_CONNECTION": "203.0.113.9 50000 198.51.100.7 22",
        }
        self.env.pop("TMUX", None)
        self.env.update(overrides)
        self.state = self.work / "server"

    def __call__(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return subprocess.run([str(SERVE), *args], env=self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True, timeout=10)

    def pgid(self) -> int:
        return int((self.state / "pgid").read_text())

    def pane(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.env["TMUX_SESSION"]).stdout

    def cleanup(self) -> None:
        pgid = (self.state / "pgid").read_text().strip() if (self.state / "pgid").exists() else ""
        if (self.state / "dashboard.pid").exists():
            self("dashboard", "stop", timeout=30)
        if pgid:
            self("stop", timeout=90)
        if pgid and procfs.group_alive(int(pgid)):
            os.killpg(int(pgid), signal.SIGKILL)
        self.tmux("kill-server")
        shutil.rmtree(self.tmux_dir, ignore_errors=True)


@pytest.fixture
def serve(tmp_path):
    made: list[Serve] = []

    def make(**overrides: str) -> Serve:
        made.append(Serve(tmp_path / f"s{len(made)}", **overrides))
        return made[-1]

    yield make
    for s in made:
        s.cleanup()


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One server started by serve.sh, shared by the read-only checks below."""
    s = Serve(tmp_path_factory.mktemp("running"))
    result = s("start")
    yield s, result
    s.cleanup()


def get(url: str, api_key: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def write_key(path: Path, key: str) -> Path:
    """An API key file as API_KEY_FILE wants it: the key on its first line, mode 600."""
    path.write_text(key + "\n")
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------- a started server
def test_start_waits_for_a_generation_then_prints_a_test_reply_and_the_tunnel(running):
    s, result = running
    assert result.returncode == 0, result.stderr
    assert "ready after" in result.stdout and "a generation succeeded" in result.stdout
    assert "garbage collector frozen after start-up (FREEZE_GC=on, 1 server)" in result.stdout
    assert (s.state / "server.log").read_text().count("Freezing GC in Scheduler process") == 1  # once, when ready
    assert "test reply in " in result.stdout and "tokens):" in result.stdout
    timeline = next(line for line in result.stdout.splitlines() if "ready in " in line)
    assert all(f"{phase} " in timeline for phase in ("launcher", "scheduler start", "weights", "KV pool",
                                                     "prefill graphs", "decode graphs", "HTTP + tokenizer workers",
                                                     "first generation")), timeline
    log = (s.state / "server.log").read_text()  # config.env's CUDA graph lists reached the server's argv
    assert "num_tokens=[4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048]" \
        in log
    assert "bs=[1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256]" in log
    assert f"ssh -N -L {s.port}:127.0.0.1:{s.port}" in result.stdout and "@198.51.100.7" in result.stdout
    assert procfs.group_alive(s.pgid())
    owners = procfs.port_owners(s.port)
    assert owners and all(procfs.pgid_of(p) == s.pgid() for p in owners)


def test_second_start_says_already_running_and_launches_nothing(running):
    s, _ = running
    pgid = s.pgid()
    again = s("start")
    assert again.returncode == 0 and "already running" in again.stdout
    assert s.pgid() == pgid and "launching" not in again.stdout


def test_recorded_launch_command_is_exactly_what_runs(running):
    s, _ = running
    record = json.loads((s.state / "launch_command.json").read_text())
    pid = int((s.state / "pid").read_text())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert cmdline == record["argv"]
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    assert all(environ[k] == v for k, v in record["env"].items())
    assert (s.state / "launch_command.txt").read_text().strip() == record["command"]
    for feature in ("--attention-backend", "--enable-metrics", "--enable-cache-report",
                    "--enable-dynamic-batch-tokenizer"):  # TOKENIZER_WORKER_NUM=auto: four processes, batching
        assert feature in cmdline
    assert cmdline[cmdline.index("--tokenizer-worker-num") + 1] == "4"


def test_a_start_with_another_port_is_refused_and_the_running_server_kept(running):
    """It used to wait READY_TIMEOUT_S for the new port, then stop the healthy server on the old one."""
    s, _ = running
    pgid = s.pgid()
    other = subprocess.run([str(SERVE), "start"], env={**s.env, "PORT": str(free_port())}, cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and f"already runs on port {s.port}" in other.stderr and "restart" in other.stderr
    assert procfs.group_alive(pgid) and s("status").returncode == 0


def test_status_reports_the_live_metrics(running):
    s, _ = running
    status = s("status")
    assert status.returncode == 0, status.stderr
    _, body = get(f"http://127.0.0.1:{s.port}/metrics")
    live = metrics.parse(body)
    pool = metrics.value(live, "sglang:max_total_num_tokens")
    assert f"KV pool      : {pool:,.0f} tokens" in status.stdout
    assert "served model : qwen3-4b" in status.stdout
    assert f"group {s.pgid()} (ours)" in status.stdout and "uptime" in status.stdout
    assert "GPU memory" in status.stdout


def test_logs_show_the_server_output_and_print_command_has_no_side_effects(running, tmp_path):
    s, _ = running
    logs = s("logs", "-n", "500")
    assert logs.returncode == 0 and "POST /generate HTTP/1.1\" 200" in logs.stdout  # the readiness probe
    fresh = Serve(tmp_path)
    shown = fresh("print-command")
    assert shown.returncode == 0 and "sglang.launch_server" in shown.stdout
    assert not fresh.work.exists()


# ---------------------------------------------------------------- refusing what is not ours
def test_a_foreign_listener_on_the_port_is_named_and_start_fails(serve):
    s = serve()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", s.port))
        sock.listen()
        result = s("start")
    assert result.returncode == 1
    assert f"port {s.port} is held by pid {os.getpid()}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (s.state / "pgid").exists()


def test_a_stale_server_started_outside_serve_sh_is_refused_never_ready(serve):
    from standin.harness import launch

    s = serve()
    with launch(s.port, "--served-model-name", "qwen3-4b", "--enable-metrics") as stale:
        result = s("start")
        status = s("status")
        stop = s("stop")
        assert stale.proc.poll() is None  # left alone by start and stop
    assert result.returncode == 1 and "ready" not in result.stdout
    assert f"pid {stale.proc.pid} (" in result.stderr and "sglang.launch_server" in result.stderr
    assert f"NOT started by this serve.sh — pid {stale.proc.pid} (" in status.stdout
    assert stop.returncode == 0 and "did not start — left alone" in stop.stderr


def test_a_crash_during_start_fails_with_the_log_tail(serve):
    s = serve(SERVER_ENV=f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=20 STANDIN_CRASH_AFTER_S=1")
    result = s("start")
    assert result.returncode == 1
    assert "exited" in result.stderr and "Traceback" in result.stderr
    assert "ready after" not in result.stdout
    assert not (s.state / "pgid").exists()


def test_ready_timeout_fails_and_stops_the_half_started_server(serve):
    s = serve(SERVER_ENV=f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=60", READY_TIMEOUT_S="3")
    result = s("start")
    assert result.returncode == 1 and "READY_TIMEOUT_S" in result.stderr
    assert procfs.port_owners(s.port) == []


# ---------------------------------------------------------------- stop and restart
def test_restart_then_stop_end_only_our_process_groups_and_tmux_session(serve):
    from standin.harness import launch

    s = serve()
    assert s("start").returncode == 0
    old = s.pgid()
    restarted = s("restart")
    assert restarted.returncode == 0, restarted.stderr
    assert "ready after" in restarted.stdout and s.pgid() != old and not procfs.group_alive(old)
    assert (s.state / "server.log.1").exists()  # the previous run's log is kept once
    pgid = s.pgid()
    with launch(free_port(), "--served-model-name", "qwen3-4b") as lookalike:  # same command line name, not ours
        stopped = s("stop")
        assert stopped.returncode == 0
        assert not procfs.group_alive(pgid)
        assert s.tmux("has-session", "-t", s.env["TMUX_SESSION"]).returncode != 0
        assert lookalike.proc.poll() is None
    again = s("stop")
    assert again.returncode == 0 and "no server of ours" in again.stdout
    down = s("status")
    assert down.returncode == 1 and len(down.stderr.strip().splitlines()) == 1


def test_a_users_own_tmux_session_of_that_name_is_never_killed(serve):
    """TMUX_SESSION names ours only when start tagged it: stop leaves a same-named session of the user alone,
    start refuses to take the name in one line."""
    s = serve()
    assert s.tmux("new-session", "-d", "-s", s.env["TMUX_SESSION"], "sleep", "300").returncode == 0
    assert s("stop").returncode == 0
    assert s.tmux("has-session", "-t", s.env["TMUX_SESSION"]).returncode == 0
    refused = s("start")
    assert refused.returncode == 1 and "TMUX_SESSION=<another name>" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (s.state / "pgid").exists()
    assert s.tmux("has-session", "-t", s.env["TMUX_SESSION"]).returncode == 0


def test_two_starts_at_once_run_one_server_and_keep_its_log(serve):
    s = serve(SERVER_ENV=f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=3")
    procs = [subprocess.Popen([str(SERVE), "start"], env=s.env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(90), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    # the loser either met the lock while the winner launched (75 = EX_TEMPFAIL: busy, try again) or came after
    # it and waited for the same server (0, "already starting"); never a second launch
    assert codes in ([0, 0], [0, 75]), results
    assert all("another ./serve.sh start/stop/restart is running" in err for code, err in results if code == 75)
    assert "Uvicorn running" in (s.state / "server.log").read_text()
    assert s("status").returncode == 0 and not (s.state / "server.log.1").exists()  # one launch only


def test_stop_ends_a_start_that_is_still_waiting(serve):
    """The lock covers launching, not the wait: a hung start must not make stop answer "busy"."""
    s = serve(SERVER_ENV=f"PYTHONPATH={STANDIN} STANDIN_STARTUP_S=30", READY_TIMEOUT_S="60")
    start = subprocess.Popen([str(SERVE), "start"], env=s.env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (s.state / "pgid").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    pgid = s.pgid()
    stopped = s("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not procfs.group_alive(pgid)
    assert start.wait(60) == 1 and "exited" in start.stderr.read()


def test_the_server_gets_this_shells_environment_not_the_tmux_servers(serve):
    """A tmux server started earlier keeps its own environment; start must not hand that to SGLang."""
    s = serve()
    tmux_env = {**s.env, "LLMHOST_PROBE": "from-an-old-tmux-server"}
    subprocess.run(["tmux", "new-session", "-d", "-s", "older", "sleep", "300"], env=tmux_env, check=True, timeout=10)
    s.env.update(LLMHOST_PROBE="from-this-shell", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                 HF_TOKEN="hf_secret_value")
    assert s("start").returncode == 0
    pid = int((s.state / "pid").read_text())
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
                   if "=" in item)
    assert environ["LLMHOST_PROBE"] == "from-this-shell"
    assert environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "HF_TOKEN" not in environ and "hf_secret_value" not in (s.state / "launch.env").read_text()
    assert (s.state / "launch.env").stat().st_mode & 0o077 == 0


def test_a_shell_that_forbids_bytecode_gives_the_server_the_bytecode_cache(serve):
    """PYTHONDONTWRITEBYTECODE=1 (many container images): the server's Python still keeps its bytecode, in
    BYTECODE_CACHE, so the next start does not compile its packages again."""
    s = serve(PYTHONDONTWRITEBYTECODE="1")
    s.env.pop("BYTECODE_CACHE", None)  # config.env's default: under WORK_DIR
    assert s("start").returncode == 0
    pid = int((s.state / "pid").read_text())
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
                   if "=" in item)
    cache = s.work / "bytecode-cache"
    assert environ["PYTHONDONTWRITEBYTECODE"] == "" and environ["PYTHONPYCACHEPREFIX"] == str(cache)
    assert list(cache.rglob("sglang/**/*.pyc"))  # the stand-in's own package, imported by the server


def test_shared_prefix_decode_puts_its_plugin_where_sglang_loads_it_and_start_says_what_came_of_it(serve):
    """SHARED_PREFIX_DECODE=on (the default): the server's Python finds the plugin through PYTHONPATH and runs it as
    SGLang runs plugins; the stand-in has no FlashInfer, so the plugin says it is off, as on a host without it, SGLang
    serves on, and start passes the plugin's line on (a note, not a warning: SGLang's own decode is what on falls
    back to)."""
    s = serve()
    proc = s("start")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (s.state / "server.log").read_text()
    assert log.count("Executed general plugin: llmhost_shared_prefix_decode") == 2  # the launcher and the scheduler
    assert "shared-prefix decode: off, FlashInfer is not importable here" in log
    assert ("SHARED_PREFIX_DECODE=on, but the server says: shared-prefix decode: off, FlashInfer is not importable "
            "here") in proc.stdout + proc.stderr
    # no warning of ours (the progress line may quote a library's warnings.warn from the server log)
    assert "[serve] warning" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    launch = json.loads((s.state / "launch_command.json").read_text())
    assert launch["env"]["PYTHONPATH"].split(os.pathsep)[:2] == [str(s.state / "sglang-plugins"), str(REPO)]
    off = serve(SHARED_PREFIX_DECODE="off")
    assert off("start").returncode == 0
    assert "general plugin" not in (off.state / "server.log").read_text()


# ---------------------------------------------------------------- the API key
def test_api_key_works_end_to_end_and_never_leaks(serve, tmp_path):
    key = "sk-test-7c1f9d2a"
    s = serve(API_KEY_FILE=str(write_key(tmp_path / "key", key)))
    result = s("start")
    assert result.returncode == 0, result.stderr
    assert "test reply in" in result.stdout and "garbage collector frozen" in result.stdout  # /freeze_gc is keyed
    url = f"http://127.0.0.1:{s.port}/v1/models"
    assert get(url)[0] == 401 and get(url, key)[0] == 200
    assert s("status").returncode == 0
    leaks = [p for p in s.work.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    assert leaks == [s.state / "sglang_config.yaml"]
    assert (s.state / "sglang_config.yaml").stat().st_mode & 0o777 == 0o600
    assert key not in s.pane() and "sglang.launch_server" in (s.state / "launch_command.txt").read_text()
    assert key not in result.stdout + result.stderr
    pid = int((s.state / "pid").read_text())
    assert key not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert "--config" in (s.state / "launch_command.txt").read_text()


# ---------------------------------------------------------------- dashboard and tunnel
def test_dashboard_serves_results_on_loopback_only(serve):
    s = serve()
    results = Path(s.env["RESULTS_DIR"])
    results.mkdir(parents=True)
    (results / "index.html").write_text("<h1>dash</h1>")
    port = int(s.env["DASHBOARD_PORT"])
    started = s("dashboard")
    assert started.returncode == 0, started.stderr
    assert f"http://127.0.0.1:{port}/" in started.stdout and f"-L {port}:127.0.0.1:{port}" in started.stdout
    assert get(f"http://127.0.0.1:{port}/index.html") == (200, "<h1>dash</h1>")
    local = [ln.split()[1] for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]
             if ln.split()[3] == "0A" and int(ln.split()[1].split(":")[1], 16) == port]
    assert local == [f"0100007F:{port:04X}"]  # 127.0.0.1, not 0.0.0.0
    again = s("dashboard")
    assert again.returncode == 0 and f"(pid {(s.state / 'dashboard.pid').read_text().strip()};" in again.stdout
    assert s("dashboard", "stop").returncode == 0
    assert procfs.port_owners(port) == []


def test_tunnel_uses_the_address_the_user_connected_to_and_warns_off_loopback(serve):
    s = serve()
    out = s("tunnel")
    assert out.returncode == 0 and "198.51.100.7" in out.stdout and "warning" not in out.stderr
    wide = serve(HOST="0.0.0.0")("tunnel")
    assert "HOST=0.0.0.0" in wide.stderr and "ssh -N -L" in wide.stdout
    nat = serve(SSH_CONNECTION="203.0.113.9 50000 172.31.5.20 2222")
    out = nat("tunnel")
    assert "ssh -p 2222 -N -L" in out.stdout and "@172.31.5.20" in out.stdout
    assert "private address" in out.stderr
    v6_serve = serve(HOST="::1")
    v6, port = v6_serve("tunnel"), v6_serve.port
    assert f"-L {port}:[::1]:{port}" in v6.stdout and "warning" not in v6.stderr


def test_usage_errors_are_one_line_with_exit_2_and_help_works(serve):
    s = serve()
    assert s("--help").returncode == 0 and "print-command" in s("--help").stdout
    bogus = s("bogus")
    assert bogus.returncode == 2 and bogus.stderr.count("\n") == 1 and "unknown command 'bogus'" in bogus.stderr
    assert s("").returncode == 2 and s("logs", "-n", "x").returncode == 2 and s("stop", "now").returncode == 2
    missing = s("logs")
    assert missing.returncode == 1 and "./serve.sh start" in missing.stderr


def test_bad_settings_end_in_one_line_naming_what_to_change(serve, tmp_path):
    flagged = serve(SERVER_EXTRA_ARGS="--port 1")("print-command")
    assert flagged.returncode == 1 and flagged.stderr.strip().endswith("set PORT instead")
    assert flagged.stderr.count("\n") == 1
    no_model = serve(MODEL_DIR=str(tmp_path / "nowhere"))("start")
    assert no_model.returncode == 1 and "MODEL_DIR=" in no_model.stderr and "setup_host.sh" in no_model.stderr
    assert no_model.stderr.count("\n") == 1 and "Traceback" not in no_model.stderr


def test_dashboard_ignores_a_recorded_pid_that_now_belongs_to_another_process(serve):
    s = serve()
    s.state.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group leader that is not our dashboard
    try:
        (s.state / "dashboard.pid").write_text(f"{other.pid}\n")
        started = s("dashboard")
        port = int(s.env["DASHBOARD_PORT"])
        assert started.returncode == 0 and started.stderr == ""
        owners = procfs.port_owners(port)
        assert owners and other.pid not in owners  # a real dashboard started instead of trusting the number
        assert s("dashboard", "stop").returncode == 0 and procfs.port_owners(port) == []
        assert other.poll() is None  # the other process group was left alone
        (s.state / "dashboard.pid").write_text(f"{other.pid}\n")
        assert "no dashboard of ours" in s("dashboard", "stop").stdout and other.poll() is None
    finally:
        other.kill()
        other.wait()
