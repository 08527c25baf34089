"""The split-KV stage's headline (fi_summary.json's "balance") by hand, whole: every key, each number from the cases
it names, the checks that failed counted, and nothing for a stage without the planner's own cases."""
from __future__ import annotations

from llmhost.fi import balance


def row(batch: int, dist: str, split: str, median_us: float, **extra) -> dict:
    return {"batch": batch, "distribution": dist, "split": split, "median_us": median_us, **extra}


# batch 4 splits (off is 3x slower), batch 128 does not (a forced split costs 25%); the graph wrapper plans batch 4
# with fast_decode_plan in 6 us and batch 128 without a recorded time; the event timer read 1.25x and 1.5x
CASES = [
    row(4, "zipf", "auto", 100.0, plan_us=50.0, split_kv=True, work_units=33, timing="graph"),
    row(4, "zipf", "off", 300.0),
    row(4, "zipf", "graph", 120.0, fast_plan_us=6.0, split_kv=True, work_units=33),
    row(128, "zipf", "auto", 400.0, plan_us=90.0, split_kv=False, work_units=1024, event_median_us=600.0,
        event_over_precise=1.5),
    row(128, "zipf", "forced", 500.0),
    row(128, "zipf", "graph", 200.0, fast_plan_us=None, split_kv=False),
    row(4, "uniform", "auto", 110.0, plan_us=70.0, split_kv=False, work_units=32, event_median_us=137.5,
        event_over_precise=1.25),
]
DOC = {"cases": CASES, "num_layers": 36, "planning": "plans once per batch", "sm_count": 132, "num_kv_heads": 8,
       "checks": [{"check": "a", "ok": True}, {"check": "b", "ok": False}, {"check": "c"}]}


def test_every_number_of_the_headline_comes_from_the_cases_it_names():
    got = balance.headline(DOC)
    assert got == {
        "split_kv_speedup": {"zipf": {"batch 4": 3.0}},
        "split_kv_best": {"zipf": 3.0},
        "planner_splits": {"zipf": {"4": "split, 33 units", "128": "no split"}, "uniform": {"4": "no split"}},
        "forced_split_speedup_where_declined": {"zipf": {"batch 128": 400.0 / 500.0}},
        "graph_planning_speedup": {"zipf": {"batch 4": 100.0 / 120.0, "batch 128": 400.0 / 200.0}},
        "planner_cap_work_units": 33,
        "plan_us_per_call": 70.0,  # the median of 50, 90 and 70
        "fast_plan_us_per_call": 6.0,
        "plan_us_per_layer": 70.0 / 36,
        "sglang_graph_decode_pays": "fast_decode_plan",
        "timing": {"method": "graph", "compared": 2, "event_over_precise_median": 1.375,
                   "event_over_precise_min": 1.25, "event_over_precise_max": 1.5,
                   "largest_gap_case": "batch 128 zipf auto", "largest_gap_us": 200.0},
        "num_layers": 36, "planning": "plans once per batch",
        "by_batch": {"batch 4": {"plan_us": 60.0, "fast_plan_us": 6.0, "kernel_us_per_layer": 105.0},
                     "batch 128": {"plan_us": 90.0, "fast_plan_us": None, "kernel_us_per_layer": 400.0}},
        "checks_failed": 2}


def test_without_fast_plan_times_sglang_s_graph_planning_is_not_claimed():
    doc = {**DOC, "cases": [c for c in CASES if c["split"] != "graph"], "checks": []}
    got = balance.headline(doc)
    assert got["fast_plan_us_per_call"] is None and got["sglang_graph_decode_pays"] is None
    assert got["graph_planning_speedup"] == {} and got["checks_failed"] == 0
    assert got["by_batch"]["batch 4"]["fast_plan_us"] is None


def test_the_planner_cap_needs_both_the_sm_count_and_the_kv_heads():
    assert balance.headline({**DOC, "sm_count": None})["planner_cap_work_units"] is None
    assert balance.headline({**DOC, "num_kv_heads": None})["planner_cap_work_units"] is None


def test_a_stage_without_the_planner_s_own_cases_has_no_headline():
    assert balance.headline({"cases": [row(4, "zipf", "off", 1.0)], "num_layers": 36}) == {}
    assert balance.headline({"num_layers": 36}) == {}
