"""Shared-prefix decode: the groups found in a radix tree, the two levels planned from them, and how the server finds
the plugin (its entry point loads without torch or a GPU; an unverified SGLang leaves it off)."""
from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from fixtures_attention import attend, merge

from llmhost.serve.shared_prefix import groups as grouping
from llmhost.serve.shared_prefix import plugin_dir, said
from llmhost.settings import REPO_ROOT


class Node:
    def __init__(self, parent: "Node | None", tokens: int) -> None:
        self.parent, self.value = parent, list(range(tokens))


def tree():
    root = Node(None, 0)
    prompt_a, prompt_b, template = Node(root, 4096), Node(root, 4096), Node(root, 3)
    return root, prompt_a, prompt_b, template


def test_rows_under_one_prompt_node_form_a_group_reading_its_tokens():
    root, a, b, template = tree()
    nodes = [Node(a, 200), Node(b, 100), Node(a, 150), Node(template, 500), Node(template, 10), root, b]
    found = grouping.find_groups(nodes, [4400, 4300, 4300, 600, 20, 5, 4100])
    assert found == [grouping.Group(4096, (0, 2)), grouping.Group(4096, (1, 6))]
    # the 3-token template is shared too, but below the minimum; the root holds nothing
    assert grouping.saved_tokens(found) == 4096 * 2


def test_a_row_joins_its_deepest_shared_node_and_a_group_leaves_each_member_a_token_of_its_own():
    root, a, _, _ = tree()
    turn = Node(a, 300)  # a conversation's second turn, shared by two rows; a third row shares only the prompt
    nodes = [Node(turn, 20), Node(turn, 30), Node(a, 40), a]
    found = grouping.find_groups(nodes, [4420, 4430, 4140, 4096])
    assert found == [grouping.Group(4396, (0, 1)), grouping.Group(4095, (2, 3))]  # row 3 is all prompt: 4096 - 1


def test_the_minimum_shared_length_is_enough_and_a_group_saves_its_prefix_per_extra_member():
    root = Node(None, 0)
    short = Node(root, 64)  # exactly the minimum
    found = grouping.find_groups([Node(short, 5), Node(short, 6), Node(short, 7)], [70, 71, 72])
    assert found == [grouping.Group(64, (0, 1, 2))] and grouping.saved_tokens(found) == 64 * 2
    assert grouping.find_groups([Node(short, 5), Node(short, 6)], [70, 71], min_shared=65) == []


def test_two_levels_run_only_when_the_reads_they_save_outweigh_their_kernels():
    qwen3_4b = 2 * 8 * 128 * 2 * 36  # bytes of K and V a token, every layer: 144 KiB
    agents = [grouping.Group(4300, (4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3)) for i in range(16)]  # 64 on 16 prompts
    assert grouping.pays(agents, qwen3_4b)  # 206k tokens not read again: ~30 GB a step
    assert not grouping.pays([], qwen3_4b)  # nothing shared (chat): SGLang's own decode
    pair = [grouping.Group(4300, (0, 1))]  # 4,300 tokens, ~0.6 GB: less than the second level costs
    assert not grouping.pays(pair, qwen3_4b)
    edge = grouping.BREAK_EVEN_BYTES // qwen3_4b + 1  # tokens just over the break-even, in one group of two
    assert grouping.pays([grouping.Group(edge, (0, 1))], qwen3_4b)
    assert not grouping.pays([grouping.Group(edge - 1, (0, 1))], qwen3_4b)
    assert not grouping.pays([grouping.Group(grouping.BREAK_EVEN_BYTES // 1000, (0, 1))], 1000)  # exactly even


def test_an_evicted_node_ends_what_a_row_can_share():
    root, a, _, _ = tree()
    a.value = None
    assert grouping.find_groups([Node(a, 10), Node(a, 10)], [4200, 4200]) == []


def test_the_plan_covers_every_row_once_and_pads_a_graphs_entries():
    found = [grouping.Group(4096, (0, 2))]
    plan = grouping.plan([4400, 4300, 4300, 1, 2], found, entries=5)
    assert plan.order == (0, 2, 1, 3, 4) and sorted(plan.order) == list(range(5))
    assert plan.qo_indptr == (0, 2, 3, 4, 5, 5)  # the group, three rows of their own, one empty entry
    assert plan.kv_lens == (4096, 4299, 1, 1, 1) and plan.leads == (0, 1, 3, 4, 0)
    assert plan.start == (4096, 4096, 4299, 1, 1) and plan.own_lens == (304, 204, 1, 1, 1)  # in `order`
    assert grouping.plan([4400, 4300, 4300, 1, 2], found).qo_indptr == (0, 2, 3, 4, 5)
    with pytest.raises(ValueError, match="3 level-0 entries do not fit in 2"):
        grouping.plan([4400, 4300, 4300, 2], found, entries=2)


@pytest.mark.parametrize("lens", [[4400, 4300, 4300, 1200, 2], [300, 300, 290]])
def test_two_levels_merged_equal_one_attention_over_each_rows_tokens(lens):
    rng = np.random.default_rng(0)
    slots = {0: np.arange(lens[0])}  # rows 0 and 2 (and 1 in the second case) share their first 200+ slots
    shared = 4096 if lens[0] > 4096 else 256
    found = [grouping.Group(shared, (0, 2))] if len(lens) > 3 else [grouping.Group(shared, (0, 1, 2))]
    grouped = {r for g in found for r in g.rows}
    table = {}
    for row, n in enumerate(lens):
        own = rng.permutation(100_000)[:n] + 10_000
        table[row] = np.concatenate([slots[0][:shared], own[shared:]]) if row in grouped else own
    k, v = rng.normal(size=(120_000, 2, 8)), rng.normal(size=(120_000, 2, 8))  # 2 KV heads, 4 query heads each
    plan = grouping.plan(lens, found)
    queries = rng.normal(size=(len(lens), 8, 8))  # rows in the batch's order, as SGLang gives them
    ordered = queries[list(plan.order)]  # the one gather: both levels take their rows in `order`
    out = np.empty_like(queries)
    for entry in range(len(plan.kv_lens)):
        lead = table[plan.leads[entry]][:plan.kv_lens[entry]]
        for pos in range(plan.qo_indptr[entry], plan.qo_indptr[entry + 1]):
            row = plan.order[pos]
            own = table[row][plan.start[pos]:plan.start[pos] + plan.own_lens[pos]]
            q = ordered[pos]
            out[row] = merge(*attend(q, k[lead], v[lead]), *attend(q, k[own], v[own]))  # scattered back to its row
    for row in range(len(lens)):
        whole, _ = attend(queries[row], k[table[row]], v[table[row]])
        assert np.allclose(out[row], whole, atol=1e-10), (row, lens)


def test_the_plugin_folder_names_the_entry_point_sglang_loads(tmp_path):
    parent = plugin_dir.write(tmp_path)
    code = ("from importlib.metadata import entry_points; "
            "print([(e.name, e.value) for e in entry_points(group='sglang.srt.plugins')])")
    env = {"PYTHONPATH": plugin_dir.pythonpath(tmp_path, None), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[('llmhost_shared_prefix_decode', 'llmhost.serve.shared_prefix:register')]"
    assert parent == tmp_path / "sglang-plugins" and plugin_dir.pythonpath(tmp_path, "/x").endswith(f"{REPO_ROOT}:/x")
    plugin_dir.write(tmp_path)  # a restart rewrites it in place
    assert [p.name for p in parent.iterdir()] == [plugin_dir.DIST]


def _patches_not_imported(monkeypatch, package) -> None:
    """As in a fresh server process: the patches module not yet imported (another test may have imported it)."""
    monkeypatch.delitem(sys.modules, "llmhost.serve.shared_prefix.patches", raising=False)
    monkeypatch.delattr(package, "patches", raising=False)


def test_an_sglang_it_was_not_verified_on_leaves_the_decode_alone(monkeypatch, caplog):
    from llmhost.serve import shared_prefix

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(__version__="0.5.23"))
    monkeypatch.setattr(shared_prefix, "_applied", False)
    _patches_not_imported(monkeypatch, shared_prefix)
    shared_prefix.register()
    assert "verified on SGLang 0.5.17 only and this is 0.5.23" in caplog.text
    assert not shared_prefix._applied and "llmhost.serve.shared_prefix.patches" not in sys.modules


def test_a_host_without_flashinfer_leaves_the_decode_alone_and_says_why(monkeypatch, caplog):
    from llmhost.serve import shared_prefix

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(__version__="0.5.17"))
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer raises ImportError
    monkeypatch.setattr(shared_prefix, "_applied", False)
    _patches_not_imported(monkeypatch, shared_prefix)
    shared_prefix.register()
    assert "shared-prefix decode: off, FlashInfer is not importable here" in caplog.text
    assert not shared_prefix._applied and "llmhost.serve.shared_prefix.patches" not in sys.modules


@pytest.mark.parametrize("log, status, says", [
    ("[2026-12-04 18:48:10] shared-prefix decode: on (SGLang 0.5.17, FlashInfer 0.6.15.post1)\n"
     "[2026-12-04 18:49:27] shared-prefix decode: 2000 decode steps, 94.1% of rows in groups",
     "on", "shared-prefix decode: on (SGLang 0.5.17, FlashInfer 0.6.15.post1)"),
    ("[2026-12-04 18:48:10 TP0] shared-prefix decode: off for this model runner (it needs page size 1, ...)", "off",
     "SHARED_PREFIX_DECODE=on, but the server says: shared-prefix decode: off for this model runner"),
    ("[2026-12-04 18:48:10] Failed to execute general plugin: llmhost_shared_prefix_decode\n"
     "Traceback (most recent call last):",
     "failed", "SGLang could not run the plugin (Failed to execute general plugin: llmhost_shared_prefix_decode)"),
    ("[2026-12-04 18:48:40] The server is fired up and ready to roll!", "off",
     "the server log has no line from the plugin"),
])
def test_start_says_whether_the_plugin_took_from_the_servers_own_lines(log, status, says):
    got, line = said.verdict(log)
    assert got == status and says in line


def test_a_benchmark_records_the_decode_its_server_ran(tmp_path):
    import dataclasses

    from llmhost import config

    cfg = dataclasses.replace(config.load({"WORK_DIR": str(tmp_path)}), shared_prefix_decode="on")
    assert said.of_server(cfg) == ("", "")  # no log yet
    cfg.state_dir.mkdir(parents=True)
    (cfg.state_dir / "server.log").write_text("[2026-12-04 20:14:18] shared-prefix decode: on (SGLang 0.5.17, "
                                              "FlashInfer 0.6.15.post1)\n")
    assert said.of_server(cfg) == ("on", "shared-prefix decode: on (SGLang 0.5.17, FlashInfer 0.6.15.post1)")
    assert said.of_server(dataclasses.replace(cfg, shared_prefix_decode="off")) == ("off", said.OFF)
    assert said.of_server(dataclasses.replace(cfg, router="on")) == ("", "")  # each worker keeps its own log
