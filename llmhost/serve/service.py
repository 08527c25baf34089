"""Several processes as one service in the tmux pane (ROUTER=on: local workers, then the router): the members file
start writes, and the pane body that runs it.

All members run in the pane's process group, so `stop` ends them together, as it ends the one server; when one exits
the pane ends the others (a router without workers, or a worker without its router, is not the service start
promised). A member launches once every member in its `after` answers HTTP and every one in its `after_pool` has
logged SGLang's "Memory pool end" (its KV pool allocated) or answers; each is asked until it first does (Waits).

Writes in the state directory: members.json (start: name, command, port, after, after_pool, and pool_mib for a
worker that shares its GPU with workers launched before it: its fraction is re-fit to the memory free at its launch,
refit_member) and launch_command.txt (their command lines as planned), then from the pane pgid (first:
start waits for it), <name>.pid, <name>.launched (the Unix time of its launch: a worker that waited for others
starts its own start-up there), <name>.log (that member's output), server.log (every member's lines, prefixed [name]),
pid (the router's: what clients reach), and a closing line naming who exited with what code.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from llmhost.files import write_text_atomic
from llmhost.serve import gpu, serverlog
from llmhost.serve.endpoints import ServerClient
from llmhost.serve.process import read_launch_env
from llmhost.serve.router import Member
from llmhost.serve.spec import gpu_reserve_mib
from llmhost.serve.startup import KV_POOL_LINE

MEMBERS_FILE = "members.json"
FRACTION_FLAG = "--mem-fraction-static"


def write_members(members: Sequence[Member], state_dir: Path) -> None:
    """members.json for the pane, and every member's exact command in launch_command.txt, one a line."""
    records = [{"name": m.name, "command": m.spec.command, "port": m.port, "after": list(m.after),
                "after_pool": list(m.after_pool),
                **({"pool_mib": m.pool_mib} if m.pool_mib else {})} for m in members]
    write_text_atomic(state_dir / MEMBERS_FILE, json.dumps(records, indent=2) + "\n")
    write_text_atomic(state_dir / "launch_command.txt", "".join(m.spec.command_line + "\n" for m in members))


def read_members(state_dir: Path) -> list[dict]:
    """The members start recorded ([] for one plain server)."""
    try:
        return json.loads((state_dir / MEMBERS_FILE).read_text())
    except (OSError, ValueError):
        return []


def launched_at(state_dir: Path, name: str) -> float | None:
    """When the pane launched that member (Unix time); None when it was not launched or the stamp cannot be read."""
    try:
        return float((state_dir / f"{name}.launched").read_text())
    except (OSError, ValueError):
        return None


def command_env(command: Sequence[str]) -> dict[str, str]:
    """The KEY=VALUE pairs of a recorded `env K=V ... argv` command."""
    pairs = {}
    for item in command[1:] if command[:1] == ["env"] else ():
        key, sep, value = item.partition("=")
        if not sep or not key.replace("_", "a").isalnum():
            break
        pairs[key] = value
    return pairs


def layout(state_dir: Path) -> list[dict]:
    """Which processes served and where, from what start recorded: per member its name, port, GPUs
    (CUDA_VISIBLE_DEVICES, '' = all visible; None for the router) and TP/DP sizes; [] when nothing is recorded."""
    members = read_members(state_dir)
    if not members:
        try:
            record = json.loads((state_dir / "launch_command.json").read_text())
            argv = record["argv"]
            members = [{"name": "server", "port": int(argv[argv.index("--port") + 1]),
                        "command": ["env", *(f"{k}={v}" for k, v in record["env"].items()), *argv]}]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []
    out = []
    for member in members:
        command = member["command"]
        if member["name"] == "router":
            out.append({"name": "router", "port": member["port"], "gpus": None, "tp_size": None, "dp_size": None})
            continue
        size = {flag: int(command[command.index(flag) + 1]) if flag in command else 1
                for flag in ("--tp-size", "--dp-size")}
        out.append({"name": member["name"], "port": member["port"],
                    "gpus": command_env(command).get("CUDA_VISIBLE_DEVICES", ""),
                    "tp_size": size["--tp-size"], "dp_size": size["--dp-size"]})
    return out


def _prefixed(write: Callable[[bytes], None], name: str) -> Callable[[bytes], None]:
    tag = f"[{name}] ".encode()
    return lambda data: write(b"".join(tag + line for line in data.splitlines(keepends=True)))


def _answers(port: int) -> bool:
    """Whether the server on that loopback port answers HTTP at all: SGLang starts its HTTP server once its KV pool and
    CUDA graphs are done, and /model_info needs no generation (with a key it says 401: up all the same)."""
    return ServerClient(f"http://127.0.0.1:{port}").get("/model_info").status != 0  # 0: refused, reset, timeout


def _logged_pool(state_dir: Path, name: str) -> bool:
    """Whether that worker's log has SGLang's line for its KV pool allocated (start moved older runs' logs aside)."""
    try:
        with open(state_dir / f"{name}.log", "rb") as log:
            return KV_POOL_LINE.encode() in log.read()
    except OSError:
        return False


def _launch(member: dict, state_dir: Path, env: dict[str, str], sinks: list, secrets: list) -> subprocess.Popen:
    proc = subprocess.Popen(member["command"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    write_text_atomic(state_dir / f"{member['name']}.pid", f"{proc.pid}\n")
    write_text_atomic(state_dir / f"{member['name']}.launched", f"{time.time():.3f}\n")
    log = open(state_dir / f"{member['name']}.log", "ab")  # closed by the copier thread at EOF

    def copy() -> None:
        with log:
            own = [lambda data: (log.write(data), log.flush()), *(_prefixed(s, member["name"]) for s in sinks)]
            serverlog.copy_output(lambda n: os.read(proc.stdout.fileno(), n), own, secrets)
    threading.Thread(target=copy, daemon=True).start()
    return proc


def _first_exit(running: dict[str, subprocess.Popen]) -> tuple[str, int] | None:
    """(name, code) of a member that exited, or None while all run."""
    for name, proc in running.items():
        if proc.poll() is not None:
            code = proc.returncode
            return name, code if code >= 0 else 128 - code
    return None


def refit_fraction(command: list[str], pool_mib: float, free_mib: float, total_mib: float,
                   ) -> tuple[list[str], float, float]:
    """The command with --mem-fraction-static set to pool_mib / free_mib (SGLang applies it to the memory free at its
    start), never leaving less than SGLang's runtime reserve free: (command, planned fraction, fraction now)."""
    i = command.index(FRACTION_FLAG) + 1
    now = round(min(pool_mib, free_mib - gpu_reserve_mib(total_mib)) / free_mib, 3)
    return [*command[:i], str(now), *command[i + 1:]], float(command[i]), now


def refit_member(member: dict, sinks: list) -> dict:
    """A worker that shares its GPU with workers launched before it, its fraction re-fit to the memory free now:
    start planned it as if each held its static pool plus SGLang's whole runtime reserve, and a worker holds less
    (on an H200, two workers planned 0.403 and 0.806 got KV pools of 352,876 and 415,389 tokens). It launches once
    the one before it holds its pool, which may still be capturing graphs: what this one's pool leaves free (free
    now less that pool) holds that one's reserve too, and what that one takes later only shrinks what SGLang finds
    free when it sizes this one's pool. Kept as planned when the GPU's memory cannot be read."""
    devices = command_env(member["command"]).get("CUDA_VISIBLE_DEVICES", "")
    first = devices.split(",")[0].strip()
    free_total = gpu.free_total_mib(int(first)) if first.isdigit() else None
    if free_total is None or FRACTION_FLAG not in member["command"] or free_total[0] <= gpu_reserve_mib(
            free_total[1]):
        return member  # no room to re-fit into: as planned, and SGLang says what does not fit
    command, planned, now = refit_fraction(member["command"], member["pool_mib"], *free_total)
    serverlog.emit(f"[serve] {member['name']}: {FRACTION_FLAG} {planned:g} -> {now:g}, its "
                   f"{member['pool_mib'] / 1024:.1f} GiB static pool of the {free_total[0] / 1024:.1f} GiB free on "
                   f"GPU {first} now\n".encode(), sinks)
    return {**member, "command": command}


class Waits:
    """Whether the members a launch waits for are there, each asked until it first says yes and never again: a
    member that exits after that ends the service anyway, and asking again only slows every later launch."""

    def __init__(self, state_dir: Path):
        self.state_dir, self.answering, self.pooled = state_dir, set(), set()

    def answers(self, port: int) -> bool:
        if port not in self.answering and _answers(port):
            self.answering.add(port)
        return port in self.answering

    def holds_pool(self, name: str, port: int) -> bool:
        """SGLang logged its KV pool, or it answers HTTP (a version that logs the pool otherwise)."""
        if name not in self.pooled and (_logged_pool(self.state_dir, name) or self.answers(port)):
            self.pooled.add(name)
        return name in self.pooled

    def met(self, member: dict, members: Sequence[dict]) -> bool:
        """Every member in `member`'s after_pool holds its KV pool, and every one in its after answers HTTP."""
        return (all(self.holds_pool(m["name"], m["port"]) for m in members if m["name"] in member.get("after_pool", ()))
                and all(self.answers(m["port"]) for m in members if m["name"] in member["after"]))


def run_service(state_dir: Path, secrets: list[bytes], sinks: list) -> int:
    """Launch the members in order, each once those it waits for are there; end them all when one exits."""
    env = read_launch_env(state_dir)
    running: dict[str, subprocess.Popen] = {}
    exited = None
    members = read_members(state_dir)
    waits = Waits(state_dir)
    for member in members:
        while exited is None and not waits.met(member, members):
            exited = _first_exit(running)
            time.sleep(0.5)
        if exited:
            break
        if member.get("pool_mib"):
            member = refit_member(member, sinks)
        running[member["name"]] = _launch(member, state_dir, env, sinks, secrets)
        if member["name"] == "router":
            write_text_atomic(state_dir / "pid", f"{running['router'].pid}\n")
    while exited is None:
        exited = _first_exit(running)
        time.sleep(0.5)
    name, code = exited
    for proc in running.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in running.values():
        proc.wait()
    serverlog.emit(f"[serve] {name} exited with code {code}; the service is stopped\n".encode(), sinks)
    return code or 1  # a member that exited 0 still ended the service: not a success


def pane_sinks(log_file) -> list:
    """The pane's terminal and server.log."""
    def to_log(data: bytes) -> None:
        log_file.write(data)
        log_file.flush()
    return [serverlog.fd_writer(sys.stdout.fileno()), to_log]
