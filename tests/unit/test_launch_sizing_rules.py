"""The launch settings that decide what a start gets (llmhost.serve.spec.mem_fraction, llmhost.serve.graphs) and a
point's achieved rate (llmhost.bench.points.summarize), at their edges: a fraction of exactly 0 or 1 refused, a GPU
within 1 GiB of empty left to SGLang, the smallest pool that still starts, the note's GiB figures; SGLang 0.5.17's
decode-graph tiers at each boundary; prefill graphs cut at a set chunk; an extra flag replacing ours in place;
SERVER_ENV pairs split at their first '='; the rate from the first to the last start, or over the duration for one
request, and the client called out only below its slack."""
from __future__ import annotations

import dataclasses

import pytest

from llmhost import config
from llmhost.bench import points
from llmhost.bench.records import RequestRecord
from llmhost.serve import graphs, spec

GIB = 1024.0


@pytest.mark.parametrize("setting", ["0", "1", "1.0", "0.0", "-0.5", "nine"])
def test_a_fraction_outside_zero_to_one_is_refused_in_one_line(setting):
    with pytest.raises(spec.SpecError) as exc:
        spec.mem_fraction(setting, None)
    assert str(exc.value) == f"MEM_FRACTION_STATIC={setting!r} must be auto or a number between 0 and 1"


def test_a_fraction_given_is_used_as_it_is_without_a_note():
    assert spec.mem_fraction("0.85", (10 * GIB, 141 * GIB)) == (0.85, "")
    assert spec.mem_fraction("auto", None) == (None, "")


def test_a_gpu_within_a_gib_of_empty_is_left_to_sglang():
    total = 141 * GIB
    assert spec.mem_fraction("auto", (total - GIB, total)) == (None, "")
    assert spec.mem_fraction("auto", (total, total)) == (None, "")
    assert spec.mem_fraction("auto", (total - GIB - 1, total))[0] is not None
    assert spec.mem_fraction("auto", (0.0, 0.0)) == (None, "")  # a GPU that reports no memory


def test_auto_keeps_sglangs_reserve_in_mib_and_says_so_in_gib():
    total, free = 140 * GIB, 100 * GIB  # reserve 9.7% of 140 GiB = 13.58 GiB
    fraction, note = spec.mem_fraction("auto", (free, total))
    assert fraction == round(1 - 0.097 * total / free, 3) == 0.864
    assert note == ("GPU already holds 40.0 GiB: --mem-fraction-static 0.864 of the 100.0 GiB free keeps SGLang's "
                    "13.6 GiB runtime reserve")
    assert spec.mem_fraction("auto", (20 * GIB, 24 * GIB))[0] == 0.8  # a small GPU keeps at least 4 GiB


def test_the_smallest_pool_that_starts_is_two_gib_past_the_reserve():
    total = 24 * GIB  # reserve 4 GiB
    assert spec.mem_fraction("auto", (6 * GIB + 1, total))[0] == round(1 - 4 * GIB / (6 * GIB + 1), 3)
    fraction, note = spec.mem_fraction("auto", (6 * GIB - 1, total))
    assert fraction is None
    assert note == ("the GPU has only 6.0 of 24.0 GiB free: not enough to start (start refuses; stop what holds it "
                    "or set MEM_FRACTION_STATIC)")
    exactly = spec.mem_fraction("auto", (6 * GIB, total))
    assert exactly[0] == round(1 - 4 / 6, 3) and exactly[1].startswith("GPU already holds 18.0 GiB")


@pytest.mark.parametrize(("total_gib", "tp", "top"), [
    (20 - 1 / 1024, 1, 8), (20, 1, 24), (35 - 1 / 1024, 1, 24), (35 - 1 / 1024, 4, 80), (35, 1, 32), (35, 3, 32),
    (35, 4, 160), (60 - 1 / 1024, 4, 160), (60, 1, 256), (60, 4, 512), (160 - 1 / 1024, 1, 256), (160, 1, 512),
    (160, 8, 512)])
def test_sglangs_own_decode_graph_tiers_at_each_boundary(total_gib, tp, top):
    assert graphs.sglang_decode_max(total_gib * 1024, tp) == top


def _starts(*at: float) -> list[RequestRecord]:
    return [RequestRecord(t, True, "", 1, 2, 1.0, (0.5,), 2.0) for t in at]


def test_the_achieved_rate_runs_from_the_first_start_to_the_last():
    s = points.summarize({"duration": 100.0}, _starts(3.0, 1.0, 5.0), None)
    assert s.achieved_rate == pytest.approx(2 / 4) and s.client_bound is False and s.offered_rate is None
    assert s.samples == {"ttft_ms": 3, "itl_ms": 3, "e2e_ms": 3}


def test_one_request_or_one_instant_falls_back_to_the_duration_and_nothing_to_zero():
    assert points.summarize({"duration": 4.0}, _starts(7.0), None).achieved_rate == pytest.approx(1 / 4)
    assert points.summarize({"duration": 4.0}, _starts(7.0, 7.0), None).achieved_rate == pytest.approx(2 / 4)
    empty = points.summarize({}, [], None)
    assert (empty.achieved_rate, empty.duration_s, empty.completed, empty.output_throughput) == (0.0, 0.0, 0, 0.0)
    lone = points.summarize({"duration": 0.0}, _starts(7.0), 2.0)  # offered 2/s; one start measures no gap
    assert lone.achieved_rate == 0.0 and lone.client_bound is False


def test_the_client_is_called_out_only_below_the_offered_rate_less_its_slack():
    # 101 starts 1 s apart: 1 req/s achieved; the slack for 100 gaps is max(5%, 3/sqrt(100)) = 30%
    starts = _starts(*[float(i) for i in range(101)])
    assert points.summarize({"duration": 100.0}, starts, 1 / 0.7).client_bound is False  # exactly at the edge
    assert points.summarize({"duration": 100.0}, starts, 1 / 0.7 + 0.01).client_bound is True
    offered = points.summarize({"duration": 100.0}, starts, 1.2)
    assert offered.offered_rate == 1.2 and offered.client_bound is False


def test_an_extra_flag_replaces_our_group_in_place_and_keeps_every_other_one():
    ours = [["--a", "1"], ["--b", "2"], ["--c"]]
    merged, notes = spec.merge_extra(ours, [["--b", "9"], ["--new", "x"]])
    assert merged == ["--a", "1", "--b", "9", "--c", "--new", "x"]
    assert notes == ["SERVER_EXTRA_ARGS replaces --b 2 with --b 9"]
    merged, notes = spec.merge_extra(ours, [["--c=x=y"], ["--d=1=2"]])  # --flag=value, a value with '=' in it
    assert merged == ["--a", "1", "--b", "2", "--c=x=y", "--d=1=2"]
    assert notes == ["SERVER_EXTRA_ARGS replaces --c with --c=x=y"]


def _env(tmp_path, **given):
    cfg = dataclasses.replace(config.load({}), work_dir=str(tmp_path), flashinfer_workspace_base=str(tmp_path / "fi"),
                              bytecode_cache="", shared_prefix_decode="off", **given)
    return dict(spec.server_env(cfg, environ={}))


def test_server_env_pairs_split_at_their_first_equals_sign_and_gpus_refuse_only_a_second_device_list(tmp_path):
    env = _env(tmp_path, server_env="A_1=b=c _X=1", gpus="0")
    assert env["A_1"] == "b=c" and env["_X"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert _env(tmp_path, server_env="CUDA_VISIBLE_DEVICES=3")["CUDA_VISIBLE_DEVICES"] == "3"
    with pytest.raises(spec.SpecError, match="SERVER_ENV sets CUDA_VISIBLE_DEVICES and GPUS=0 sets it too"):
        _env(tmp_path, server_env="CUDA_VISIBLE_DEVICES=3", gpus="0")
    for bad in ("9X=1", "A-B=1", "NOVALUE"):
        with pytest.raises(spec.SpecError) as exc:
            _env(tmp_path, server_env=bad)
        assert str(exc.value) == f"SERVER_ENV: {bad!r} is not KEY=VALUE"


@pytest.mark.parametrize(("chunk", "kept"), [("2048", [512, 1024, 2048]), ("2047", [512, 1024]), ("1", []),
                                             ("auto", [512, 1024, 2048, 4096]), ("-1", [512, 1024, 2048, 4096]),
                                             ("0", [512, 1024, 2048, 4096])])
def test_prefill_graphs_stop_at_a_set_chunk_size_including_it(chunk, kept):
    assert graphs.prefill_sizes([512, 1024, 2048, 4096], chunk) == kept


def test_start_refuses_only_a_gpu_with_less_than_two_gib_past_the_reserve():
    total = 24 * GIB  # reserve 4 GiB
    assert spec.gpu_room_problem((6 * GIB, total)) is None and spec.gpu_room_problem(None) is None
    assert spec.gpu_room_problem((0.0, 0.0)) is None  # a GPU that reports no memory: SGLang finds out
    assert spec.gpu_room_problem((6 * GIB - 1, total)) == ("the GPU has only 6.0 of 24.0 GiB free — stop what holds "
                                                           "it (nvidia-smi) or set MEM_FRACTION_STATIC")
