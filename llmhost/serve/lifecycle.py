"""Start, stop and restart the server: the lifecycle as functions, called by `python -m llmhost.serve` (serve.sh)
and by the benchmark runner, which restarts the server with an arm's flags as data:

    from llmhost.serve import lifecycle
    info = lifecycle.restart(cfg, extra_args=["--page-size", "16"], settings={"CHUNKED_PREFILL_SIZE": "4096"})

Outcomes are distinct: a ReadyInfo (our process group serves a generation), ServerBusy (another start/stop/restart
of this WORK_DIR holds the lock, even after waiting busy_wait_s), StartFailed (the server did not come up: crash,
timeout, a stranger on the port; its log tail is shown), ServeError (a setting or the host is not fit to start).
Writes $WORK_DIR/server/ (see llmhost/serve/process.py and spec.py) and runs the server in tmux; stop() also
leaves a `stopped_by_user` mark (removed by the next launch), so a benchmark run can tell your stop from a crash.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmhost import files
from llmhost.config import REPO_ROOT, Config
from llmhost.serve import gcfreeze, gpu, parallel, process, router, service, tmux
from llmhost.serve.checks import check_launch, check_settings
from llmhost.serve.console import EXIT_INTERRUPTED, Console, ServeError
from llmhost.serve.lock import ServeLock
from llmhost.serve.procfs import group_pids, port_holder
from llmhost.serve.shared_prefix import plugin_dir, said
from llmhost.serve.readiness import readiness, wait_ready
from llmhost.serve import serverlog, startup
from llmhost.serve.spec import ServerSpec, build_spec, server_env, with_settings, write_launch_files

# The one busy-lock policy: every call waits up to busy_wait_s for another start/stop/restart of this WORK_DIR
# (a restart's stop + GPU release + launch take ~1-2 min), then raises ServerBusy. The CLI passes 0: exit 75 at
# once, as serve.sh always did, so a script can decide for itself.
BUSY_WAIT_S = 180.0
STOP_TIMEOUT_S = 60.0  # SIGTERM grace before SIGKILL: SGLang's scheduler processes exit within seconds
GPU_RELEASE_TIMEOUT_S = 120.0
USER_STOP_MARK = "stopped_by_user"  # in the state dir: unix time of the last ./serve.sh stop (stop() only)


class StartFailed(ServeError):
    """The server did not become ready (crashed, timed out, or a stranger holds the port)."""


class StoppedByUser(ServeError):
    """A restart refused because the user stopped the server (./serve.sh stop) after the caller began: the
    user's stop wins over a benchmark's wish to carry on. `when` is the stop's time (UTC)."""

    def __init__(self, when: str):
        super().__init__(f"the server was stopped with ./serve.sh stop at {when}")
        self.when = when


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while waiting: the server keeps starting in tmux. Still a KeyboardInterrupt, so a caller such as
    the benchmark runner stops instead of taking it for a failed start."""

    exit_code = EXIT_INTERRUPTED


@dataclasses.dataclass(frozen=True, slots=True)
class ReadyInfo:
    """Our server, ready: it served a generation."""

    pgid: int
    pid: int | None
    base_url: str
    launch_command: str
    started_at: str | None  # UTC, as the pane recorded it
    waited_s: float
    already_running: bool  # start found it ready and launched nothing
    layout: tuple[dict, ...] = ()  # which processes serve on which GPUs and ranks (llmhost.serve.service.layout)
    timeline: startup.Timeline | None = None  # where this start spent its time (None: joined, or no start time)


def running(cfg: Config) -> bool:
    """A server start launched is alive (ready or still starting)."""
    return process.recorded_group(cfg.state_dir) is not None


def start(cfg: Config, extra_args: Sequence[str] = (), settings: Mapping[str, str] | None = None, *,
          console: Console = Console(), busy_wait_s: float = BUSY_WAIT_S) -> ReadyInfo:
    """Launch (unless ours already runs or starts: then wait for it) and wait until ready.

    extra_args go after SERVER_EXTRA_ARGS; settings replace config values by name ({"SERVER_ENV": "..."})."""
    cfg = with_settings(cfg, settings or {})
    return _launch_then_wait(cfg, extra_args, console, busy_wait_s, restart=False)


def restart(cfg: Config, extra_args: Sequence[str] = (), settings: Mapping[str, str] | None = None, *,
            console: Console = Console(), busy_wait_s: float = BUSY_WAIT_S,
            unless_stopped_since: float | None = None) -> ReadyInfo:
    """Stop ours, wait for its GPU memory to be freed, start with these flags and settings, wait until ready.

    unless_stopped_since (unix s): StoppedByUser instead, when ./serve.sh stop ran after that instant; checked
    under the lock, so a stop that held the lock while this waited for it is seen."""
    cfg = with_settings(cfg, settings or {})
    return _launch_then_wait(cfg, extra_args, console, busy_wait_s, restart=True, stopped_since=unless_stopped_since)


def stopped_by_user(cfg: Config, since: float) -> str | None:
    """When (UTC) ./serve.sh stop last stopped the server, if that was after `since` (unix s); else None.
    The mark is written by stop() only, and removed by every launch."""
    try:
        stopped = float((cfg.state_dir / USER_STOP_MARK).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.strftime("%H:%M:%S UTC", time.gmtime(stopped)) if stopped > since else None


def stop(cfg: Config, *, console: Console = Console(), busy_wait_s: float = BUSY_WAIT_S) -> None:
    """Stop only what start launched (the recorded process group) and its tagged tmux session."""
    with ServeLock(cfg.state_dir) as lock:
        lock.acquire(busy_wait_s)
        # Marked before the first signal: whoever sees the server die can already tell it was on purpose.
        files.write_text_atomic(cfg.state_dir / USER_STOP_MARK, f"{time.time():.3f}\n")
        _stop_locked(cfg, console)


def _launch_then_wait(cfg: Config, extra_args: Sequence[str], console: Console, busy_wait_s: float,
                      restart: bool, stopped_since: float | None = None) -> ReadyInfo:
    check_settings(cfg)
    tmux.require()
    with ServeLock(cfg.state_dir) as lock:
        lock.acquire(busy_wait_s)
        when = None if stopped_since is None else stopped_by_user(cfg, stopped_since)
        if when:
            raise StoppedByUser(when)
        if restart:
            _release_gpu(_stop_locked(cfg, console), console)
        pgid, ready = _launch_or_join(cfg, extra_args, console)
    # The lock guards launching, not the wait: stop must be able to end a slow or hung start.
    return ready or _await_ready(cfg, pgid, console)


def _stop_locked(cfg: Config, console: Console) -> list[int]:
    """Stop ours; returns the PIDs it had (their GPU memory is freed after they exit)."""
    state = cfg.state_dir
    pgid = process.recorded_group(state)
    pids: list[int] = []
    if pgid:
        pids = group_pids(pgid)
        console.info(f"stopping the server (process group {pgid})")
        if not process.stop_group(pgid, STOP_TIMEOUT_S, console.warn):
            raise ServeError(f"process group {pgid} survived SIGKILL — check ps -g {pgid}")
    else:
        console.info("no server of ours is running")
        holder = port_holder(cfg.host, cfg.port)
        if holder:
            console.warn(f"port {cfg.port} is held by {holder}, which this serve.sh did not start — left alone; "
                         "stop it yourself")
    if tmux.is_ours(cfg.tmux_session, state):
        tmux.kill(cfg.tmux_session)
    process.clear_state(state)
    return pids


def _release_gpu(pids: list[int], console: Console) -> None:
    if not pids:
        return
    console.info(f"waiting for the GPU memory of pids {','.join(map(str, pids))} to be released")
    released, line = gpu.wait_released_line(pids, GPU_RELEASE_TIMEOUT_S)
    if not released:
        raise ServeError(line)
    console.info(line)


def _launch_or_join(cfg: Config, extra_args: Sequence[str], console: Console) -> tuple[int, ReadyInfo | None]:
    """(process group, ReadyInfo when ours is already ready); launches only when no server of ours runs."""
    state = cfg.state_dir
    pgid = process.recorded_group(state)
    if pgid is None:
        return _launch(cfg, extra_args, console), None
    running_port = process.recorded_port(state)
    if running_port is not None and running_port != cfg.port:
        raise ServeError(f"our server already runs on port {running_port} (process group {pgid}) — "
                         f"./serve.sh restart applies PORT={cfg.port}")
    if readiness(cfg, pgid)[0] != "ready":
        console.info(f"already starting (process group {pgid}) — waiting for it")
        return pgid, None
    pid = process.read_state(state).get("pid", "?")
    console.info(f"already running: pid {pid}, port {cfg.port}, tmux session {cfg.tmux_session} — ./serve.sh status "
                 "(restart applies changed settings)")
    return pgid, _ready_info(cfg, pgid, 0.0, already_running=True)


def _launch(cfg: Config, extra_args: Sequence[str], console: Console) -> int:
    """Check, record the command and environment, start the tmux pane; returns the pane's process group."""
    state, session = cfg.state_dir, cfg.tmux_session
    process.clear_state(state)
    (state / USER_STOP_MARK).unlink(missing_ok=True)  # a launch ends the user's stop
    if tmux.is_ours(session, state):
        console.warn(f"removing the leftover tmux session {session} (no server of ours runs in it)")
        tmux.kill(session)
    elif tmux.exists(session):
        raise ServeError(f"a tmux session named {session} exists and serve.sh did not start it — "
                         "set TMUX_SESSION=<another name>")
    spec, members = launch_plan(cfg, extra_args)
    check_launch(cfg)
    write_launch_files(spec, state, cfg.api_key())
    if cfg.shared_prefix_decode == "on":
        plugin_dir.write(state)
    (state / service.MEMBERS_FILE).unlink(missing_ok=True)
    if members:
        service.write_members(members, state)
    for note in spec.notes:
        console.note(note)
    for note in (f"{m.name}: {n}" for m in members[:-1] for n in m.spec.notes):  # the workers' (the router's above)
        console.note(note)
    for member in members:
        waits = [f"{', '.join(member.after)} answer HTTP"] if member.after else []
        waits += [f"{', '.join(member.after_pool)} holds its KV pool"] if member.after_pool else []
        console.info(f"launching {member.name}" + (f" once {' and '.join(waits)}" if waits else "")
                     + f": {member.spec.command_line}")
    if not members:
        console.info(f"launching: {spec.command_line}")
    log = state / "server.log"
    for name in ("server", *(m.name for m in members)):  # the previous run's logs are kept once
        if (state / f"{name}.log").exists():
            (state / f"{name}.log").replace(state / f"{name}.log.1")
    env, dropped = process.launch_environment(os.environ)
    process.write_launch_env(state, env)
    if dropped:
        console.info(f"not passed to the server (secret-looking names): {' '.join(dropped)}")
    pane = ["env", f"PYTHONPATH={REPO_ROOT}", sys.executable, "-m", "llmhost.serve", "_run", str(state)]
    tmux.new_session(session, pane, state, Path.cwd())
    deadline = time.monotonic() + 15
    while not process.read_state(state).get("pgid"):
        if time.monotonic() >= deadline:
            raise ServeError(f"the tmux session did not start the server — run tmux attach -t {session}")
        time.sleep(0.2)
    pgid = int(process.read_state(state)["pgid"])
    console.info(f"server in tmux session {session} (process group {pgid}); log: {log}")
    return pgid


def launch_plan(cfg: Config, extra_args: Sequence[str] = (), node_rank: int = 0
                ) -> tuple[ServerSpec, list[router.Member]]:
    """What start runs: the one server's spec, or with ROUTER=on the router's spec and every member in launch order."""
    free = gpu.free_total_mib(parallel.first_device(cfg)) if node_rank == 0 else None
    if not router.is_on(cfg):
        return build_spec(cfg, gpu_free_total_mib=free, extra_args=extra_args, node_rank=node_rank), []
    environ = {**os.environ, **dict(server_env(dataclasses.replace(cfg, gpus="")))}
    devices = parallel.visible_devices(cfg.gpus, environ, gpu.devices())
    members = router.members(cfg, devices, free, extra_args)
    return members[-1].spec, members


def _await_ready(cfg: Config, pgid: int, console: Console) -> ReadyInfo:
    """Wait for readiness; a server that failed is stopped (unless a stop or another start took over)."""
    log = cfg.state_dir / "server.log"
    started = time.monotonic()
    try:
        ok, detail = wait_ready(cfg, pgid, log, cfg.ready_timeout_s, say=console.info)
    except KeyboardInterrupt:
        raise Interrupted("interrupted — the server keeps starting in tmux; ./serve.sh start resumes waiting, "
                          "./serve.sh stop ends it") from None
    if ok:
        console.info(detail)
        members = [m["name"] for m in service.read_members(cfg.state_dir)]
        workers = [(cfg.state_dir / f"{name}.log", service.launched_at(cfg.state_dir, name)) for name in members
                   if name != "router"]  # ROUTER=on: each worker's own log, unprefixed, and its launch time
        timeline = startup.read_timeline(log, process.read_state(cfg.state_dir).get("started_at"), time.time(),
                                         workers, router="router" in members)
        if timeline and timeline.line():
            console.info(timeline.line())
        status, line = said.of_server(cfg)
        if cfg.shared_prefix_decode == "on" and line:  # whether the plugin took (one server: not with ROUTER=on)
            (console.warn if status == "failed" else console.info)(line)
        gcfreeze.freeze(cfg, console)
        return _ready_info(cfg, pgid, time.monotonic() - started, already_running=False, timeline=timeline)
    console.report(f"last lines of {log}:\n{serverlog.tail(log)}")
    _clean_up_failed_start(cfg, pgid, console)
    raise StartFailed(f"{detail} — see ./serve.sh logs, fix, then ./serve.sh start")


def _clean_up_failed_start(cfg: Config, pgid: int, console: Console) -> None:
    """Never leave a crashed or timed-out server holding the GPU; the log stays for ./serve.sh logs."""
    lock = ServeLock(cfg.state_dir)
    if not lock.try_acquire():
        return  # a stop or restart is already at it
    with lock:
        now = process.recorded_group(cfg.state_dir)
        if now is not None and now != pgid:
            return  # a server someone started meanwhile
        if now is not None:
            process.stop_group(pgid, 30, console.warn)
        process.clear_state(cfg.state_dir)


def _ready_info(cfg: Config, pgid: int, waited_s: float, already_running: bool,
                timeline: startup.Timeline | None = None) -> ReadyInfo:
    state = process.read_state(cfg.state_dir)
    try:
        command = (cfg.state_dir / "launch_command.txt").read_text().strip()
    except OSError:
        command = ""
    pid = state.get("pid", "")
    return ReadyInfo(pgid, int(pid) if pid.isdigit() else None, cfg.base_url, command, state.get("started_at"),
                     waited_s, already_running, tuple(service.layout(cfg.state_dir)), timeline)
