"""The SGLang server's lifecycle: launch spec, HTTP probes, port ownership, readiness.

serve.sh drives it (stdlib only, so the host's python3 runs it before any venv exists); run_bench.py reuses
`build_spec` to launch its arms the same way.

    python3 -m llmhost.serve.server print-command     # the launch command ./serve.sh start would run (no side effects)
    python3 -m llmhost.serve.server argv              # the same, NUL-separated, for bash
    python3 -m llmhost.serve.server prepare           # write $WORK_DIR/server/launch_command.{txt,json} (+ 0600 key YAML)
    python3 -m llmhost.serve.server wait-ready --pgid N   # poll until OUR process group serves a generation
Who holds a port and process groups: llmhost/serve/procfs.py; status and the test reply: llmhost/serve/status.py; the log
(key redaction, tail): llmhost/serve/serverlog.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from llmhost.serve import serverlog
from llmhost.config import Config, ConfigError, load
from llmhost.serve.procfs import group_alive, listeners, pgid_of, port_holder


# ---------------------------------------------------------------- HTTP probes (stdlib, no client SDK)
def base_url(target: Config | str) -> str:
    """http://host:port of a Config (0.0.0.0 -> 127.0.0.1) or a URL given as is."""
    return target.base_url if isinstance(target, Config) else str(target).rstrip("/")


def _request(
    target: Config | str, path: str, method: str, body: bytes | None, timeout: float, api_key: str | None
) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base_url(target) + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:  # refused, reset, timeout: no HTTP answer at all
        reason = getattr(exc, "reason", exc)
        return 0, f"{type(reason).__name__}: {reason}"


def http_get(
    target: Config | str, path: str, timeout: float = 5.0, api_key: str | None = None
) -> tuple[int, str]:
    """GET path -> (HTTP status, body text). Status 0 means no HTTP answer; the body then says why."""
    return _request(target, path, "GET", None, timeout, api_key)


def http_post(
    target: Config | str, path: str, payload: object = None, timeout: float = 30.0, api_key: str | None = None
) -> tuple[int, str]:
    """POST a JSON payload (or nothing) -> (HTTP status, body text); status 0 = no HTTP answer."""
    body = b"" if payload is None else json.dumps(payload).encode()
    return _request(target, path, "POST", body, timeout, api_key)


def flush_cache(
    target: Config | str, api_key: str | None = None, wait_s: float = 30.0, timeout: float = 10.0
) -> bool:
    """Empty SGLang's prefix (radix) cache; True once flushed.

    SGLang 0.5.17 answers 400 "Flush cache failed." while any request is running or queued, so this retries
    every 0.5 s for up to wait_s (in-flight requests of a previous benchmark point drain first).
    """
    deadline = time.monotonic() + wait_s
    while True:
        status, _ = http_post(target, "/flush_cache", None, timeout, api_key)
        if status == 200:
            return True
        if status not in (400, 0) or time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


# ---------------------------------------------------------------- launch spec
class SpecError(ValueError):
    """A setting the launch command cannot be built from; the message is one line naming it."""


@dataclasses.dataclass(frozen=True, slots=True)
class ServerSpec:
    """Exactly what start executes: `env K=V ... argv...` (the API key only inside config_file)."""

    argv: tuple[str, ...]  # python -m sglang.launch_server --flag value ...
    env: tuple[tuple[str, str], ...]  # additions to the inherited environment
    config_file: str | None  # 0600 YAML with `api-key`, passed by --config; None without a key
    notes: tuple[str, ...]  # choices worth telling the user (adapted defaults, replaced flags)

    @property
    def command(self) -> list[str]:
        """The full argv that is exec'd: env additions first, via env(1), so the recorded line is runnable."""
        return ["env", *(f"{k}={v}" for k, v in self.env), *self.argv]

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)


# Flags with a setting of their own: set the setting instead, so serve.sh's port checks, status and the
# recorded command agree with what runs. --api-key/--config would put or move the key on the command line.
SETTING_FLAGS = {
    "--model-path": "MODEL_DIR", "--model": "MODEL_DIR", "--served-model-name": "SERVED_MODEL_NAME",
    "--load-format": "LOAD_FORMAT", "--host": "HOST", "--port": "PORT",
    "--tokenizer-worker-num": "TOKENIZER_WORKER_NUM", "--mem-fraction-static": "MEM_FRACTION_STATIC",
    "--chunked-prefill-size": "CHUNKED_PREFILL_SIZE", "--tool-call-parser": "TOOL_CALL_PARSER",
    "--reasoning-parser": "REASONING_PARSER", "--api-key": "API_KEY_FILE", "--config": "API_KEY_FILE",
}
CONFIG_FILE_NAME = "sglang_config.yaml"
# SGLang reserves ~10 GiB beside its static pool on GPUs > 60 GiB (activations, CUDA graphs); smaller: ~4 GiB.
_RESERVE_SHARE, _RESERVE_MIN_MIB = 0.097, 4 * 1024  # SGLang's auto fraction on an H200 is 0.903: 9.7% left free
_MIN_USABLE_MIB = 2 * 1024  # below this, weights + a KV pool cannot fit: refuse instead of crashing after a minute


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2 CPU quota: "QUOTA PERIOD" or "max PERIOD"


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup v2 CPU quota (containers), not the host's."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cpus


def tokenizer_workers(setting: str, cpu_count: int) -> int:
    """auto = min(8, cores // 2), at least 1.

    Measured on an H200 (16 x 4k-token shared prompts, 64 concurrent): one tokenizer process was the
    bottleneck; 8 cut TTFT p99 from 2.37 s to 0.54 s and raised throughput 44%. Half the cores leaves the rest
    to the scheduler, detokenizer and the load generator on the same host.
    """
    if setting == "auto":
        return max(1, min(8, cpu_count // 2))
    if not setting.isdigit() or int(setting) < 1:
        raise SpecError(f"TOKENIZER_WORKER_NUM={setting!r} must be auto or a positive integer")
    return int(setting)


def gpu_reserve_mib(total_mib: float) -> float:
    """Memory SGLang keeps outside its static pool (activations, CUDA graphs): 9.7% of the GPU, at least 4 GiB."""
    return max(_RESERVE_MIN_MIB, _RESERVE_SHARE * total_mib)


def mem_fraction(setting: str, gpu_free_total_mib: tuple[float, float] | None) -> tuple[float | None, str]:
    """--mem-fraction-static value (None = let SGLang size it) and a note when it was adapted.

    SGLang applies the fraction to the memory FREE when it starts (its KV budget is free-after-weights minus
    free-at-start x (1 - fraction)), so on a GPU others already use, its default keeps the same share but a smaller
    runtime reserve. auto then sets 1 - reserve / free: the same reserve in MiB as on an empty GPU.
    """
    if setting != "auto":
        try:
            fraction = float(setting)
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction < 1.0:
            raise SpecError(f"MEM_FRACTION_STATIC={setting!r} must be auto or a number between 0 and 1")
        return fraction, ""
    if gpu_free_total_mib is None:
        return None, ""
    free, total = gpu_free_total_mib
    if total <= 0 or free >= total - 1024:  # (nearly) empty GPU: SGLang's own sizing is right
        return None, ""
    reserve = gpu_reserve_mib(total)
    if free - reserve < _MIN_USABLE_MIB:
        return None, (f"the GPU has only {free / 1024:.1f} of {total / 1024:.1f} GiB free: not enough to start "
                      "(start refuses; stop what holds it or set MEM_FRACTION_STATIC)")
    fraction = round(1 - reserve / free, 3)
    note = (f"GPU already holds {(total - free) / 1024:.1f} GiB: --mem-fraction-static {fraction} of the "
            f"{free / 1024:.1f} GiB free keeps SGLang's {reserve / 1024:.1f} GiB runtime reserve")
    return fraction, note


def gpu_room_problem(gpu_free_total_mib: tuple[float, float] | None) -> str | None:
    """One line when MEM_FRACTION_STATIC=auto cannot fit a server into the free GPU memory; None when it can."""
    if gpu_free_total_mib is None:
        return None
    free, total = gpu_free_total_mib
    if total > 0 and free - gpu_reserve_mib(total) < _MIN_USABLE_MIB:
        return (f"the GPU has only {free / 1024:.1f} of {total / 1024:.1f} GiB free — stop what holds it "
                "(nvidia-smi) or set MEM_FRACTION_STATIC")
    return None


def _flag_groups(tokens: Sequence[str], source: str) -> list[list[str]]:
    """Split '--flag v1 v2 --other' into [['--flag', 'v1', 'v2'], ['--other']]; '--f=v' stays one token."""
    groups: list[list[str]] = []
    for token in tokens:
        if token.startswith("--"):
            groups.append([token])
        elif groups:
            groups[-1].append(token)
        else:
            raise SpecError(f"{source}: {token!r} is not a --flag (expected e.g. --kv-cache-dtype fp8_e5m2)")
    return groups


def merge_extra(ours: list[list[str]], extra: list[list[str]]) -> tuple[list[str], list[str]]:
    """Our flag groups, each replaced by an extra group of the same flag, then the new extra flags.

    The documented rule: a flag in SERVER_EXTRA_ARGS replaces ours (whole group, values included) so the
    command has each flag once; flags that have a setting are refused (see SETTING_FLAGS).
    """
    notes = []
    names = {g[0].split("=", 1)[0]: g for g in extra}
    for name in names:
        if name in SETTING_FLAGS:
            raise SpecError(f"SERVER_EXTRA_ARGS sets {name}: set {SETTING_FLAGS[name]} instead")
    merged: list[str] = []
    for group in ours:
        replacement = names.pop(group[0], None)
        if replacement is None:
            merged += group
        else:
            notes.append(f"SERVER_EXTRA_ARGS replaces {shlex.join(group)} with {shlex.join(replacement)}")
            merged += replacement
    for group in extra:
        if group[0].split("=", 1)[0] in names:
            merged += group
    return merged, notes


def server_env(cfg: Config) -> tuple[tuple[str, str], ...]:
    """SERVER_ENV pairs plus the persistent FlashInfer JIT cache (kernels compiled once survive restarts)."""
    pairs: dict[str, str] = {"FLASHINFER_WORKSPACE_BASE": cfg.flashinfer_workspace_base}
    try:
        items = shlex.split(cfg.server_env)
    except ValueError as exc:
        raise SpecError(f"SERVER_ENV cannot be split like a shell line: {exc}") from None
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise SpecError(f"SERVER_ENV: {item!r} is not KEY=VALUE")
        pairs[key] = value
    return tuple(pairs.items())


def build_spec(
    cfg: Config,
    cpu_count: int | None = None,
    gpu_free_total_mib: tuple[float, float] | None = None,
    extra_args: Sequence[str] | None = None,
) -> ServerSpec:
    """The launch command for cfg: the article's features on, adaptive defaults resolved, extra args merged.

    extra_args defaults to SERVER_EXTRA_ARGS (shell-split); run_bench passes an arm's flags here.
    """
    python = cfg.sglang_python if "/" in cfg.sglang_python else (shutil.which(cfg.sglang_python) or cfg.sglang_python)
    workers = tokenizer_workers(cfg.tokenizer_worker_num, cpu_count or usable_cpus())
    key_note = None
    if cfg.api_key_file and workers > 1:
        # SGLang 0.5.17 asserts "API key is not supported in multi-tokenizer mode" (seen on an H200)
        if cfg.tokenizer_worker_num != "auto":
            raise SpecError(f"TOKENIZER_WORKER_NUM={workers} with API_KEY_FILE: SGLang refuses an API key with "
                            "several tokenizer workers — set TOKENIZER_WORKER_NUM=1 or drop the key (the server "
                            "is loopback-only behind the SSH tunnel)")
        workers = 1
        key_note = ("API key set: 1 tokenizer worker instead of the adaptive count (SGLang refuses a key in "
                    "multi-tokenizer mode); heavy shared-prompt loads become tokenizer-bound")
    fraction, fraction_note = mem_fraction(cfg.mem_fraction_static, gpu_free_total_mib)
    ours = [
        ["--model-path", cfg.model_dir], ["--served-model-name", cfg.served_model_name],
        ["--load-format", cfg.load_format], ["--host", cfg.host], ["--port", str(cfg.port)],
        ["--attention-backend", "flashinfer"],  # the article's kernels (prefix cache stays on: SGLang's default)
        ["--enable-metrics"], ["--enable-cache-report"],  # /metrics; cached_tokens in every usage block
        ["--tool-call-parser", cfg.tool_call_parser], ["--reasoning-parser", cfg.reasoning_parser],
        ["--tokenizer-worker-num", str(workers)],
    ]
    if fraction is not None:
        ours.append(["--mem-fraction-static", str(fraction)])
    if cfg.chunked_prefill_size != "auto":
        if not cfg.chunked_prefill_size.lstrip("-").isdigit():
            raise SpecError(f"CHUNKED_PREFILL_SIZE={cfg.chunked_prefill_size!r} must be auto or tokens (-1 = off)")
        ours.append(["--chunked-prefill-size", cfg.chunked_prefill_size])
    config_file = str(Path(cfg.state_dir) / CONFIG_FILE_NAME) if cfg.api_key_file else None
    if config_file:
        ours.append(["--config", config_file])
    try:
        extra_tokens = shlex.split(cfg.server_extra_args) if extra_args is None else list(extra_args)
    except ValueError as exc:
        raise SpecError(f"SERVER_EXTRA_ARGS cannot be split like a shell line: {exc}") from None
    flags, notes = merge_extra(ours, _flag_groups(extra_tokens, "SERVER_EXTRA_ARGS"))
    notes[:0] = [n for n in (key_note, fraction_note) if n]
    argv = (python, "-m", "sglang.launch_server", *flags)
    return ServerSpec(argv, server_env(cfg), config_file, tuple(notes))


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)  # created with its final mode: no 0644 window
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write_launch_files(spec: ServerSpec, state_dir: Path, api_key: str | None) -> None:
    """launch_command.txt/.json (exact command, no secret), launch.argv0 (for serve.sh), the 0600 key YAML."""
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / CONFIG_FILE_NAME
    if spec.config_file and api_key:
        # JSON strings are valid YAML double-quoted scalars: any key characters survive SGLang's yaml.safe_load.
        _write_atomic(config, f"api-key: {json.dumps(api_key)}\n", 0o600)
    elif config.exists():
        config.unlink()  # a key removed from the config must not linger on disk
    record = {"command": spec.command_line, "argv": list(spec.argv), "env": dict(spec.env),
              "config_file": spec.config_file, "notes": list(spec.notes),
              "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write_atomic(state_dir / "launch_command.txt", spec.command_line + "\n")
    _write_atomic(state_dir / "launch_command.json", json.dumps(record, indent=2) + "\n")
    _write_atomic(state_dir / "launch.argv0", "".join(f"{a}\0" for a in spec.command))


# ---------------------------------------------------------------- which process group is ours
def recorded_group(state_dir: Path) -> int | None:
    """The process group serve.sh recorded in STATE/pgid while it is still the one start launched: its leader
    runs `serve.sh _run STATE`, or the recorded server PID (STATE/pid) is in it. None when nothing was started,
    the group is gone, or the number now belongs to someone else (after a reboot or PID reuse).
    The one rule: serve.sh asks this (`our-pgid`), ./serve.sh status uses it too."""
    def read(name: str) -> str:
        try:
            return (state_dir / name).read_text().strip()
        except OSError:
            return ""

    pgid, pid = read("pgid"), read("pid")
    if not pgid.isdigit() or not group_alive(int(pgid)):
        return None
    try:
        leader = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        leader = ""
    if f"_run {state_dir}" in leader or (pid.isdigit() and pgid_of(int(pid)) == int(pgid)):
        return int(pgid)
    return None


# ---------------------------------------------------------------- readiness tied to OUR process group
def readiness(cfg: Config, pgid: int) -> tuple[str, str]:
    """('ready' | 'starting' | 'dead' | 'foreign', detail) for our server in process group `pgid`.

    Ready needs all three: our group alive, the socket on PORT held by a PID of our group (where /proc shows
    it), and /health_generate 200 (a generation succeeded). A stale server on the port answers health checks
    too, so a probe alone once reported "ready" for a server that had died with "address already in use".
    """
    if not group_alive(pgid):
        return "dead", f"the server (process group {pgid}) exited"
    found = listeners(cfg.port)
    if found is not None:
        inodes, owners = found
        if not inodes:
            return "starting", "not listening yet"
        if not any(pgid_of(p) == pgid for p in owners):
            return "foreign", f"port {cfg.port} is held by {port_holder(cfg.host, cfg.port)}, not by our server"
    status, body = http_get(cfg, "/health_generate", timeout=30.0)
    if status == 200:
        return "ready", "a generation succeeded"
    return "starting", f"/health_generate -> {status or body}"


def wait_ready(cfg: Config, pgid: int, log: Path, timeout_s: float, every_s: float = 5.0) -> tuple[bool, str]:
    """Poll readiness until ready, dead, foreign or timeout; a progress line every `every_s` seconds."""
    start = time.monotonic()
    last_print = -every_s
    foreign_seen = 0
    while True:
        state, detail = readiness(cfg, pgid)
        elapsed = time.monotonic() - start
        if state == "ready":
            return True, f"ready after {elapsed:.0f}s ({detail})"
        if state == "foreign":  # /proc changes while we read it: believe a stranger on the port when seen twice
            foreign_seen += 1
        else:
            foreign_seen = 0
        if state == "dead" or foreign_seen >= 2:
            return False, detail
        if elapsed >= timeout_s:
            return False, f"not ready after {timeout_s:.0f}s (READY_TIMEOUT_S); last: {detail}"
        if elapsed - last_print >= every_s:
            last_print = elapsed
            print(f"[serve] starting: {elapsed:.0f}s elapsed, timeout in {timeout_s - elapsed:.0f}s (H200: 1.5-3 min "
                  f"with warm kernel caches, ~7 min on a first start without FlashInfer's add-ons) | log: "
                  f"{serverlog.last_line(log)}", flush=True)
        time.sleep(0.5)


# ---------------------------------------------------------------- CLI used by serve.sh
def _gpu_free_total() -> tuple[float, float] | None:
    """(free, total) MiB of the GPU the server will use (first of CUDA_VISIBLE_DEVICES, else 0); None: no GPU."""
    from llmhost.serve import gpu

    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    index = int(first) if first.isdigit() else 0
    return next(((d.total_mib - d.used_mib, d.total_mib) for d in gpu.devices() if d.index == index), None)


def _check_inputs(cfg: Config) -> None:
    """Problems start would only discover minutes later, as one line each."""
    if not (Path(cfg.model_dir) / "config.json").is_file():
        raise SpecError(f"MODEL_DIR={cfg.model_dir} has no config.json — run ./setup_host.sh or set MODEL_DIR")
    if not shutil.which(cfg.sglang_python):
        raise SpecError(f"SGLANG_PYTHON={cfg.sglang_python} is not an executable — run ./setup_host.sh or set it")
    if cfg.api_key_file and not cfg.api_key():
        raise SpecError(f"API_KEY_FILE={cfg.api_key_file} is empty — put the key on its first line")
    holder = port_holder(cfg.host, cfg.port)
    if holder:
        raise SpecError(f"port {cfg.port} is held by {holder} — stop it (./serve.sh stop if it is ours) "
                        "or set PORT=<free port>")
    room = gpu_room_problem(_gpu_free_total()) if cfg.mem_fraction_static == "auto" else None
    if room:
        raise SpecError(room)


def _cmd_spec(cfg: Config, args: argparse.Namespace) -> int:
    spec = build_spec(cfg, gpu_free_total_mib=_gpu_free_total())
    if args.cmd == "argv":
        sys.stdout.write("".join(f"{a}\0" for a in spec.command))
        return 0
    if args.cmd == "prepare":
        _check_inputs(cfg)
        write_launch_files(spec, cfg.state_dir, cfg.api_key())
    for note in spec.notes:
        print(f"[serve] note: {note}", file=sys.stderr)
    print(spec.command_line)
    return 0


def _cmd_our_pgid(cfg: Config, args: argparse.Namespace) -> int:
    pgid = recorded_group(Path(args.state_dir) if args.state_dir else cfg.state_dir)
    if pgid:
        print(pgid)
    return 0


def _cmd_wait_ready(cfg: Config, args: argparse.Namespace) -> int:
    log = cfg.state_dir / "server.log"
    ok, detail = wait_ready(cfg, args.pgid, log, args.timeout_s or cfg.ready_timeout_s)
    if ok:
        print(f"[serve] {detail}")
        return 0
    print(f"[serve] last lines of {log}:\n{serverlog.tail(log)}", file=sys.stderr)
    print(f"[serve] error: {detail} — see ./serve.sh logs, fix, then ./serve.sh start", file=sys.stderr)
    return 1


COMMANDS = {
    "print-command": (_cmd_spec, "print the launch command start would run (no side effects)"),
    "argv": (_cmd_spec, "print the launch argv NUL-separated (no side effects)"),
    "prepare": (_cmd_spec, "check inputs and the port, write launch_command.{txt,json}, launch.argv0, key YAML"),
    "wait-ready": (_cmd_wait_ready, "wait until our process group serves a generation on PORT"),
    "our-pgid": (_cmd_our_pgid, "print the process group start launched while it is alive and ours (else nothing)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, (func, text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.set_defaults(func=func)
        if name == "wait-ready":
            cmd.add_argument("--pgid", type=int, required=True, help="process group of the server serve.sh started")
            cmd.add_argument("--timeout-s", type=float, default=0, help="seconds (default READY_TIMEOUT_S)")
        if name == "our-pgid":
            cmd.add_argument("--state-dir", help="serve.sh's state directory, as it spells it (default WORK_DIR/server)")
    args = parser.parse_args(argv)
    try:
        return args.func(load(), args)
    except (ConfigError, SpecError, OSError) as exc:
        print(f"[serve] error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C while waiting: the server itself runs on in tmux
        print("[serve] interrupted — the server keeps starting in tmux; ./serve.sh start resumes waiting, "
              "./serve.sh stop ends it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
