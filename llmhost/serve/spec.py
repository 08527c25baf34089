"""The launch spec: exactly what `start` executes, built from the configuration (+ a benchmark arm's flags).

The article's features on (FlashInfer attention, prefix cache, chunked prefill, metrics, cache report, Qwen3
parsers), adaptive defaults resolved (the tokenizer as measured best, the static memory fraction from the free GPU
memory), SERVER_EXTRA_ARGS merged by one rule, the API key only in a 0600 --config YAML.
`write_launch_files` records it in $WORK_DIR/server: launch_command.{txt,json} (no secret), launch.argv0 (what the
tmux pane runs), sglang_config.yaml (0600, only with a key).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmhost.config import Config
from llmhost.files import write_text_atomic
from llmhost.serve import graphs, parallel
from llmhost.serve.console import ServeError
from llmhost.serve.shared_prefix import plugin_dir


PRELOADED_LAUNCH = Path(__file__).resolve().parent / "launcher" / "preloaded_launch.py"


class SpecError(ServeError):
    """A setting the launch command cannot be built from; the message is one line naming it."""


@dataclasses.dataclass(frozen=True, slots=True)
class ServerSpec:
    """Exactly what start executes: `env K=V ... argv...` (the API key only inside config_file)."""

    argv: tuple[str, ...]  # python -m sglang.launch_server --flag value ... (or python PRELOADED_LAUNCH sglang...)
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
    "--tp-size": "TP_SIZE", "--tensor-parallel-size": "TP_SIZE", "--dp-size": "DP_SIZE",
    "--data-parallel-size": "DP_SIZE", "--nnodes": "NNODES",
    "--node-rank": "NNODES (and ./serve.sh print-command --node-rank N)",
    "--dist-init-addr": "DIST_INIT_ADDR", "--nccl-init-addr": "DIST_INIT_ADDR",
}
CONFIG_FILE_NAME = "sglang_config.yaml"
# SGLang reserves ~10 GiB beside its static pool on GPUs > 60 GiB (activations, CUDA graphs); smaller: ~4 GiB.
_RESERVE_SHARE, _RESERVE_MIN_MIB = 0.097, 4 * 1024  # SGLang's auto fraction on an H200 is 0.903: 9.7% left free
_MIN_USABLE_MIB = 2 * 1024  # below this, weights + a KV pool cannot fit: refuse instead of crashing after a minute


# TOKENIZER_WORKER_NUM=auto: AUTO_TOKENIZER_PROCESSES tokenizer processes, each encoding prompts in batches on a
# thread beside its event loop (SGLang's dynamic batch tokenizer); one where an API key is set, since SGLang refuses a
# key with several. config.env's comment has the measurements that made it the default.
AUTO_TOKENIZER_PROCESSES = 4
DYNAMIC_BATCH_TOKENIZER = "--enable-dynamic-batch-tokenizer"


def several_tokenizers_problem(cfg: Config) -> str | None:
    """Why this server cannot run more than one tokenizer process, or None: SGLang 0.5.17 asserts "API key is not
    supported in multi-tokenizer mode" (seen on an H200)."""
    return "an API key holds SGLang to one tokenizer process" if cfg.api_key_file else None


def tokenizer_processes(cfg: Config) -> int:
    """How many tokenizer processes TOKENIZER_WORKER_NUM launches. SpecError (one line) for a value that is neither
    auto nor a count, or for a count above 1 with an API key."""
    setting = cfg.tokenizer_worker_num
    if setting == "auto":
        return 1 if several_tokenizers_problem(cfg) else AUTO_TOKENIZER_PROCESSES
    if not setting.isdigit() or int(setting) < 1:
        raise SpecError(f"TOKENIZER_WORKER_NUM={setting!r} must be auto or a positive integer")
    if int(setting) > 1 and several_tokenizers_problem(cfg):
        raise SpecError(f"TOKENIZER_WORKER_NUM={setting} with API_KEY_FILE: SGLang refuses an API key with several "
                        "tokenizer processes — set TOKENIZER_WORKER_NUM=auto or 1, or drop the key (the server is "
                        "loopback-only behind the SSH tunnel)")
    return int(setting)


def tokenizer_flags(cfg: Config) -> list[list[str]]:
    """The tokenizer's flag groups: auto = tokenizer_processes(cfg) processes, each batching its prompts
    (DYNAMIC_BATCH_TOKENIZER); N = N processes, each encoding on its own event loop (add
    --enable-dynamic-batch-tokenizer to SERVER_EXTRA_ARGS to batch in them too)."""
    count = ["--tokenizer-worker-num", str(tokenizer_processes(cfg))]
    return [count, [DYNAMIC_BATCH_TOKENIZER]] if cfg.tokenizer_worker_num == "auto" else [count]


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


def bytecode_env(cfg: Config, environ: Mapping[str, str]) -> dict[str, str]:
    """Where the server's Python may write its compiled bytecode when `environ` forbids it (PYTHONDONTWRITEBYTECODE
    non-empty, as many container images set): into BYTECODE_CACHE (PYTHONPYCACHEPREFIX), so a restart reads torch's,
    SGLang's and transformers' bytecode instead of compiling them again; the packages' own folders stay untouched.
    An empty PYTHONDONTWRITEBYTECODE is Python's "unset". {} when writing is allowed or BYTECODE_CACHE is empty."""
    if not cfg.bytecode_cache or not environ.get("PYTHONDONTWRITEBYTECODE"):
        return {}
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": cfg.bytecode_cache}


def server_env(cfg: Config, environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """SERVER_ENV pairs (they win) plus the persistent FlashInfer JIT cache (kernels compiled once survive restarts),
    the bytecode cache when the environment (`environ`, default this process's) forbids writing bytecode, the
    GPUs of GPUS (llmhost/serve/parallel.py), and with SHARED_PREFIX_DECODE=on the plugin folder and this checkout
    first on PYTHONPATH (llmhost/serve/shared_prefix/plugin_dir.py; SERVER_ENV's PYTHONPATH kept after them)."""
    environ = os.environ if environ is None else environ
    pairs: dict[str, str] = {"FLASHINFER_WORKSPACE_BASE": cfg.flashinfer_workspace_base,
                             **bytecode_env(cfg, environ), **parallel.device_env(cfg)}
    try:
        items = shlex.split(cfg.server_env)
    except ValueError as exc:
        raise SpecError(f"SERVER_ENV cannot be split like a shell line: {exc}") from None
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise SpecError(f"SERVER_ENV: {item!r} is not KEY=VALUE")
        if cfg.gpus and key == "CUDA_VISIBLE_DEVICES":
            raise SpecError(f"SERVER_ENV sets CUDA_VISIBLE_DEVICES and GPUS={cfg.gpus} sets it too — keep one")
        pairs[key] = value
    pairs.update(plugin_dir.env(cfg.shared_prefix_decode == "on", cfg.state_dir, pairs, environ))
    return tuple(pairs.items())


def _configured_extra_args(cfg: Config) -> list[str]:
    """SERVER_EXTRA_ARGS as argv items; a benchmark arm's flags go after these."""
    try:
        return shlex.split(cfg.server_extra_args)
    except ValueError as exc:
        raise SpecError(f"SERVER_EXTRA_ARGS cannot be split like a shell line: {exc}") from None


def launched_values(cfg: Config) -> dict[str, str]:
    """What the defaults' launch command gives the flags an arm may move: each SERVER_EXTRA_ARGS flag ("" for a
    bare one), the tokenizer's flags (tokenizer_flags) and a set CHUNKED_PREFILL_SIZE. SpecError (one line) for a
    setting build would refuse."""
    values: dict[str, str] = {}
    for group in _flag_groups(_configured_extra_args(cfg), "SERVER_EXTRA_ARGS"):
        flag, eq, value = group[0].partition("=")
        values[flag] = value if eq else " ".join(group[1:])
    for group in tokenizer_flags(cfg):
        values.setdefault(group[0], " ".join(group[1:]))
    if cfg.chunked_prefill_size != "auto":
        values["--chunked-prefill-size"] = cfg.chunked_prefill_size
    return values


def with_settings(cfg: Config, settings: Mapping[str, str]) -> Config:
    """cfg with some settings replaced, by their config.env names ({"CHUNKED_PREFILL_SIZE": "4096"}), each checked
    by the same rule config.env's value is (llmhost.settings): an arm cannot smuggle in a value the file would refuse."""
    from llmhost.settings import CHECKS

    changes: dict[str, object] = {}
    for key, value in settings.items():
        check = CHECKS.get(key)
        if check is None:
            raise SpecError(f"unknown setting {key} (see config.env for the keys)")
        try:
            changes[key.lower()] = check(str(value))
        except ValueError as exc:
            raise SpecError(f"{key}={value} {exc}") from None
    return dataclasses.replace(cfg, **changes)


def build_spec(
    cfg: Config,
    gpu_free_total_mib: tuple[float, float] | None = None,
    extra_args: Sequence[str] = (),
    node_rank: int = 0,
    gpu_total_mib: float | None = None,
) -> ServerSpec:
    """The launch command for cfg: the article's features on, adaptive defaults resolved, extra args merged.

    extra_args (a benchmark arm's flags) go after SERVER_EXTRA_ARGS, so an arm's flag replaces a configured one.
    node_rank: which host of NNODES the command is for (print-command; start runs node 0).
    gpu_total_mib: the GPU's size, for the CUDA graph sizes (llmhost/serve/graphs.py); default gpu_free_total_mib's.
    """
    problem = parallel.layout_problem(cfg, node_rank)
    if problem:
        raise SpecError(problem)
    python = cfg.sglang_python if "/" in cfg.sglang_python else (shutil.which(cfg.sglang_python) or cfg.sglang_python)
    fraction, fraction_note = mem_fraction(cfg.mem_fraction_static, gpu_free_total_mib)
    extra_tokens = [*_configured_extra_args(cfg), *extra_args]
    total = gpu_total_mib if gpu_total_mib is not None else (gpu_free_total_mib or (None, None))[1]
    graph_groups, graph_notes = graphs.graph_flags(
        cfg.cuda_graph_prefill_tokens, cfg.cuda_graph_decode_batches, cfg.chunked_prefill_size, cfg.tp_size, total,
        [t for t in extra_tokens if t.startswith("--")])
    ours = [
        ["--model-path", cfg.model_dir], ["--served-model-name", cfg.served_model_name],
        ["--load-format", cfg.load_format], ["--host", cfg.host], ["--port", str(cfg.port)],
        ["--attention-backend", "flashinfer"],  # the article's kernels (prefix cache stays on: SGLang's default)
        ["--enable-metrics"], ["--enable-cache-report"],  # /metrics; cached_tokens in every usage block
        ["--tool-call-parser", cfg.tool_call_parser], ["--reasoning-parser", cfg.reasoning_parser],
        *tokenizer_flags(cfg), *graph_groups, *parallel.launch_flags(cfg, node_rank),
    ]
    if fraction is not None:
        ours.append(["--mem-fraction-static", str(fraction)])
    if cfg.chunked_prefill_size != "auto":
        if not cfg.chunked_prefill_size.lstrip("-").isdigit():
            raise SpecError(f"CHUNKED_PREFILL_SIZE={cfg.chunked_prefill_size!r} must be auto or tokens (-1 = off)")
        ours.append(["--chunked-prefill-size", cfg.chunked_prefill_size])
    # only node 0 serves HTTP: the other hosts of NNODES need no key (nor its file, which start writes on node 0)
    config_file = str(Path(cfg.state_dir) / CONFIG_FILE_NAME) if cfg.api_key_file and node_rank == 0 else None
    if config_file:
        ours.append(["--config", config_file])
    flags, notes = merge_extra(ours, _flag_groups(extra_tokens, "SERVER_EXTRA_ARGS"))
    notes[:0] = [fraction_note] if fraction_note else []
    why_one = several_tokenizers_problem(cfg)
    if cfg.tokenizer_worker_num == "auto" and why_one:
        notes.append(f"TOKENIZER_WORKER_NUM=auto: one tokenizer process, not {AUTO_TOKENIZER_PROCESSES}: {why_one}")
    notes += graph_notes
    env = server_env(cfg)
    runner, runner_note = launcher(cfg, flags, env)
    notes += [runner_note] if runner_note else []
    argv = (python, *runner, "sglang.launch_server", *flags)
    return ServerSpec(argv, env, config_file, tuple(notes))


# What the fork server cannot give SGLang's processes: each needs them started by spawn itself
_NEEDS_SPAWN_FLAGS = {"--enable-memory-saver": "its LD_PRELOAD"}
_NEEDS_SPAWN_ENV = {"SGLANG_NUMA_BIND_V2": "its numactl"}


def launcher(cfg: Config, flags: Sequence[str], env: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], str | None]:
    """What runs `sglang.launch_server`: `-m` (Python's own), or llmhost/serve/launcher/preloaded_launch.py, which
    imports the scheduler's third-party modules (torch, ...) while the launcher imports itself: with
    SCHEDULER_PRELOAD=on in a fork server that forks SGLang's processes, with =standby in spawned interpreters that
    become them (one per process SGLang starts: standby_count).
    One host only: with NNODES > 1 every host runs the same `-m` command (the others run the printed command, where
    this checkout may not be). With a flag or variable that needs spawn it is `-m`, and the note says why."""
    if cfg.scheduler_preload == "off" or cfg.nnodes > 1:
        return ("-m",), None
    environment = {**os.environ, **dict(env)}
    blockers = [f"{flag} ({why})" for flag, why in _NEEDS_SPAWN_FLAGS.items() if flag in flags]
    blockers += [f"{key} ({why})" for key, why in _NEEDS_SPAWN_ENV.items()
                 if environment.get(key, "").lower() not in ("", "0", "false")]
    if blockers:
        return ("-m",), (f"SCHEDULER_PRELOAD={cfg.scheduler_preload} but {', '.join(blockers)} needs SGLang's "
                         "processes spawned as it starts them: launched with python -m sglang.launch_server")
    if cfg.scheduler_preload == "standby":
        return (str(PRELOADED_LAUNCH), "--standby", str(standby_count(cfg))), None
    return (str(PRELOADED_LAUNCH),), None


def standby_count(cfg: Config) -> int:
    """How many processes SGLang 0.5.17's launcher starts itself: a scheduler per tensor-parallel rank (with DP > 1
    the data-parallel controller instead, which spawns the ranks), the detokenizer and, with several tokenizer
    processes (tokenizer_processes), uvicorn's worker for each."""
    tokenizers = tokenizer_processes(cfg)
    return (1 if cfg.dp_size > 1 else cfg.tp_size) + 1 + (tokenizers if tokenizers > 1 else 0)


def write_launch_files(spec: ServerSpec, state_dir: Path, api_key: str | None) -> None:
    """launch_command.txt/.json (exact command, no secret), launch.argv0 (for the pane), the 0600 key YAML."""
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / CONFIG_FILE_NAME
    if spec.config_file and api_key:
        # JSON strings are valid YAML double-quoted scalars: any key characters survive SGLang's yaml.safe_load.
        write_text_atomic(config, f"api-key: {json.dumps(api_key)}\n", 0o600)
    elif config.exists():
        config.unlink()  # a key removed from the config must not linger on disk
    record = {"command": spec.command_line, "argv": list(spec.argv), "env": dict(spec.env),
              "config_file": spec.config_file, "notes": list(spec.notes),
              "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_text_atomic(state_dir / "launch_command.txt", spec.command_line + "\n")
    write_text_atomic(state_dir / "launch_command.json", json.dumps(record, indent=2) + "\n")
    write_text_atomic(state_dir / "launch.argv0", "".join(f"{a}\0" for a in spec.command))
