"""Which CUDA graphs the server captures at start-up: CUDA_GRAPH_PREFILL_TOKENS and CUDA_GRAPH_DECODE_BATCHES.

SGLang 0.5.17 captures a prefill graph for 58 token counts up to the prefill chunk (8192 on an H200) and a decode
graph for 36 batch sizes up to 256; on a warm H200 that took 8 s and 3.4 s of a 38 s start. Our lists are shorter
(config.env has the measurement): prefill graphs only up to 2048 tokens, where a step is short enough for the launch
overhead a graph removes to matter (a larger prefill runs eagerly, GPU-bound either way), and decode sizes further
apart, where padding a batch to the next size costs next to nothing (decode steps are bound by memory, not rows).

A phase's list is left out (SGLang decides) when SERVER_EXTRA_ARGS or a benchmark arm sets any flag that decides
that phase's graphs, so `--cuda-graph-max-bs 64` or `--disable-piecewise-cuda-graph` mean what they say. The decode
list is also cut to what SGLang itself would capture on this GPU (fewer, smaller graphs on GPUs under 60 GiB), and
left out where SGLang would capture larger batches than ours (TP_SIZE >= 4, GPUs of 160 GiB and more).
"""
from __future__ import annotations

from collections.abc import Sequence

# SGLang 0.5.17 flags (and old spellings) that decide the graphs of one phase; --cuda-graph-config and
# --disable-cuda-graph decide both.
BOTH_FLAGS = frozenset({"--cuda-graph-config", "--disable-cuda-graph"})
PREFILL_FLAGS = BOTH_FLAGS | {
    "--cuda-graph-bs-prefill", "--cuda-graph-max-bs-prefill", "--cuda-graph-backend-prefill",
    "--disable-prefill-cuda-graph", "--disable-piecewise-cuda-graph", "--enable-breakable-cuda-graph",
    "--enforce-piecewise-cuda-graph", "--piecewise-cuda-graph-tokens", "--piecewise-cuda-graph-max-tokens"}
DECODE_FLAGS = BOTH_FLAGS | {
    "--cuda-graph-bs-decode", "--cuda-graph-max-bs-decode", "--cuda-graph-backend-decode",
    "--disable-decode-cuda-graph", "--disable-cuda-graph-padding", "--cuda-graph-bs", "--cuda-graph-max-bs"}
PREFILL_FLAG, DECODE_FLAG = "--cuda-graph-bs-prefill", "--cuda-graph-bs-decode"


def sizes(setting: str) -> list[int]:
    """'auto' -> []; '4 8 16' -> [4, 8, 16], sorted, each once (llmhost.settings' check refused anything else)."""
    return [] if setting == "auto" else sorted({int(w) for w in setting.split()})


def sglang_decode_max(total_mib: float, tp_size: int) -> int:
    """The largest decode batch SGLang 0.5.17 captures by default on a GPU of `total_mib` (ServerArgs.
    _handle_gpu_memory_settings, per GPU memory tier)."""
    if total_mib < 20 * 1024:
        return 8
    if total_mib < 35 * 1024:
        return 24 if tp_size < 4 else 80
    if total_mib < 60 * 1024:
        return 32 if tp_size < 4 else 160
    if total_mib < 160 * 1024:
        return 256 if tp_size < 4 else 512
    return 512


def decode_sizes(wanted: list[int], total_mib: float | None, tp_size: int) -> list[int]:
    """`wanted` cut to SGLang's own largest batch on this GPU (that batch included, so it keeps its graph); [] (SGLang
    decides) when SGLang's own list reaches past ours. An unknown GPU (None) keeps `wanted` as it is."""
    if not wanted or total_mib is None:
        return wanted
    top = sglang_decode_max(total_mib, tp_size)
    if top > wanted[-1]:
        return []
    return sorted({*(b for b in wanted if b <= top), top})


def prefill_sizes(wanted: list[int], chunk: str) -> list[int]:
    """`wanted` cut to a set prefill chunk (no prefill step is longer); auto or -1 (no chunking) keep it."""
    limit = int(chunk) if chunk.lstrip("-").isdigit() and int(chunk) > 0 else None
    return [t for t in wanted if limit is None or t <= limit]


def graph_flags(prefill: str, decode: str, chunk: str, tp_size: int, total_mib: float | None,
                other_flags: Sequence[str]) -> tuple[list[list[str]], list[str]]:
    """([flag groups for the launch command], [notes]) from the two settings, given the flag names SERVER_EXTRA_ARGS
    and the arm set (`other_flags`) and the GPU's total memory (None: unknown)."""
    given = {f.split("=", 1)[0] for f in other_flags}
    groups: list[list[str]] = []
    notes: list[str] = []
    for setting, flag, phase_flags, values in (
            ("CUDA_GRAPH_PREFILL_TOKENS", PREFILL_FLAG, PREFILL_FLAGS, prefill_sizes(sizes(prefill), chunk)),
            ("CUDA_GRAPH_DECODE_BATCHES", DECODE_FLAG, DECODE_FLAGS, decode_sizes(sizes(decode), total_mib, tp_size))):
        taken = sorted(given & phase_flags)
        if taken and values:
            notes.append(f"{' '.join(taken)} given: {setting} left out (SGLang decides those graphs)")
        elif values:
            groups.append([flag, *map(str, values)])
        elif setting == "CUDA_GRAPH_DECODE_BATCHES" and sizes(decode) and not taken:
            notes.append(f"{setting} stops at {sizes(decode)[-1]}, below the "
                         f"{sglang_decode_max(total_mib or 0.0, tp_size)} SGLang captures on this GPU: left out "
                         f"(SGLang decides those graphs; {DECODE_FLAG} captures exactly the sizes given)")
    return groups, notes
