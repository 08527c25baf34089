"""The tuner's search space: launch flags worth tuning for goodput, each with coarse candidate values, as data.

    coarse_trials(SPACE)                          -> [Trial]: the defaults, then one lever moved at a time
    refine_trials(SPACE, scores, tried)           -> [Trial]: around the best (neighbours, the best levers together)

A trial is the defaults plus a few flags; it runs as a benchmark arm (a server restart with those flags). The coarse
stage moves one lever at a time (a full grid of 4 levers x 2-3 values is ~36 boots of ~2 min each: far past any
budget); the refine stage tries the geometric midpoints between the best value of a numeric lever and its coarse
neighbours, and every lever's best value together.
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from llmhost.bench.arms import Arm, unread_flag_problem
from llmhost.bench.points import Row

DEFAULTS_NAME = "baseline"  # the defaults' trial is the benchmark's baseline arm: paired comparisons are against it
_COLORS = ("#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
SPACE_ENV = "LLMHOST_TUNE_SPACE"  # "FLAG=v1,v2;FLAG=v3": replaces SPACE (tests use a tiny grid; same code path)
SWITCH = "on"  # the value of a lever that is a bare flag (e.g. --enable-mixed-chunk): the trial passes the flag alone


@dataclasses.dataclass(frozen=True, slots=True)
class Lever:
    flag: str  # a launch_server flag (a setting-backed one travels as its setting, llmhost.bench.arms), or a setting
    key: str  # short name used in trial names
    values: tuple[str, ...]  # coarse candidates, ascending when numeric
    why: str
    also: tuple[str, ...] = ()  # bare flags a trial of this lever passes with its value (a count that keeps batching)

    @property
    def is_numeric(self) -> bool:
        return all(v.lstrip("-").isdigit() for v in self.values)


# Order = priority: the coarse stage probes the levers in this order, breadth first (coarse_trials).
SPACE: tuple[Lever, ...] = (
    # SGLang sizes the running batch from the KV pool (thousands of requests on an H200); a cap bounds the decode
    # batch, so each step (and the ITL) is shorter, at the price of queueing (TTFT) once the cap is reached.
    Lever("--max-running-requests", "mrr", ("64", "128", "256"), "caps the decode batch: shorter ITL, longer queue"),
    # A config.env setting, not a flag (its trial's arm says SHARED_PREFIX_DECODE=on): requests on the same prompt
    # read its KV pages once per decode step (llmhost.serve.shared_prefix). H200, agent c=64: +8.8% output tok/s
    # [+6.3, +11.2], 3 paired repeats; chat no cost. On by default, so a trial only where SHARED_PREFIX_DECODE=off.
    Lever("SHARED_PREFIX_DECODE", "spd", (SWITCH,), "shared prompts read once per decode step"),
    # 8192 on >= 80 GB GPUs. Smaller chunks interleave decode steps with long prefills (steadier ITL); larger ones
    # finish a long prompt in fewer steps (lower TTFT for agent prompts of several thousand tokens).
    Lever("--chunked-prefill-size", "cps", ("2048", "4096", "16384"), "prefill chunk: ITL vs TTFT on long prompts"),
    # On by default (TOKENIZER_WORKER_NUM=auto: four processes, each batching prompts on a thread beside its event
    # loop), so this lever is a trial only when TOKENIZER_WORKER_NUM sets a count: with eight plain processes most of
    # the agent TTFT tail came before SGLang answered with response headers (H200, c=64: headers p99 780 of a 1,023 ms
    # TTFT p99).
    Lever("--enable-dynamic-batch-tokenizer", "dbt", (SWITCH,), "prompts tokenized in batches off the event loop"),
    # Eight processes, each batching its prompts (the trial sets TOKENIZER_WORKER_NUM, which alone would launch them
    # plain, so it passes the batching flag too): one batching process beat eight plain ones on an H200 (agent c=64:
    # TTFT p99 330 vs 688 ms, throughput within noise), and four batching beat one on an H100 (+8.1% output tok/s
    # [+5.6, +10.6]; two: +5.3%); whether eight go further depends on the host's cores.
    Lever("--tokenizer-worker-num", "tok", ("8",), "batching tokenizer processes: parallel encoding vs start-up",
          ("--enable-dynamic-batch-tokenizer",)),
    # fcfs is the 0.5.17 default; lpm admits the waiting requests with the longest cached prefix first, so the
    # agent's shared system prompts are reused before the radix cache evicts them.
    Lever("--schedule-policy", "sp", ("lpm",), "longest-prefix-match admission: more prefix-cache hits"),
    # Off by default: a prefill chunk then runs as its own forward pass and every running request waits for it. Mixed,
    # the chunk rides along with a decode step, so decode does not stall while new requests prefill.
    Lever("--enable-mixed-chunk", "mix", (SWITCH,), "prefill chunks ride in decode batches: no decode stall"),
    # 1 by default: while decoding, the scheduler polls for new requests after every step; every 4th step cuts its
    # CPU work per token but admits new requests up to 3 steps later (TTFT). (SGLang 0.5.17 still parses
    # --num-continuous-decode-steps, the older lever for this, but reads it nowhere: a trial of it is the defaults.)
    # H200, agent c=64, kernel profile: a decode step of 9.57 ms against the defaults' 9.69 ms in the same run.
    Lever("--scheduler-recv-interval", "sri", ("4",), "decode steps between polls for new requests: ITL vs TTFT"),
    # 1 by default: the KV cache is paged per token. Pages of 16 give the attention kernels 16x fewer page indices
    # to read and the allocator fewer entries; a cached prefix is matched in whole pages (up to 15 tokens prefilled
    # again). Answers do not change. (--radix-eviction-policy is not here: it acts only once the cache must evict,
    # which the agent workload's 16 system prompts never make an H200's pool do; add it with LLMHOST_TUNE_SPACE.)
    Lever("--page-size", "ps", ("16",), "KV pages of 16 tokens: fewer page indices per step, prefixes in whole pages"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Trial:
    name: str
    settings: tuple[tuple[str, str], ...]  # ((flag, value), ...), lever order; () = the defaults
    stage: str  # "coarse" or "refine"
    also: tuple[str, ...] = ()  # the moved levers' `also` flags

    def flags(self) -> tuple[str, ...]:
        moved = tuple(part for flag, value in self.settings
                      for part in ((f"{flag}={value}",) if is_setting(flag) else (flag,) if value == SWITCH
                                   else (flag, value)))
        return moved + tuple(flag for flag in self.also if flag not in moved)

    def arm(self, index: int) -> Arm:
        if not self.settings:
            return Arm(DEFAULTS_NAME, "Defaults", "#1f77b4", (),
                       "The current defaults (config.env + config.local.env).", True)
        return Arm(self.name, self.name, _COLORS[index % len(_COLORS)], self.flags(),
                   f"Tuner trial ({self.stage}): defaults + {' '.join(self.flags())}")


def is_setting(flag: str) -> bool:
    """A lever that is a config.env setting (moved as KEY=value, like an arm's) rather than a launch flag."""
    return not flag.startswith("-")


def space_from_env(env: Mapping[str, str] | None = None) -> tuple[Lever, ...]:
    """SPACE, or the levers of $LLMHOST_TUNE_SPACE ("FLAG=v1,v2;FLAG=v3"); ValueError (one line) when malformed."""
    text = (os.environ if env is None else env).get(SPACE_ENV, "").strip()
    if not text:
        return SPACE
    levers = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        flag, _, values = part.partition("=")
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not flag.startswith("--") or not vals:
            raise ValueError(f"{SPACE_ENV}: {part!r} is not FLAG=v1,v2 (e.g. --max-running-requests=8,32)")
        problem = unread_flag_problem([flag])
        if problem:
            raise ValueError(f"{SPACE_ENV}: {problem}")
        lever = Lever(flag, flag.strip("-").replace("-", "")[:6], vals, f"from {SPACE_ENV}")
        # numeric values ascending, as probe_order and midpoints read them (extremes, neighbours by size)
        levers.append(dataclasses.replace(lever, values=tuple(sorted(vals, key=int))) if lever.is_numeric else lever)
    return tuple(levers)


def binding(space: Sequence[Lever], rows: Sequence[Row]) -> tuple[tuple[Lever, ...], list[str]]:
    """The space without the values that cannot change anything at these load rows, and what was left out (one
    phrase each): a --max-running-requests cap at or above the largest concurrency of closed-loop rows never binds,
    as no more requests than that are ever in flight (a Poisson row can queue past any cap: all stay). A lever left
    without values is left out whole."""
    if not rows or any(r[1] != "concurrency" for r in rows):
        return tuple(space), []
    most = max(int(r[2] or 0) for r in rows)
    kept: list[Lever] = []
    dropped: list[str] = []
    for lv in space:
        if lv.flag == "--max-running-requests" and lv.is_numeric:
            idle = [v for v in lv.values if int(v) >= most]
            if idle:
                dropped.append(f"{lv.flag} {','.join(idle)} (never binds at concurrency {most})")
                lv = dataclasses.replace(lv, values=tuple(v for v in lv.values if int(v) < most))
            if not lv.values:
                continue
        kept.append(lv)
    return tuple(kept), dropped


def settled(space: Sequence[Lever], current: Mapping[str, str],
            refused: Mapping[str, str]) -> tuple[tuple[Lever, ...], list[str]]:
    """The space without what the defaults' server settles already: a value it launches with (`current`: flag ->
    value, a bare flag as SWITCH; such a trial would be the defaults again) and a lever it would refuse to move
    (`refused`: flag -> why). What was left out comes back as one phrase each; a lever left without values goes."""
    kept: list[Lever] = []
    dropped: list[str] = []
    for lv in space:
        if lv.flag in refused:
            dropped.append(f"{lv.flag} ({refused[lv.flag]})")
            continue
        now = current.get(lv.flag)
        same = [v for v in lv.values if now is not None and _same_value(v, now)]
        if same:
            dropped.append(f"{lv.flag} {same[0]} (the defaults already launch with it)")
            lv = dataclasses.replace(lv, values=tuple(v for v in lv.values if v not in same))
        if lv.values:
            kept.append(lv)
    return tuple(kept), dropped


def _same_value(a: str, b: str) -> bool:
    return int(a) == int(b) if a.isdigit() and b.isdigit() else a == b


def trial_of(settings: Sequence[tuple[str, str]], space: Sequence[Lever], stage: str) -> Trial:
    keys = {lv.flag: lv.key for lv in space}
    order = [lv.flag for lv in space]
    ordered = tuple(sorted(settings, key=lambda s: order.index(s[0])))
    name = "-".join(keys[f] + ("" if v == SWITCH else v) for f, v in ordered) if ordered else DEFAULTS_NAME
    also = {lv.flag: lv.also for lv in space}
    return Trial(name.lower(), ordered, stage, tuple(dict.fromkeys(a for f, _ in ordered for a in also[f])))


def probe_order(lever: Lever) -> tuple[str, ...]:
    """A numeric lever's extremes before its middle values: the two ends show the direction of the effect."""
    v = lever.values
    return (v[0], v[-1], *v[1:-1]) if lever.is_numeric and len(v) > 2 else v


def coarse_trials(space: Sequence[Lever]) -> list[Trial]:
    """The defaults first, then one lever moved at a time, breadth first: every lever's first probe (in lever
    priority order), then every lever's second, ..., so a tight budget cuts middle values, not whole levers."""
    queues = [probe_order(lv) for lv in space]
    moved = [trial_of([(lv.flag, q[i])], space, "coarse") for i in range(max(map(len, queues), default=0))
             for lv, q in zip(space, queues) if i < len(q)]
    return [trial_of((), space, "coarse"), *moved]


def midpoints(lever: Lever, best: str) -> list[str]:
    """Geometric midpoints between a numeric lever's best coarse value and its coarse neighbours, rounded to a
    multiple of 8 (batch and chunk sizes), not already a coarse value."""
    if not lever.is_numeric or best not in lever.values:
        return []
    vals = [int(v) for v in lever.values]
    i = vals.index(int(best))
    out = []
    for j in (i - 1, i + 1):
        if 0 <= j < len(vals):
            mid = max(1, round(math.sqrt(vals[i] * vals[j]) / 8) * 8) if min(vals[i], vals[j]) >= 8 else \
                round(math.sqrt(vals[i] * vals[j]))
            if mid not in vals:
                out.append(str(mid))
    return out


def refine_trials(space: Sequence[Lever], scores: Mapping[str, float], tried: Sequence[Trial]) -> list[Trial]:
    """Around the best: (1) every lever's best value that beat the defaults' mean goodput, together (when two or
    more did); (2) for each of those levers, best first, the midpoints around its best value. `scores`: mean
    goodput by trial name (a trial without a score is skipped)."""
    base = scores.get(DEFAULTS_NAME, math.nan)
    best: dict[str, tuple[float, str]] = {}
    for t in tried:
        if len(t.settings) == 1 and t.name in scores and not math.isnan(scores[t.name]):
            flag, value = t.settings[0]
            if scores[t.name] > base and scores[t.name] > best.get(flag, (-math.inf, ""))[0]:
                best[flag] = (scores[t.name], value)
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    out: list[Trial] = []
    if len(ranked) >= 2:
        out.append(trial_of([(flag, value) for flag, (_, value) in ranked], space, "refine"))
    levers = {lv.flag: lv for lv in space}
    out += [trial_of([(flag, mid)], space, "refine") for flag, (_, value) in ranked
            for mid in midpoints(levers[flag], value)]
    names = {t.name for t in tried}
    return [t for t in out if t.name not in names]
