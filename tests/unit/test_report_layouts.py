"""Arms that differ in layout (one GPU, TP=2, DP=2 behind the router) on the dashboard: the layout named next to each
arm, per-worker KV/cache series, one line per GPU of the layouts, and the aggregation behind them."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from fixtures_bench import make_run
from llmhost import stats
from llmhost.report import dashboard, figures, layouts, load, tables, timeline

SLO = stats.Slo(500.0, 20.0, 99.0)
ROUTER = {"name": "router", "port": 30000, "gpus": None, "tp_size": None, "dp_size": None}


def server(gpus: str, tp: int = 1, dp: int = 1, name: str = "server", port: int = 30000) -> dict:
    return {"name": name, "port": port, "gpus": gpus, "tp_size": tp, "dp_size": dp}


LAYOUTS = {"baseline": [server("0")], "fp8-kv": [server("0,1", tp=2)],  # no-prefix-cache: none recorded
           "triton": [server("0", name="worker0", port=30001), server("1", name="worker1", port=30002), ROUTER]}


@pytest.mark.parametrize(("layout", "text"), [
    ([server("")], "1 GPU"), ([server("3")], "GPU 3"), ([server("0,1", tp=2)], "TP 2 on GPUs 0,1"),
    ([server("", tp=2, dp=2)], "TP 2 × DP 2"), (LAYOUTS["triton"], "router → 2 workers, GPUs 0 | 1"),
    ([server("0,1", 2, name="worker0"), server("2,3", 2, name="worker1"), ROUTER],
     "router → 2 workers × TP 2, GPUs 0,1 | 2,3"),
    ([ROUTER], "router → workers elsewhere"), ([], ""),
])
def test_a_layout_reads_as_its_gpus_and_tp_dp_sizes(layout: list[dict], text: str) -> None:
    assert layouts.describe(layout) == text


def spread(run_dir: Path) -> Path:
    """The fixture run as if its arms had LAYOUTS: the router arm's /metrics samples come from two workers (the
    second with half the first's counters and pool use), and every GPU sample from GPUs 0, 1 and an idle 2."""
    plan = json.loads((run_dir / "manifest.json").read_text())["plan"]
    arm_of = {p["point_id"]: p["arm"] for p in plan}
    out = []
    for line in (run_dir / "telemetry.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the fixture's torn last line
        if row["source"] == "gpu":
            out += [{**row, "labels": {"gpu": g}, "value": row["value"] * (g != "2")} for g in "012"]
        elif arm_of.get(row["point_id"]) == "triton":
            out += [{**row, "labels": {**row["labels"], "worker": w}, "value": row["value"] / (1 + i)}
                    for i, w in enumerate(("worker0", "worker1"))]
        else:
            out.append(row)
    (run_dir / "telemetry.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    for arm, layout in LAYOUTS.items():
        path = run_dir / "servers" / f"{arm}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "layout": layout}))
    return run_dir


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> load.Run:
    return load.load_run(spread(make_run(tmp_path_factory.mktemp("runs"), n=8, repeats=1, toolcalls=False)))


def context(run: load.Run) -> figures.Context:
    groups = tables.build_groups(run)
    return figures.Context(run, groups, tables.summary_rows(groups, SLO), tables.baseline_rows(run, groups, SLO), SLO)


def test_each_arm_is_labelled_with_its_layout_when_layouts_differ(run: load.Run) -> None:
    labelled = {a.name: a.label for a in layouts.with_layout_labels(run).arms}
    assert labelled == {"baseline": "Baseline (FlashInfer) [GPU 0]", "no-prefix-cache": "No prefix cache",
                        "fp8-kv": "FP8 KV cache [TP 2 on GPUs 0,1]",
                        "triton": "Triton attention [router → 2 workers, GPUs 0 | 1]"}
    assert layouts.layout_gpus(run) is None  # no-prefix-cache's GPUs are not known
    plain = load.load_run(make_run(Path(run.path).parents[2] / "plain", n=8, repeats=1, toolcalls=False))
    assert layouts.with_layout_labels(plain) is plain and layouts.layout_gpus(plain) is None


def test_the_settings_table_names_each_compared_arms_layout(run: load.Run) -> None:
    built = dashboard.build(run, SLO)
    assert built.meta["layouts"]["fp8-kv"] == "TP 2 on GPUs 0,1" and "no-prefix-cache" not in built.meta["layouts"]
    html = built.html
    section = html[html.index("id=baseline"):html.index("id=steady")]
    assert "Triton attention [router → 2 workers, GPUs 0 | 1]" in section
    assert "FP8 KV cache [TP 2 on GPUs 0,1]" in section


def test_the_kv_chart_adds_a_line_per_worker_only_for_the_arm_with_several(run: load.Run) -> None:
    chart = timeline.kv_cache(context(layouts.with_layout_labels(run)))
    names = {t.name for t in chart.figure.data}
    router = "Triton attention [router → 2 workers, GPUs 0 | 1]"
    assert {router, f"{router} · worker0", f"{router} · worker1"} <= names
    assert not [n for n in names if "·" in n and not n.startswith(router)]
    assert "a thinner dashed line each worker's own" in chart.how_to_read


def test_the_gpu_chart_draws_one_line_per_gpu_of_the_layouts(run: load.Run) -> None:
    known = dict(run.servers)
    known["no-prefix-cache"] = run.servers["baseline"]
    ctx = context(dataclasses.replace(run, servers=known))
    assert layouts.layout_gpus(ctx.run) == {"0", "1"}
    chart = timeline.gpu(ctx)
    names = {t.name for t in chart.figure.data}
    assert {"Baseline (FlashInfer) · GPU 0", "Baseline (FlashInfer) · GPU 1"} <= names
    assert not [n for n in names if "GPU 2" in n] and "One line per GPU" in chart.how_to_read
    dashes = {t.name.split(" · ")[1]: t.line.dash for t in chart.figure.data if " · " in t.name}
    assert dashes == {"GPU 0": "solid", "GPU 1": "dash"}


def frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["t", "name", "value", "arm", "worker", "rank"])
    return df.assign(minute=df["t"] / 60.0, gpu="")


def test_the_hit_rate_is_per_worker_and_summed_over_workers_carrying_a_missed_scrape() -> None:
    c, p = timeline.CACHED, timeline.PROMPT
    ticks = [(1, "worker0", 0, 100), (1, "worker1", 0, 100), (2, "worker0", 50, 200), (2, "worker1", 100, 200),
             (3, "worker0", 150, 300), (4, "worker0", 200, 400), (4, "worker1", 300, 400)]  # worker1 missed t=3
    rows = [r for t, w, cached, prompt in ticks for r in ((t, c, cached, "dp", w, ""), (t, p, prompt, "dp", w, ""))]
    rate = timeline.cumulative_hit_rate(frame([*rows, (9, p, 1000.0, "one", "", "")]))
    summed = rate[rate["series"] == ""]
    assert list(zip(summed["t"], summed["arm"], summed["value"])) == [
        (1, "dp", 0.0), (2, "dp", 37.5), (3, "dp", 50.0), (4, "dp", 62.5), (9, "one", 0.0)]  # t=3: (150+100)/(300+200)
    worker1 = rate[rate["series"] == "worker1"]
    assert list(zip(worker1["t"], worker1["value"])) == [(1, 0.0), (2, 50.0), (4, 75.0)]
    assert set(rate[rate["arm"] == "one"]["series"]) == {""}  # one server: its line only


def test_kv_use_is_drawn_per_engine_and_as_the_arms_mean() -> None:
    rows = [(1, timeline.KV_USED, 0.2, "dp", "", "0"), (1, timeline.KV_USED, 0.6, "dp", "", "1"),
            (1, timeline.KV_USED, 0.5, "r", "worker0", ""), (1, timeline.KV_USED, 0.1, "r", "worker1", "")]
    used = timeline.kv_used(frame(rows)).set_index(["arm", "series"])["value"]
    assert used.to_dict() == pytest.approx({("dp", ""): 40.0, ("r", ""): 30.0, ("dp", "dp0"): 20.0,
                                            ("dp", "dp1"): 60.0, ("r", "worker0"): 50.0, ("r", "worker1"): 10.0})


def test_gpu_samples_keep_the_layouts_gpus_and_one_gpu_keeps_one_unnamed_line() -> None:
    df = pd.DataFrame({"gpu": ["0", "1", "2"], "value": [1.0, 2.0, 3.0]})
    assert timeline.per_gpu(df, {"0", "1"})["series"].tolist() == ["GPU 0", "GPU 1"]
    assert timeline.per_gpu(df, None)["series"].tolist() == ["GPU 0", "GPU 1", "GPU 2"]
    assert timeline.per_gpu(df, {"1"})["series"].tolist() == [""]
    assert timeline.per_gpu(df, {"7"})["series"].tolist() == ["GPU 0", "GPU 1", "GPU 2"]  # labels not matching
