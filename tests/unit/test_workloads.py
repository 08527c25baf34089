"""Workloads: offline datasets only, the article's shapes, tools carried in every chat request."""
from __future__ import annotations

import json

from llmhost.bench import records, workloads
from llmhost.bench.workloads import REGISTRY


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_no_workload_uses_a_dataset_that_downloads():
    for w in REGISTRY.values():
        assert _arg(w.dataset_args(32), "--dataset-name") in ("random-ids", "generated-shared-prefix")


def test_agent_is_sixteen_shared_4k_system_prompts_with_128_token_questions_and_256_token_answers():
    argv = REGISTRY["agent"].dataset_args(64)
    assert (_arg(argv, "--gsp-num-groups"), _arg(argv, "--gsp-prompts-per-group")) == ("16", "4")
    assert (_arg(argv, "--gsp-system-prompt-len"), _arg(argv, "--gsp-question-len"),
            _arg(argv, "--gsp-output-len")) == ("4096", "128", "256")


def test_chat_and_long_are_fixed_length_random_ids():
    for name, n_in in (("chat", "1024"), ("long", "8192")):
        argv = REGISTRY[name].dataset_args(10)
        assert (_arg(argv, "--random-input-len"), _arg(argv, "--random-output-len")) == (n_in, "256")
        assert _arg(argv, "--random-range-ratio") == "1.0" and _arg(argv, "--num-prompts") == "10"


def test_agent_tools_sends_the_tool_schemas_in_every_chat_request():
    argv = REGISTRY["agent-tools"].dataset_args(16)
    assert _arg(argv, "--backend") == "sglang-oai-chat"
    body = json.loads(_arg(argv, "--extra-request-body"))
    assert body["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "search_docs", "create_ticket"]
    assert REGISTRY["agent-tools"].params["tools"] == ["get_weather", "search_docs", "create_ticket"]


def test_gsp_rounds_up_to_whole_groups():
    assert workloads.per_group(1) == 1 and workloads.per_group(17) == 2
    assert workloads.actual_prompts(REGISTRY["agent"], 40) == 48
    assert workloads.actual_prompts(REGISTRY["chat"], 40) == 40


def test_manifest_entries_carry_kind_and_dataset_parameters():
    entries = {w.name: records.WorkloadRecord.of(w) for w in REGISTRY.values()}
    kinds = {name: entry.kind for name, entry in entries.items()}
    assert kinds == {"agent": "gsp", "chat": "random-ids", "long": "random-ids", "agent-tools": "openai-chat"}
    assert entries["long"].params["random_input_len"] == 8192


def test_the_priming_pass_is_one_single_token_question_per_system_prompt():
    # same seed and system prompts as the measured pass, the smallest question and answer gsp can make: it caches the
    # 16 prompts and costs one decode step
    argv = REGISTRY["agent"].dataset_args(384, prime=True)
    assert (_arg(argv, "--num-prompts"), _arg(argv, "--gsp-prompts-per-group")) == ("16", "1")
    assert (_arg(argv, "--gsp-system-prompt-len"), _arg(argv, "--gsp-question-len"),
            _arg(argv, "--gsp-output-len")) == ("4096", "1", "1")
