"""Run SGLang (Qwen3-4B, FlashInfer attention, prefix cache, chunked prefill, metrics) in tmux and manage it.

  ./serve.sh start            launch in tmux session $TMUX_SESSION, wait until OUR process serves a generation,
                              freeze its garbage collector (FREEZE_GC), send one test chat, print the laptop
                              tunnel command (idempotent)
  ./serve.sh stop             stop only what start launched (recorded process group, our tagged tmux session)
  ./serve.sh restart          stop, wait for the GPU memory of the old PIDs to be freed, start
  ./serve.sh status           health, model, KV pool, requests, cache hits, uptime, GPU memory (exit 1 = down);
                              with ROUTER=on the router's readiness and each worker's health, pid, GPUs, metrics
  ./serve.sh running          exit 0 when a server start launched is alive (ready or still starting), else 1
  ./serve.sh logs [-f] [-n N] [-m MEMBER]
                              the server log; with ROUTER=on every member's lines, [name]-prefixed, or one
                              member's own (-m worker0, -m router)
  ./serve.sh dashboard [stop] serve RESULTS_DIR on 127.0.0.1:$DASHBOARD_PORT
  ./serve.sh tunnel           print the ssh command for a laptop
  ./serve.sh print-command [--node-rank N]
                              the launch command start would run (no side effects); with NNODES > 1, the
                              command of host N (start runs node 0; run the others' on their hosts: for
                              N > 0 it writes the plugin folder that command's PYTHONPATH names)

Settings come from config.env (environment variables win), e.g.
  PORT=30001 TOKENIZER_WORKER_NUM=8 ./serve.sh start
Exit codes: 0 ok, 1 failed (one line says why), 2 usage, 75 another start/stop/restart holds the lock.
Writes $WORK_DIR/server/: launch_command.{txt,json} (exact command, no secret), server.log (+ .1 of the
previous run), pid, pgid, started_at, launch.env (0600), sglang_config.yaml (0600, only with API_KEY_FILE),
dashboard.{pid,log}; with ROUTER=on also members.json and each member's NAME.log (+ .1), NAME.pid and
NAME.launched.
(`python -m llmhost.serve` is the same CLI.)
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from llmhost import deps
from llmhost.config import Config, ConfigError, load
from llmhost.serve import dashboard, gpu, lifecycle, pane, parallel, status, tunnel
from llmhost.serve.checks import check_settings
from llmhost.serve.console import EXIT_FAILED, EXIT_INTERRUPTED, Console, ServeError, UsageError
from llmhost.serve.shared_prefix import plugin_dir


def cmd_start(cfg: Config, args: list[str], console: Console) -> int:
    lifecycle.start(cfg, console=console, busy_wait_s=0)
    return _chat_then_tunnel(cfg, console)


def cmd_restart(cfg: Config, args: list[str], console: Console) -> int:
    lifecycle.restart(cfg, console=console, busy_wait_s=0)
    return _chat_then_tunnel(cfg, console)


def _chat_then_tunnel(cfg: Config, console: Console) -> int:
    ok, line = status.test_chat(cfg, cfg.api_key())
    if not ok:
        raise ServeError(line)
    console.info(line)
    tunnel.print_tunnel(cfg, console)
    return 0


def cmd_stop(cfg: Config, args: list[str], console: Console) -> int:
    lifecycle.stop(cfg, console=console, busy_wait_s=0)
    return 0


def cmd_status(cfg: Config, args: list[str], console: Console) -> int:
    healthy, lines = status.status_lines(cfg, cfg.api_key())
    if not healthy:
        console.report(lines[0])
        return EXIT_FAILED
    print("\n".join(lines))
    return 0


def cmd_running(cfg: Config, args: list[str], console: Console) -> int:
    return 0 if lifecycle.running(cfg) else EXIT_FAILED


def cmd_logs(cfg: Config, args: list[str], console: Console) -> int:
    follow, lines, name = [], "100", "server"
    while args:
        option = args.pop(0)
        if option == "-f":
            follow = ["-F"]
        elif option == "-n":
            if not args or not args[0].isdigit():
                raise UsageError("logs -n needs a number of lines")
            lines = args.pop(0)
        elif option == "-m":
            if not args or not args[0].replace("_", "").isalnum():
                raise UsageError("logs -m needs a member name (worker0, router: ./serve.sh status lists them)")
            name = args.pop(0)
        else:
            raise UsageError(f"unknown logs option '{option}' — ./serve.sh logs [-f] [-n N] [-m MEMBER]")
    log = cfg.state_dir / f"{name}.log"
    if not log.is_file() and name != "server" and (cfg.state_dir / "server.log").is_file():
        raise UsageError(f"logs -m {name}: no such member (members: {member_names(cfg)})")
    if not log.is_file():
        raise ServeError(f"no server log at {log} — run ./serve.sh start")
    sys.stdout.flush()
    os.execvp("tail", ["tail", "-n", lines, *follow, str(log)])


def member_names(cfg: Config) -> str:
    """The members whose logs are there (none but the server itself without ROUTER=on)."""
    names = sorted(p.stem for p in cfg.state_dir.glob("*.log") if p.stem not in ("server", "dashboard"))
    return ", ".join(names) or "none without ROUTER=on: ./serve.sh logs shows the server's"


def cmd_dashboard(cfg: Config, args: list[str], console: Console) -> int:
    if args == ["stop"]:
        dashboard.stop(cfg, console)
        return 0
    if args:
        raise UsageError(f"unknown dashboard option '{args[0]}' — ./serve.sh dashboard [stop]")
    dashboard.start(cfg, console)
    tunnel.print_tunnel(cfg, console)
    return 0


def cmd_tunnel(cfg: Config, args: list[str], console: Console) -> int:
    tunnel.print_tunnel(cfg, console)
    return 0


def cmd_print_command(cfg: Config, args: list[str], console: Console) -> int:
    node_rank = 0
    if args:
        if len(args) != 2 or args[0] != "--node-rank" or not args[1].isdigit():
            raise UsageError("print-command takes only --node-rank N — ./serve.sh print-command [--node-rank N]")
        node_rank = int(args[1])
    parallel.check(cfg, node_rank)  # the other nodes' GPUs are not visible from here: start checks those
    spec, members = lifecycle.launch_plan(cfg, node_rank=node_rank)
    if node_rank > 0 and cfg.shared_prefix_decode == "on":
        # host N runs the printed command by hand: its PYTHONPATH names the plugin folder, so write it here (node 0's
        # start writes its own; a plain print-command changes nothing)
        plugin_dir.write(cfg.state_dir)
    for member in members or [None]:
        shown = member.spec if member else spec
        for note in shown.notes:
            console.note(f"{member.name}: {note}" if member else note)
        print(shown.command_line)
    return 0


CLIENT_PACKAGES = ("openai", "prometheus_client")
Command = Callable[[Config, list[str], Console], int]
# name -> (function, takes arguments, needs the client packages: openai, prometheus-client)
COMMANDS: dict[str, tuple[Command, bool, bool]] = {
    "start": (cmd_start, False, True), "stop": (cmd_stop, False, False), "restart": (cmd_restart, False, True),
    "status": (cmd_status, False, True), "running": (cmd_running, False, False), "logs": (cmd_logs, True, False),
    "dashboard": (cmd_dashboard, True, False), "tunnel": (cmd_tunnel, False, False),
    "print-command": (cmd_print_command, True, False),
}


def run(argv: list[str], console: Console) -> int:
    if not argv or not argv[0]:
        print(__doc__, file=sys.stderr)
        return 2
    name, args = argv[0], argv[1:]
    if name in ("-h", "--help", "help") or any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    if name == "_run" and len(args) == 1:  # the tmux pane: everything it needs is in the state directory
        return pane.run_pane(Path(args[0]))
    if name not in COMMANDS:
        raise UsageError(f"unknown command '{name}' — ./serve.sh --help")
    func, takes_args, needs_clients = COMMANDS[name]
    if args and not takes_args:
        raise UsageError(f"{name} takes no arguments — ./serve.sh --help")
    try:
        cfg = load()
    except (ConfigError, OSError) as exc:
        raise ServeError(str(exc)) from None
    check_settings(cfg)
    # the client packages are missing here: the one rule (llmhost.deps) picks the Python to run in instead
    other = deps.first_with(CLIENT_PACKAGES, cfg.sglang_python) if needs_clients and deps.missing(CLIENT_PACKAGES) \
        else None
    if other:
        sys.stdout.flush()
        os.execv(other, [other, "-m", "llmhost.serve", *argv])
    return func(cfg, list(args), console)


def main(argv: list[str] | None = None) -> int:
    console = Console()
    try:
        return run(sys.argv[1:] if argv is None else argv, console)
    except lifecycle.Interrupted as exc:
        console.report(str(exc))
        return exc.exit_code
    except ServeError as exc:
        console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.report("interrupted")
        return EXIT_INTERRUPTED
    except ImportError as exc:  # the host python3 runs this when neither .venv nor SGLANG_PYTHON exists
        if exc.name not in CLIENT_PACKAGES:
            raise
        console.error(f"{exc.name} is not importable in {sys.executable} — set SGLANG_PYTHON to the Python that "
                      "has sglang (./setup_host.sh installs it)")
        return EXIT_FAILED
    except BrokenPipeError:  # stdout closed early (| head): nothing left to say, and no noise at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:  # a state directory that cannot be written, a full disk: one line, not a traceback
        console.error(str(exc))
        return EXIT_FAILED
