"""CUDA graph sizes in the launch command: our lists by default, SGLang's where a graph flag or the GPU says so."""
from __future__ import annotations

import dataclasses
import re

import pytest

from llmhost import config, settings
from llmhost.serve import graphs
from llmhost.serve.spec import build_spec
from tests.unit.test_serve_spec import flag

H200 = (140_000.0, 143_771.0)  # (free, total) MiB as nvidia-smi reports an H200
PREFILL = [4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048]
DECODE = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256]


@pytest.fixture
def cfg(tmp_path) -> config.Config:
    return dataclasses.replace(config.load({}), work_dir=str(tmp_path / "work"), model_dir=str(tmp_path / "model"),
                               sglang_python="/opt/venv/bin/python")


def sizes(argv, name):
    values = flag(argv, name)
    return None if values is None else [int(v) for v in values]


def test_the_defaults_capture_prefill_graphs_up_to_2048_tokens_and_12_decode_sizes(cfg):
    argv = build_spec(cfg, H200).argv
    assert sizes(argv, "--cuda-graph-bs-prefill") == PREFILL
    assert sizes(argv, "--cuda-graph-bs-decode") == DECODE


def test_auto_leaves_the_graphs_to_sglang(cfg):
    argv = build_spec(dataclasses.replace(cfg, cuda_graph_prefill_tokens="auto", cuda_graph_decode_batches="auto"),
                      H200).argv
    assert not any(a.startswith("--cuda-graph") for a in argv)


@pytest.mark.parametrize("extra, prefill_kept, decode_kept", [
    ("--cuda-graph-max-bs 64", True, False),
    ("--cuda-graph-bs-decode 1 2 4", True, False),
    ("--disable-cuda-graph-padding", True, False),
    ("--disable-piecewise-cuda-graph", False, True),
    ("--cuda-graph-backend-prefill disabled", False, True),
    ("--piecewise-cuda-graph-max-tokens=1024", False, True),
    ("--disable-cuda-graph", False, False),
])
def test_a_graph_flag_of_the_user_replaces_our_list_of_that_phase_only(cfg, extra, prefill_kept, decode_kept):
    for spec in (build_spec(dataclasses.replace(cfg, server_extra_args=extra), H200),
                 build_spec(cfg, H200, extra_args=extra.split())):
        assert (sizes(spec.argv, "--cuda-graph-bs-prefill") == PREFILL) is prefill_kept
        assert (sizes(spec.argv, "--cuda-graph-bs-decode") == DECODE) is decode_kept
        left_out = [n for n in spec.notes if "left out (SGLang decides those graphs)" in n]
        assert len(left_out) == (not prefill_kept) + (not decode_kept)
        assert all(extra.split()[0].split("=")[0] in n for n in left_out)
    user = build_spec(cfg, H200, extra_args=["--cuda-graph-bs-decode", "1", "2", "4"]).argv
    assert sizes(user, "--cuda-graph-bs-decode") == [1, 2, 4] and user.count("--cuda-graph-bs-decode") == 1


@pytest.mark.parametrize("total_gib, tp, expected", [
    (16, 1, [1, 2, 4, 8]),  # T4: SGLang captures up to 8
    (24, 1, [1, 2, 4, 8, 16, 24]),
    (24, 4, [1, 2, 4, 8, 16, 32, 48, 64, 80]),  # SGLang's top batch kept
    (40, 1, [1, 2, 4, 8, 16, 32]),
    (80, 1, DECODE),
    (140, 1, DECODE),
    (140, 4, None),  # SGLang's own list reaches 512: left to it
    (180, 1, None),
])
def test_the_decode_list_stops_where_sglang_would_on_that_gpu(cfg, total_gib, tp, expected):
    got = graphs.decode_sizes(DECODE, total_gib * 1024.0, tp)
    assert (got or None) == expected
    argv = build_spec(dataclasses.replace(cfg, tp_size=tp), None, gpu_total_mib=total_gib * 1024.0).argv
    assert sizes(argv, "--cuda-graph-bs-decode") == expected


def test_a_decode_list_left_to_sglang_because_it_stops_short_says_so(cfg):
    small = build_spec(dataclasses.replace(cfg, cuda_graph_decode_batches="1 2 4 64"), H200)
    assert sizes(small.argv, "--cuda-graph-bs-decode") is None
    assert ("CUDA_GRAPH_DECODE_BATCHES stops at 64, below the 256 SGLang captures on this GPU: left out (SGLang "
            "decides those graphs; --cuda-graph-bs-decode captures exactly the sizes given)") in small.notes
    big = build_spec(cfg, None, gpu_total_mib=180 * 1024.0)
    assert any("stops at 256, below the 512 SGLang captures" in n for n in big.notes)
    assert not any("stops at" in n for n in build_spec(cfg, H200).notes)
    assert not any("stops at" in n for n in build_spec(cfg, None).notes)  # unknown GPU: the list is kept
    given = build_spec(dataclasses.replace(cfg, cuda_graph_decode_batches="64"), H200,
                       extra_args=["--cuda-graph-bs-decode", "64"])
    assert sizes(given.argv, "--cuda-graph-bs-decode") == [64] and not any("stops at" in n for n in given.notes)


def test_an_unknown_gpu_keeps_the_decode_list(cfg):
    assert sizes(build_spec(cfg, None).argv, "--cuda-graph-bs-decode") == DECODE


def test_a_smaller_prefill_chunk_cuts_the_prefill_list(cfg):
    argv = build_spec(dataclasses.replace(cfg, chunked_prefill_size="1000"), H200).argv
    assert sizes(argv, "--cuda-graph-bs-prefill") == [t for t in PREFILL if t <= 1000]
    unchunked = build_spec(dataclasses.replace(cfg, chunked_prefill_size="-1"), H200).argv
    assert sizes(unchunked, "--cuda-graph-bs-prefill") == PREFILL


def test_a_list_is_sorted_and_each_size_once(cfg):
    argv = build_spec(dataclasses.replace(cfg, cuda_graph_prefill_tokens="64 8 64 16"), H200).argv
    assert sizes(argv, "--cuda-graph-bs-prefill") == [8, 16, 64]


@pytest.mark.parametrize("value", ["", "4 x 8", "0 4", "-4", "4,8"])
def test_a_bad_list_is_refused_in_one_line(value):
    with pytest.raises(ValueError, match="must be auto or whole numbers > 0 separated by spaces"):
        settings.CHECKS["CUDA_GRAPH_DECODE_BATCHES"](value)


def test_every_graph_flag_we_defer_to_is_one_of_sglangs(captures):
    """A flag renamed in SGLang's --help (captured from 0.5.17) would stop deferring: fail here instead."""
    options = set(re.findall(r"--[a-z0-9-]+", (captures / "launch_server_help.txt").read_text()))
    assert graphs.PREFILL_FLAGS | graphs.DECODE_FLAGS <= options
    assert {graphs.PREFILL_FLAG, graphs.DECODE_FLAG} <= graphs.PREFILL_FLAGS | graphs.DECODE_FLAGS
