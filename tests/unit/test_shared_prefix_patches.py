"""The shared-prefix patches themselves (llmhost.serve.shared_prefix.patches), run in torch on the CPU against
stand-ins of what they patch (tests/fixtures_shared_prefix_torch.py): a batch of agents on two prompts and one request
alone, in an order that interleaves the groups, decoded in two levels eagerly and through the two-level graph of a
padded batch size, must equal attention over each row's whole context; the graph of SGLang's own decode must stay
planned, and a batch that shares nothing must replay it.
"""
from __future__ import annotations

import sys

import pytest
import torch_standins

from llmhost.serve.shared_prefix import groups as grouping
from llmhost.serve.shared_prefix import patches


@pytest.fixture
def sp(monkeypatch):
    """The stand-ins with patches.apply() run on them."""
    return torch_standins.load(monkeypatch)


def test_an_eager_decode_of_agents_in_two_levels_equals_attention_over_each_whole_context(sp, monkeypatch):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens)
    assert sys.modules["sglang.srt.model_executor.forward_batch_info"].ForwardBatch.init_new(batch, runner) \
        is forward_batch
    assert [g_.rows for g_ in patches._KEPT["groups"]] == [(0, 2, 5), (1, 4)]
    backend.init_forward_metadata(forward_batch)
    assert backend._sp is not None and backend._sp[1] is not None  # two levels planned
    q = sp.torch.randn(len(lens), sp.HQ * sp.D, generator=g)
    out = backend.forward_decode(q, None, None, sp.LAYER, forward_batch, save_kv_cache=False)
    assert sp.torch.allclose(out, sp.reference(backend, req_to_token, lens, q), atol=1e-5)


def test_the_two_level_graph_of_a_padded_batch_equals_attention_and_sglangs_graph_stays_planned(sp, monkeypatch):
    monkeypatch.setattr(grouping, "BREAK_EVEN_BYTES", 0)
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=True)
    backend.init_cuda_graph_state(8, 8)
    graphs = sp.GraphRunner(backend)
    empty = lambda bs: sp.batch(req_to_token, [], [], pad_to=bs)[1]  # noqa: E731 - a capture's padding rows
    graphs.capture_one_shape(8, empty)
    assert graphs.captured == [sp.ShapeKey(8), sp.ShapeKey(8, patches.TWO_LEVELS)]
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    sys.modules["sglang.srt.model_executor.forward_batch_info"].ForwardBatch.init_new(batch, runner)
    backend.init_forward_metadata_out_graph(forward_batch)
    graphs.load_batch(forward_batch)
    assert graphs._replay_graph_key == sp.ShapeKey(8, patches.TWO_LEVELS)
    assert backend._sp[1] is not None and backend._sp[2].numel() == 8  # the rows' order, once
    q = sp.torch.randn(8, sp.HQ * sp.D, generator=g)
    out = backend.forward_decode(q, None, None, sp.LAYER, forward_batch, save_kv_cache=False)
    assert sp.torch.allclose(out[:6], sp.reference(backend, req_to_token, lens, q[:6]), atol=1e-5)
    # SGLang's own graph of that size was planned for the same batch: its replay would be right too
    own = backend.forward_metadata.decode_wrappers[0]
    assert own is backend.decode_cuda_graph_metadata[8][0]
    sglangs = own.forward(q.view(8, sp.HQ, sp.D), backend.token_to_kv_pool.get_kv_buffer(0), sm_scale=sp.SCALE)
    assert sp.torch.allclose(sglangs.view(8, -1)[:6], out[:6], atol=1e-5)
    assert float(backend._sp[3]) < 1e-5  # the check's largest difference on layer 0


def test_a_batch_that_shares_no_prompt_replays_sglangs_own_graph(sp):
    backend, runner, req_to_token, last_nodes, lens, g = sp.setup(shared=False)
    backend.init_cuda_graph_state(8, 8)
    graphs = sp.GraphRunner(backend)
    graphs.capture_one_shape(8, lambda bs: sp.batch(req_to_token, [], [], pad_to=bs)[1])
    batch, forward_batch = sp.batch(req_to_token, last_nodes, lens, pad_to=8)
    sys.modules["sglang.srt.model_executor.forward_batch_info"].ForwardBatch.init_new(batch, runner)
    assert patches._KEPT["groups"] == []
    backend.init_forward_metadata_out_graph(forward_batch)
    graphs.load_batch(forward_batch)
    assert graphs._replay_graph_key == sp.ShapeKey(8) and backend._sp is None
    q = sp.torch.randn(8, sp.HQ * sp.D, generator=g)
    out = backend.forward_decode(q, None, None, sp.LAYER, forward_batch, save_kv_cache=False)
    assert sp.torch.allclose(out[:6], sp.reference(backend, req_to_token, lens, q[:6]), atol=1e-5)
