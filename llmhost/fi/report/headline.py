"""The report's headline: one row per question a reader brings, answered from fi_summary.json.

The full summary (every number each stage reports) follows it, folded, so the page opens with answers rather than
with ninety rows. A question whose numbers are missing (stage not run, older summary) is left out.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmhost.fi.report.figures import fmt


def _spread(values: dict[str, Any]) -> str:
    """'1.000-1.005x' over a {page: {placement: ratio}} or {name: ratio} mapping."""
    flat = [v for inner in values.values() for v in (inner.values() if isinstance(inner, dict) else [inner])
            if isinstance(v, (int, float))]
    return f"{min(flat):.3f}-{max(flat):.3f}x" if flat else "-"


def _pairs(values: dict[str, Any], unit: str = "") -> str:
    return " · ".join(f"{k}: {fmt(v) if isinstance(v, (int, float)) else v}{unit}" for k, v in values.items())


def _sparse(s: dict) -> list[tuple[str, str]]:
    timing = s.get("timing") or {}
    return [
        ("How close does decode get to the bandwidth ceiling?",
         f"{fmt(s['decode_gb_s_best'])} GB/s = {fmt(s['decode_pct_peak_best'])}% of peak, "
         f"{fmt(s.get('decode_pct_copy_best'))}% of the measured copy ({s.get('best_case', '-')})"),
        ("...in the configuration SGLang uses?",
         f"{fmt(s.get('decode_gb_s_sglang_like'))} GB/s = {fmt(s.get('decode_pct_peak_sglang_like'))}% of peak"),
        ("Which kernel path, at what share of peak?", _pairs(s.get("pct_peak_by_kernel") or {})),
        ("Does scattering KV pages cost time?",
         f"scattered / contiguous time {_spread(s.get('scattered_over_contiguous_time') or {})}"),
        *_shared_prompt(s),
        *_two_level(s),
        ("Does FP8 KV pay?", f"FP8 / BF16 speed-up {_pairs(s.get('fp8_over_bf16_speedup') or {}, 'x')} "
                             f"(limited by: {_pairs(s.get('fp8_limit') or {})})"),
        ("Are the outputs right?",
         f"{s.get('checks_failed', '-')} checks failed; {s.get('checks_bitwise', '-')} scattered outputs "
         f"bit-identical to contiguous; {s.get('reference_checks_blind_to_a_dropped_token', '-')} checks blind "
         "to one dropped token (reported, not passed)"),
        ("Can the timer be trusted?",
         f"{timing.get('method', '-')} timing; CUDA events read {fmt(timing.get('event_over_precise_median'))}x "
         f"(median), up to {fmt(timing.get('event_over_precise_max'))}x"),
    ]


def _shared_prompt(s: dict) -> list[tuple[str, str]]:
    if not s.get("shared_prompt_over_private_time"):  # not measured (placements left out, or an older summary)
        return []
    return [("Does decode read a shared prompt's pages once per request?",
             f"time / private pages {_pairs(s['shared_prompt_over_private_time'], 'x')}; counting each shared page "
             f"once, % of peak {_pairs(s.get('shared_prompt_distinct_pct_peak') or {}, '%')} "
             f"({s.get('shared_prompt_case', '-')})")]


def _two_level(s: dict) -> list[tuple[str, str]]:
    if not s.get("two_level_over_one_level"):
        return []
    saving = s.get("two_level_step_saving_ms")
    return [("What would reading each shared prompt once save?",
             f"two-level / one-level time {_pairs(s['two_level_over_one_level'], 'x')}; with level 0 on the "
             f"prefill kernel {_pairs(s.get('prefill_level0_over_one_level') or {}, 'x')}"
             + (f"; both levels in one launch {_pairs(s['one_launch_over_one_level'], 'x')}"
                if s.get("one_launch_over_one_level") else "")
             + f"; FlashInfer's cascade "
             f"wrapper {_pairs(s.get('cascade_wrapper_over_one_level') or {}, 'x')}"
             + (f"; per decode step over all layers {_pairs(saving, ' ms')}" if saving else "")
             + f" ({s.get('two_level_case', '-')})")]


def _balance(b: dict) -> list[tuple[str, str]]:
    return [
        ("What does split-KV save where the planner splits?", _pairs(b.get("split_kv_best") or {}, "x")),
        ("Where does the planner stop splitting?", f"above {b.get('planner_cap_work_units', '-')} work units"),
        ("What does planning cost per decode step?",
         f"plan() {fmt(b.get('plan_us_per_call'))} us, fast_decode_plan {fmt(b.get('fast_plan_us_per_call'))} us; "
         f"SGLang's graph decode pays {b.get('sglang_graph_decode_pays', '-')}"),
    ]


def _jit(j: dict) -> list[tuple[str, str]]:
    return [("What does a kernel's first use cost?",
             f"{j.get('variants', '-')} variants, {j.get('failed', '-')} failed; "
             f"compile {fmt(j.get('compile_s_median'))} s median, {fmt(j.get('compile_s_max'))} s max "
             f"({j.get('slowest_variant', '-')}); cached first call {fmt(j.get('cached_first_call_s_median'))} s")]


def _trace(t: dict) -> list[tuple[str, str]]:
    return [
        ("What does the live server's decode look like?",
         f"{fmt(t.get('decode_steps_graph'))} CUDA-graph steps, {fmt(t.get('decode_steps_eager'))} eager; "
         f"page sharing {fmt(t.get('decode_sharing_ratio'))}"),
        ("What does the trace cost the server?",
         f"throughput {fmt(t.get('tracer_throughput_change_pct'))}%, TPOT {fmt(t.get('tracer_tpot_change_pct'))}% "
         f"with it on ({t.get('tracer_verdict', '-')}: phases of one arm differ by {fmt(t.get('tracer_noise_pct'))}%)"),
    ]


QUESTIONS: dict[str, Callable[[dict], list[tuple[str, str]]]] = {
    "sparse": _sparse, "balance": _balance, "jit": _jit, "trace": _trace}


def rows(head: dict) -> list[list[str]]:
    """[stage, question, answer] for every stage with data; a stage whose summary lacks a number is skipped."""
    out: list[list[str]] = []
    for stage, questions in QUESTIONS.items():
        data = head.get(stage)
        if not data:
            continue
        try:
            out += [[stage, q, a] for q, a in questions(data)]
        except (KeyError, TypeError, ValueError):  # an older or partial summary: its full table still shows
            continue
    return out
