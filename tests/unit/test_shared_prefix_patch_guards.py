"""Where the shared-prefix patches (llmhost.serve.shared_prefix.patches) must leave SGLang's decode alone, and what
they keep and say, run in torch on the CPU against the stand-ins (tests/fixtures_shared_prefix_torch.py): a model
runner the two levels would not match, graphs that are not plain decode graphs, layers and batches SGLang's own path
serves, the KV write of the step's token, the check's reach, the break-even in bytes, and the stats line."""
from __future__ import annotations

import logging
import sys
import types

import pytest
import torch_standins

from llmhost.serve.shared_prefix import groups as grouping
from llmhost.serve.shared_prefix import patches


@pytest.fixture
def sp(monkeypatch):
    return torch_standins.load(monkeypatch)


def _init_new(batch, runner):
    return sys.modules["sglang.srt.model_executor.forward_batch_info"].ForwardBatch.init_new(batch, runner)


def _graphs(sp, backend, req_to_token, size=8):
    """SGLang's graph runner with the decode graphs of `size` captured (SGLang's own, then the two-level one)."""
    backend.init_cuda_graph_state(8, 8)
    graphs = sp.GraphRunner(backend)
    graphs.capture_one_shape(size, lambda bs: sp.batch(req_to_token, [], [], pad_to=bs)[1])
    return graphs


def _merges(monkeypatch) -> list[int]:
    """A counter of the two-level merges (each forward_decode that ran both levels merges once)."""
    calls: list[int] = []
    flashinfer = sys.modules["flashinfer"]
    merge = flashinfer.merge_state_in_place
    monkeypatch.setattr(flashinfer, "merge_state_in_place", lambda *a: (calls.append(1), merge(*a))[1])
    return calls


def _planned_eager(sp, monkeypatch):
    """The agents' eager decode step with both levels planned (any saving pays)."""
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens)
    _init_new(batch, runner)
    backend.init_forward_metadata(forward_batch)
    return backend, forward_batch, req_to_token, lens, g


@pytest.mark.parametrize("runner_attrs, backend_attrs", [
    ({"page_size": 16}, {}),
    ({"is_draft_worker": True}, {}),
    ({"spec_algorithm": types.SimpleNamespace(is_none=lambda: False)}, {}),
    ({}, {"num_wrappers": 2}),  # sliding-window layers get a wrapper of their own
    ({}, {"decode_use_tensor_cores": False}),
    ({}, {"data_type": "fp8"}),  # a KV cache in another type than the query's
    ({}, {"use_sliding_window_kv_pool": True}),
    ({}, {"decode_uses_dequant_workspace": True}),
], ids=["page-16", "draft", "speculative", "two-wrappers", "cuda-core", "fp8-kv", "swa-pool", "dequant"])
def test_a_model_runner_the_two_levels_would_not_match_keeps_sglangs_decode(sp, monkeypatch, caplog, runner_attrs,
                                                                           backend_attrs):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    runner = types.SimpleNamespace(**{**vars(runner), **runner_attrs, "backend_attrs": backend_attrs})
    with caplog.at_level(logging.WARNING, "llmhost.shared_prefix"):
        backend = sp.Backend(runner)
    assert backend._sp_on is False and "shared-prefix decode: off for this model runner" in caplog.text
    graphs = _graphs(sp, backend, req_to_token)
    assert graphs.captured == [sp.ShapeKey(8)]  # no two-level graph
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens)
    _init_new(batch, runner)
    backend.init_forward_metadata(forward_batch)
    assert backend._sp is None


def test_the_default_runner_is_one_the_two_levels_match(sp, caplog):
    with caplog.at_level(logging.WARNING, "llmhost.shared_prefix"):
        backend = sp.setup(shared=True)[0]
    assert backend._sp_on is True and "shared-prefix decode: on (SGLang 0.5.17, FlashInfer 0.6.15.post1)" in caplog.text
    # a token's K and V in every layer: 2 x 2 KV heads x 16 dims x 4 bytes (float32) x 36 layers
    assert backend._sp_kv_bytes == 2 * sp.HK * sp.D * 4 * 36


@pytest.mark.parametrize("label, size, runner_attrs", [
    ("lora", 8, {}), (None, 4, {}), (None, 8, {"enable_pdmux": True}), (None, 8, {"captured_req_width": 2}),
    (None, 8, {"ragged_verify_mode": True}),
    (None, 8, {"capture_forward_mode": types.SimpleNamespace(is_decode=lambda: False)}),
], ids=["lora-variant", "below-min-batch", "pdmux", "req-width-2", "ragged-verify", "not-decode"])
def test_only_plain_decode_graphs_from_the_minimum_batch_get_a_two_level_twin(sp, label, size, runner_attrs):
    backend, runner, req_to_token, *_ = sp.setup(shared=True)
    backend.init_cuda_graph_state(8, 8)
    graphs = sp.GraphRunner(backend)
    for name, value in runner_attrs.items():
        setattr(graphs, name, value)
    graphs.capture_one_shape(size, lambda bs: sp.batch(req_to_token, [], [], pad_to=bs)[1], None, label)
    assert graphs.captured == [sp.ShapeKey(size, label)]


def test_the_two_level_graph_replays_only_for_the_batch_size_it_was_planned_for(sp, monkeypatch):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    graphs = _graphs(sp, backend, req_to_token)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    _init_new(batch, runner)
    backend.init_forward_metadata_out_graph(forward_batch)
    assert backend._sp_replay_bs == 8
    graphs.load_batch(forward_batch)
    assert graphs._replay_graph_key == sp.ShapeKey(8, patches.TWO_LEVELS)
    graphs.load_batch(types.SimpleNamespace(batch_size=16))  # another size: SGLang's graph of it
    assert graphs._replay_graph_key == sp.ShapeKey(16)
    graphs.enable_pdmux = True
    graphs.load_batch(forward_batch)
    assert graphs._replay_graph_key == sp.ShapeKey(8)


def test_each_size_captures_sglangs_graph_on_its_own_wrappers_then_the_two_level_one_on_graph_buffers(sp):
    backend, runner, req_to_token, *_ = sp.setup(shared=True)
    backend.init_cuda_graph_state(16, 16)
    graphs = sp.GraphRunner(backend)
    for size in (8, 16):
        graphs.capture_one_shape(size, lambda bs: sp.batch(req_to_token, [], [], pad_to=bs)[1])
        # the two-level capture left SGLang's plan of this size in place: its graph reads that wrapper
        assert backend.forward_metadata.decode_wrappers[0] is backend.decode_cuda_graph_metadata[size][0]
    assert graphs.captured == [sp.ShapeKey(8), sp.ShapeKey(8, patches.TWO_LEVELS), sp.ShapeKey(16),
                               sp.ShapeKey(16, patches.TWO_LEVELS)]
    assert graphs.two_level_captured == [False, True, False, True]
    for size in (8, 16):
        level0, level1, order, largest = backend._sp_graphs[size]
        assert level0.is_cuda_graph_enabled and level1.is_cuda_graph_enabled and order.numel() == size


def test_another_attention_backend_gets_no_two_level_graph_and_replays_its_own(sp):
    other = types.SimpleNamespace(init_forward_metadata_out_graph=lambda forward_batch, in_capture=False: None)
    graphs = sp.GraphRunner(other)  # e.g. --attention-backend triton: no _sp_on, no _sp_replay_bs
    graphs.capture_one_shape(8, lambda bs: types.SimpleNamespace(batch_size=bs))
    assert graphs.captured == [sp.ShapeKey(8)]
    graphs.load_batch(types.SimpleNamespace(batch_size=8))
    assert graphs._replay_graph_key == sp.ShapeKey(8)


def test_batches_that_are_not_decode_steps_get_sglangs_plan_alone(sp, monkeypatch):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    _graphs(sp, backend, req_to_token)
    extend = types.SimpleNamespace(is_decode=lambda: False)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    _init_new(batch, runner)
    backend.init_forward_metadata_out_graph(types.SimpleNamespace(**{**vars(forward_batch), "forward_mode": extend}))
    assert backend._sp is None and backend._sp_replay_bs is None
    backend._sp = "stale"
    backend.init_forward_metadata(types.SimpleNamespace(**{**vars(sp.batch(req_to_token, last_nodes, lens)[1]),
                                                           "forward_mode": extend}))
    assert backend._sp is None
    # a decode batch the scheduler kept no groups for (a speculative one): SGLang's graph, its own rows counted
    monkeypatch.setattr(patches, "_STATS", patches._Stats())
    _init_new(types.SimpleNamespace(**{**vars(batch), "spec_info": object()}), runner)
    backend.init_forward_metadata_out_graph(forward_batch)
    assert backend._sp is None and patches._STATS.rows == 8


def test_groups_are_kept_only_for_a_plain_decode_batch(sp):
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens)
    _init_new(batch, runner)
    assert patches._KEPT["lens"] == lens and len(patches._KEPT["groups"]) == 2
    for change in ({"spec_info": object()}, {"seq_lens_cpu": None},
                   {"forward_mode": types.SimpleNamespace(is_decode=lambda: False)}):
        _init_new(types.SimpleNamespace(**{**vars(batch), **change}), runner)
        assert patches._KEPT == {"lens": None, "groups": []}, change


def test_the_kept_groups_belong_to_the_batch_with_those_lengths_padding_after_them(sp):
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    _init_new(sp.batch(req_to_token, last_nodes, lens)[0], runner)
    kept = patches._KEPT["groups"]
    assert patches._kept_groups(lens + [1, 1]) == kept  # a graph's padding rows after the batch's own
    assert patches._kept_groups(lens[:-1]) == []  # fewer rows than the batch
    assert patches._kept_groups([lens[0] + 1] + lens[1:]) == []  # another step's lengths
    assert patches._kept_groups(None) == []
    patches._KEPT["lens"] = None
    assert patches._kept_groups(lens) == []


def test_groups_that_save_less_than_the_break_even_replay_sglangs_graph(sp, monkeypatch):
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    graphs = _graphs(sp, backend, req_to_token)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    _init_new(batch, runner)
    saved = grouping.saved_tokens(patches._KEPT["groups"]) * backend._sp_kv_bytes  # prompts of 300 and 200 tokens
    for break_even, two_level in ((saved, False), (saved - 1, True)):
        monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", break_even)
        backend.init_forward_metadata_out_graph(forward_batch)
        graphs.load_batch(forward_batch)
        assert (backend._sp is not None, graphs._replay_graph_key.variant_label) == (
            two_level, patches.TWO_LEVELS if two_level else None)


def test_cross_attention_and_soft_capped_layers_take_sglangs_decode(sp, monkeypatch):
    backend, forward_batch, req_to_token, lens, g = _planned_eager(sp, monkeypatch)
    merges = _merges(monkeypatch)
    q = sp.torch.randn(len(lens), sp.HQ * sp.D, generator=g)
    pool, where = backend.token_to_kv_pool, forward_batch.out_cache_loc.long()
    for layer, merged in ((sp.LAYER, 1), (types.SimpleNamespace(**{**vars(sp.LAYER), "is_cross_attention": True}), 0),
                          (types.SimpleNamespace(**{**vars(sp.LAYER), "logit_cap": 30.0}), 0)):
        merges.clear()
        k, v = (sp.torch.randn(len(lens), sp.HK * sp.D, generator=g) for _ in range(2))
        out = backend.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=True)
        assert len(merges) == merged and sp.torch.allclose(out, sp.reference(backend, req_to_token, lens, q), atol=1e-5)
        assert sp.torch.equal(pool.k[where], k.view(-1, sp.HK, sp.D))  # SGLang's own path wrote the token too


def test_the_steps_token_is_written_to_the_kv_cache_before_both_levels_read_it(sp, monkeypatch):
    backend, forward_batch, req_to_token, lens, g = _planned_eager(sp, monkeypatch)
    k, v = (sp.torch.randn(len(lens), sp.HK * sp.D, generator=g) for _ in range(2))
    q = sp.torch.randn(len(lens), sp.HQ * sp.D, generator=g)
    pool, where = backend.token_to_kv_pool, forward_batch.out_cache_loc.long()
    kept = pool.k[where].clone()
    backend.forward_decode(q, k, v, sp.LAYER, forward_batch, save_kv_cache=False)
    assert sp.torch.equal(pool.k[where], kept)  # not asked to save: untouched
    out = backend.forward_decode(q, k, v, sp.LAYER, forward_batch, save_kv_cache=True)
    assert sp.torch.equal(pool.k[where], k.view(-1, sp.HK, sp.D)) and sp.torch.equal(pool.v[where],
                                                                                     v.view(-1, sp.HK, sp.D))
    assert sp.torch.allclose(out, sp.reference(backend, req_to_token, lens, q), atol=1e-5)  # it read the new token


@pytest.mark.parametrize("check", [True, False])
def test_the_check_compares_layer_0_only_and_only_when_asked(monkeypatch, check):
    sp = torch_standins.load(monkeypatch, check=check)
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    _graphs(sp, backend, req_to_token)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    _init_new(batch, runner)
    backend.init_forward_metadata_out_graph(forward_batch)
    largest = backend._sp[3]
    q = sp.torch.randn(8, sp.HQ * sp.D, generator=g)
    for layer_id, compared in ((1, False), (0, check)):
        largest.fill_(-1.0)
        layer = types.SimpleNamespace(**{**vars(sp.LAYER), "layer_id": layer_id})
        backend.forward_decode(q, None, None, layer, forward_batch, save_kv_cache=False)
        assert (0.0 <= float(largest) < 1e-5) if compared else float(largest) == -1.0, (layer_id, float(largest))


def test_a_step_counts_the_batchs_own_rows_and_the_check_says_its_largest_difference(sp, monkeypatch, caplog):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    monkeypatch.setattr(patches, "_STATS", patches._Stats())
    monkeypatch.setattr(patches, "CHECK_EVERY", 2)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    _graphs(sp, backend, req_to_token)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    _init_new(batch, runner)
    with caplog.at_level(logging.WARNING, "llmhost.shared_prefix"):
        backend.init_forward_metadata_out_graph(forward_batch)
        assert "shared-prefix decode check" not in caplog.text  # step 1
        backend._sp[3].fill_(0.25)
        backend.init_forward_metadata_out_graph(forward_batch)
    assert "shared-prefix decode check: largest |two levels - SGLang's decode| on layer 0 so far: 0.25" in caplog.text
    stats = patches._STATS
    assert (stats.steps, stats.two_level, stats.rows, stats.grouped_rows) == (2, 2, 12, 10)  # 6 rows, not 8
    eager = sp.batch(req_to_token, last_nodes, lens)
    _init_new(eager[0], runner)
    backend.init_forward_metadata(eager[1])
    assert (stats.steps, stats.two_level, stats.rows, stats.grouped_rows) == (3, 3, 18, 15)


def test_the_stats_line_counts_grouped_rows_only_in_steps_that_ran_two_levels(monkeypatch, caplog):
    monkeypatch.setattr(patches, "STATS_EVERY", 4)
    stats = patches._Stats()
    found = [grouping.Group(300, (0, 2, 5)), grouping.Group(200, (1, 4))]
    with caplog.at_level(logging.WARNING, "llmhost.shared_prefix"):
        for two_level in (True, False, True):
            stats.count(found, 8, two_level)
        assert caplog.text == ""
        stats.count([], 6, False)
    (line,) = [r.getMessage() for r in caplog.records]
    # 4 steps of 8, 8, 8 and 6 rows; two ran two levels, each with 5 rows in 2 groups saving 2 x 300 + 200 tokens
    assert line == ("shared-prefix decode: 4 decode steps, 33.3% of rows in groups, 1.00 groups a step, 400 prompt "
                    "tokens a layer not read again per step; 50.0% of steps in two levels")
    assert (stats.steps, stats.two_level, stats.rows, stats.grouped_rows, stats.groups, stats.saved) == (
        4, 2, 30, 10, 4, 1600)
