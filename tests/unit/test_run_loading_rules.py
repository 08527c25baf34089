"""Reading a run directory (llmhost.report.load) on worked records: each request column as stored (NaN for what
was not recorded, float whatever the JSON held), bench_serving's TPOT and its fallbacks, points pooled across
repeats, and the run-level pieces the dashboard takes from the manifest and the side files (the SLO, tool calls,
servers, and a warning for each thing skipped)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from llmhost import stats
from llmhost.bench.records import RequestRecord
from llmhost.report import load
from tests.fixtures_bench import make_run


def rec(**kw) -> RequestRecord:
    base = dict(start_s=100.0, ok=True, error="", prompt_tokens=4096, output_tokens=5, ttft_ms=200.0,
                itl_ms=(10.0, 10.0, 10.0, 10.0), e2e_ms=240.0)
    return RequestRecord(**{**base, **kw})


def test_each_column_holds_the_records_values_as_floats_and_nan_where_nothing_was_recorded():
    rows = [rec(start_s=1, prompt_tokens=7, output_tokens=3, ttft_ms=50.0, itl_ms=(4.0, 6.0), e2e_ms=60.0,
                cached_tokens=5, headers_ms=12.5),
            rec(start_s=2, ok=False, error="boom", prompt_tokens=9, output_tokens=0, ttft_ms=None, itl_ms=(),
                e2e_ms=3.0)]
    cols = load.requests_from_records(rows)
    assert cols.n == 2 and cols.errors == ("boom",)
    for name in ("start_s", "prompt_tokens", "output_tokens", "ttft_ms", "itl_mean_ms", "itl_all_ms", "e2e_ms",
                 "cached_tokens", "headers_ms"):
        assert getattr(cols, name).dtype == np.float64, name  # ints in JSON still read as floats
    assert cols.ok.tolist() == [True, False]
    assert cols.start_s.tolist() == [1.0, 2.0] and cols.prompt_tokens.tolist() == [7.0, 9.0]
    assert cols.output_tokens.tolist() == [3.0, 0.0] and cols.e2e_ms.tolist() == [60.0, 3.0]
    assert cols.ttft_ms[0] == 50.0 and math.isnan(cols.ttft_ms[1])
    assert cols.cached_tokens[0] == 5.0 and math.isnan(cols.cached_tokens[1])
    assert cols.headers_ms[0] == 12.5 and math.isnan(cols.headers_ms[1])
    assert cols.itl_all_ms.tolist() == [4.0, 6.0]  # every gap of every request, pooled
    assert cols.itl_mean_ms[0] == pytest.approx((60.0 - 50.0) / 2) and math.isnan(cols.itl_mean_ms[1])


def test_no_records_make_empty_float_columns():
    cols = load.requests_from_records([])
    assert cols.n == 0 and cols.errors == () and cols.itl_all_ms.dtype == np.float64


def test_tpot_is_the_time_after_the_first_token_over_the_tokens_after_it_not_the_mean_chunk_gap():
    # a chat stream whose chunks carried two tokens each: 3 gaps of 20 ms for 7 tokens
    assert load._tpot(rec(output_tokens=7, ttft_ms=100.0, e2e_ms=160.0, itl_ms=(20.0, 20.0, 20.0))) == 10.0
    assert load._tpot(rec(output_tokens=2, ttft_ms=100.0, e2e_ms=100.0, itl_ms=(7.0,))) == 0.0  # all at once


def test_tpot_falls_back_to_the_mean_gap_without_a_usable_first_token_and_is_nan_without_gaps():
    assert load._tpot(rec(ttft_ms=None, itl_ms=(2.0, 4.0, 9.0))) == pytest.approx(5.0)
    assert load._tpot(rec(output_tokens=1, ttft_ms=100.0, e2e_ms=100.0, itl_ms=(3.0,))) == 3.0
    assert load._tpot(rec(ttft_ms=300.0, e2e_ms=250.0, itl_ms=(8.0,))) == 8.0  # a clock that ran backwards
    assert math.isnan(load._tpot(rec(ttft_ms=None, itl_ms=())))


def test_repeats_pool_column_by_column_and_keep_every_error():
    a = load.requests_from_records([rec(start_s=1, itl_ms=(1.0,)), rec(ok=False, error="x", ttft_ms=None, itl_ms=())])
    b = load.requests_from_records([rec(start_s=3, itl_ms=(2.0, 3.0), cached_tokens=4, ok=False, error="y")])
    both = load.Requests.concat([a, b])
    assert both.n == 3 and both.errors == ("x", "y")
    assert both.start_s.tolist() == [1.0, 100.0, 3.0] and both.itl_all_ms.tolist() == [1.0, 2.0, 3.0]
    assert both.ok.tolist() == [True, False, False]
    assert math.isnan(both.cached_tokens[0]) and both.cached_tokens[2] == 4.0
    empty = load.Requests.concat([])
    assert empty.n == 0 and empty.errors == () and empty.e2e_ms.size == 0


def test_the_run_carries_the_manifests_slo_its_tool_calls_and_servers(tmp_path: Path):
    run = load.load_run(make_run(tmp_path, torn=False))
    assert run.slo == stats.Slo(500.0, 20.0, 99.0)
    assert run.toolcalls and run.servers and set(run.servers) == {a.name for a in run.arms}
    assert run.arm("baseline").name == "baseline"
    stranger = run.arm("nobody")
    assert (stranger.name, stranger.label, stranger.color) == ("nobody", "nobody", "#7f7f7f")


@pytest.mark.parametrize("raw", [None, {}, {"ttft_ms": 500.0, "itl_ms": 20.0}])
def test_a_run_without_a_whole_slo_has_none(raw):
    assert load._slo(raw) is None


def test_what_is_skipped_is_named_once_each(tmp_path: Path):
    path = make_run(tmp_path, torn=False)
    (path / "servers" / "broken.json").write_text("{not json")
    first_ok = next(json.loads(line) for line in (path / "points.jsonl").read_text().splitlines()
                    if json.loads(line)["status"] == "ok")
    (path / first_ok["requests_file"]).unlink()
    with open(path / "telemetry.jsonl", "a") as fh:
        fh.write(json.dumps({"t": 1.0, "source": "gap", "name": "telemetry_gap_s", "labels": {}, "value": 4.0,
                             "point_id": None}) + "\n")
    run = load.load_run(path)
    said = "\n".join(run.warnings)
    assert f"{first_ok['requests_file']} is missing (point {first_ok['point_id']} has no request data)" in said
    assert "servers/broken.json skipped: " in said
    assert "telemetry.jsonl: 1 gap(s), 4 s of samples not written (first: no reason recorded)" in said
    assert set(run.servers) == {a.name for a in run.arms}  # the other servers still read after the broken one
    assert run.requests[first_ok["point_id"]].n == 0


def test_a_directory_that_is_not_a_run_is_named_with_the_fix(tmp_path: Path):
    with pytest.raises(load.LoadError, match="is not a directory — pass a run directory"):
        load.run_manifest(tmp_path / "nope")
    (tmp_path / "latest").mkdir()
    with pytest.raises(load.LoadError) as exc:
        load.run_manifest(tmp_path)
    assert str(exc.value) == f"{tmp_path / 'manifest.json'} is missing — did you mean {tmp_path / 'latest'}?"
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(load.LoadError) as exc:
        load.run_manifest(bare)
    assert "did you mean" not in str(exc.value)  # no latest beside it: the reader's own words


def test_an_arm_the_manifest_does_not_name_is_shown_grey_with_no_flags(tmp_path: Path):
    run = load.load_run(make_run(tmp_path, torn=False))
    assert run.arm("nobody") == load.Arm("nobody", "nobody", "#7f7f7f", (), "(not in manifest)", False)
    side = load.SideRun(run.path, run.manifest, (), ())
    assert side.arm_label("nobody") == "nobody"
    assert side.arm_label(run.arms[0].name) == run.arms[0].label
