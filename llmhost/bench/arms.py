"""Benchmark arms: server configurations that each differ from the baseline by exactly one setting.

The registry is data (order = display order, baseline first); run_bench.py, the plan and the dashboard read names,
labels and colours from here. User arms come from `run_bench.py --arm NAME="flags"` or the BENCH_USER_ARMS setting
(`NAME=flags;NAME2=flags`) and are appended after the built-in ones. Flags may include a lifecycle setting as
KEY=value (`--arm gc-live="FREEZE_GC=off"`).
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence

from llmhost.serve.spec import SETTING_FLAGS
from llmhost.settings import CHECKS, secret_env_names

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
# Colours for user arms, in order (the built-ins carry their own).
_USER_COLORS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# Launch flags the server lifecycle owns through a setting but that are worth comparing: an arm's value travels
# as that setting (they are refused among extra launch flags). The other setting flags (--port, --model-path, ...) are
# not server configurations to compare and are refused in an arm.
ARM_SETTINGS = ("--chunked-prefill-size", "--mem-fraction-static", "--tokenizer-worker-num", "--tp-size",
                "--tensor-parallel-size", "--dp-size", "--data-parallel-size")
# Settings an arm gives as KEY=value: the lifecycle's own (FREEZE_GC=off; SHARED_PREFIX_DECODE=off; SCHEDULER_PRELOAD=on
# or BYTECODE_CACHE= to start with the preload or without the bytecode cache, e.g. with --startup), the CUDA graph
# lists, which become several flags or none (CUDA_GRAPH_PREFILL_TOKENS=auto CUDA_GRAPH_DECODE_BATCHES=auto), and
# SERVER_ENV, the server's environment in place of config.env's for that arm (a toggle SGLang or the shared-prefix
# decode reads from its environment; no secret-named key: arms are recorded with the results).
ARM_LIFECYCLE_SETTINGS = ("FREEZE_GC", "SCHEDULER_PRELOAD", "SHARED_PREFIX_DECODE", "BYTECODE_CACHE",
                          "CUDA_GRAPH_PREFILL_TOKENS", "CUDA_GRAPH_DECODE_BATCHES", "SERVER_ENV")
_SETTING_WORD = re.compile(r"([A-Z][A-Z0-9_]*)=(.*)")
# Flags SGLang 0.5.17 still parses but reads nowhere in its code: an arm of them would be the baseline again under
# another name. Each maps to the flag that does the job in 0.5.17.
UNREAD_FLAGS = {"--num-continuous-decode-steps": "--scheduler-recv-interval"}


def unread_flag_problem(flags: Sequence[str]) -> str | None:
    """One line naming the first flag SGLang 0.5.17 ignores (and what to use instead), or None."""
    for flag in (f.partition("=")[0] for f in flags):
        if flag in UNREAD_FLAGS:
            return (f"{flag} is parsed by SGLang 0.5.17 but read nowhere, so it changes nothing; "
                    f"use {UNREAD_FLAGS[flag]}")
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Arm:
    name: str
    label: str
    color: str
    flags: tuple[str, ...]
    description: str
    is_baseline: bool = False


class ArmError(ValueError):
    """A user arm that cannot be used; the message is one line."""


REGISTRY: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("baseline", "Baseline (FlashInfer)", "#1f77b4", (),
            "FlashInfer attention, radix prefix cache, bf16 KV cache, page size 1: the serve.sh defaults.", True),
        Arm("no-prefix-cache", "Prefix cache off", "#d62728", ("--disable-radix-cache",),
            "Radix (prefix) KV cache disabled: every request prefills its whole prompt."),
        Arm("fp8-kv", "FP8 KV cache", "#2ca02c", ("--kv-cache-dtype", "fp8_e5m2"),
            "KV cache stored as fp8 e5m2: half the KV bytes per token, twice the cache capacity."),
        Arm("page-16", "KV page size 16", "#ff7f0e", ("--page-size", "16"),
            "KV cache paged in blocks of 16 tokens instead of 1 (prefix matches round down to a page)."),
        Arm("triton", "Triton attention", "#9467bd", ("--attention-backend", "triton"),
            "SGLang's Triton attention kernels instead of FlashInfer."),
    )
}


def parse_user_arm(spec: str, index: int = 0) -> Arm:
    """`NAME=flags` (flags split like a shell line) -> Arm; raises ArmError with a one-line reason."""
    name, sep, flags_text = spec.partition("=")
    name = name.strip()
    if not sep or not _NAME.fullmatch(name):
        raise ArmError(f"bad arm {spec!r}: expected NAME=\"--flag value\" with NAME like my-arm")
    try:
        flags = tuple(shlex.split(flags_text))
    except ValueError as exc:
        raise ArmError(f"arm {name}: cannot split flags {flags_text!r} ({exc})") from None
    if not flags or not (flags[0].startswith("--") or _SETTING_WORD.fullmatch(flags[0])):
        raise ArmError(f"arm {name}: flags must start with a launch_server option such as --page-size, or a "
                       f"setting: {', '.join(f'{key}=...' for key in ARM_LIFECYCLE_SETTINGS)}")
    _split_settings(name, flags)  # validates
    problem = unread_flag_problem(flags)
    if problem:
        raise ArmError(f"arm {name}: {problem}")
    color = _USER_COLORS[index % len(_USER_COLORS)]
    return Arm(name, name, color, flags, f"User arm: baseline + {' '.join(flags)}")


def config_arm_specs(text: str) -> list[str]:
    """Split the BENCH_USER_ARMS setting (`NAME=flags;NAME2=flags`) into specs."""
    return [part.strip() for part in text.split(";") if part.strip()]


def select(names: list[str] | None, cli_specs: Sequence[str], config_specs: Sequence[str] = ()) -> list[Arm]:
    """Built-in arms, then the --arm ones, then BENCH_USER_ARMS, in that order (baseline first). `names` (--arms;
    None = all) picks among them, but an arm given with --arm always runs: defining it there is asking for it."""
    arms = dict(REGISTRY)
    for index, spec in enumerate([*cli_specs, *config_specs]):
        arm = parse_user_arm(spec, index)
        if arm.name in arms:
            raise ArmError(f"arm {arm.name} is defined twice (built-in arms: {', '.join(REGISTRY)})")
        arms[arm.name] = arm
    if names is None:
        return list(arms.values())
    unknown = [n for n in names if n not in arms]
    if unknown:
        raise ArmError(f"unknown arm {', '.join(unknown)} (known: {', '.join(arms)})")
    given = set(list(arms)[len(REGISTRY):len(REGISTRY) + len(cli_specs)])
    return [arm for arm in arms.values() if arm.name in names or arm.name in given]


def _split_settings(name: str, flags: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """(plain launch flags, {SETTING: value}) of an arm's flags; ArmError for a setting flag it cannot carry."""
    plain: list[str] = []
    settings: dict[str, str] = {}
    i = 0
    while i < len(flags):
        word = _SETTING_WORD.fullmatch(flags[i])
        if word:
            if word[1] not in ARM_LIFECYCLE_SETTINGS:
                raise ArmError(f"arm {name}: {word[1]} is not a setting an arm can change (arm settings: "
                               f"{', '.join(ARM_LIFECYCLE_SETTINGS)})")
            try:
                CHECKS[word[1]](word[2])
            except ValueError as exc:
                raise ArmError(f"arm {name}: {flags[i]} {exc}") from None
            secret = word[1] == "SERVER_ENV" and next(iter(secret_env_names(word[2])), None)
            if secret:
                raise ArmError(f"arm {name}: SERVER_ENV sets {secret}, a secret, and arms are recorded with the "
                               "results — keep it in config.local.env's SERVER_ENV")
            settings[word[1]] = word[2]
            i += 1
            continue
        flag, eq, value = flags[i].partition("=")
        if flag not in SETTING_FLAGS:
            plain.append(flags[i])
            i += 1
            continue
        if flag not in ARM_SETTINGS:
            raise ArmError(f"arm {name}: {flag} is set by {SETTING_FLAGS[flag]}, not compared between arms (arm "
                           f"settings: {', '.join(ARM_SETTINGS)}, or any other launch_server flag)")
        if not eq:
            if i + 1 >= len(flags) or flags[i + 1].startswith("--"):
                raise ArmError(f"arm {name}: {flag} needs a value")
            value, i = flags[i + 1], i + 1
        settings[SETTING_FLAGS[flag]] = value
        i += 1
    return plain, settings


def server_overrides(arm: Arm) -> tuple[list[str], dict[str, str]]:
    """What the server restart for this arm takes, as data: (launch flags appended after SERVER_EXTRA_ARGS,
    {SETTING: value} for a flag the lifecycle owns through a setting, e.g. --chunked-prefill-size 4096)."""
    return _split_settings(arm.name, arm.flags)


def boots(arms: list[Arm]) -> list[list[Arm]]:
    """Consecutive arms with the same launch flags and settings share one server boot; a new boot (a restart)
    only where they change."""
    groups: list[list[Arm]] = []
    for arm in arms:
        if groups and server_overrides(groups[-1][0]) == server_overrides(arm):
            groups[-1].append(arm)
        else:
            groups.append([arm])
    return groups
