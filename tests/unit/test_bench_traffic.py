"""llmhost.bench.traffic: shared prompts per group, streamed replies measured, failures recorded as data."""
from __future__ import annotations

import itertools
import types

from llmhost.bench import traffic

LOAD = traffic.ChatLoad(concurrency=2, prefixes=2, prefix_words=20, max_tokens=4)


class FakeCompletions:
    """Streams four content chunks, then a usage chunk, as SGLang does with include_usage; or raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.system_prompts: list[str] = []

    def create(self, **kwargs):
        if self.error:
            raise self.error
        self.system_prompts.append(kwargs["messages"][0]["content"])
        delta = types.SimpleNamespace(content="x")
        chunks = [types.SimpleNamespace(choices=[types.SimpleNamespace(delta=delta)], usage=None) for _ in range(4)]
        usage = types.SimpleNamespace(prompt_tokens=30, completion_tokens=4,
                                      prompt_tokens_details=types.SimpleNamespace(cached_tokens=24))
        return iter(chunks + [types.SimpleNamespace(choices=[], usage=usage)])


def client(completions: FakeCompletions):
    return types.SimpleNamespace(chat=types.SimpleNamespace(completions=completions))


def test_requests_of_one_group_share_their_system_prompt_and_groups_differ():
    fake = FakeCompletions()
    for number in range(4):
        traffic.one_request(client(fake), "m", LOAD, number)
    assert fake.system_prompts[0] == fake.system_prompts[2] != fake.system_prompts[1] == fake.system_prompts[3]
    assert len(traffic.prefix_text(0, 20).split()) == 20 + 3  # "Reference document 0." + the words


def test_a_streamed_reply_yields_tokens_cache_hits_ttft_and_tpot():
    got = traffic.one_request(client(FakeCompletions()), "m", LOAD, 0)
    assert got["ok"] and got["completion_tokens"] == 4 and got["cached_tokens"] == 24
    assert got["ttft_s"] >= 0 and got["tpot_s"] is not None and got["tpot_s"] >= 0  # 4 tokens: 3 gaps
    assert len(got["gaps_s"]) == 3 and all(g >= 0 for g in got["gaps_s"])


def test_a_failed_request_is_a_record_not_an_exception():
    got = traffic.one_request(client(FakeCompletions(ConnectionError("refused"))), "m", LOAD, 0)
    assert got["ok"] is False and got["error"] == "ConnectionError: refused" and got["end"] >= got["start"]


def test_closed_loop_clients_number_requests_across_calls(capsys):
    numbers = itertools.count()
    first = traffic.run_clients(client(FakeCompletions()), "m", LOAD, 0.2, "[t] a", numbers)
    assert first and all(r["ok"] for r in first)
    assert next(numbers) >= len(first)  # the next call continues the numbering
    assert "[t] a: " in capsys.readouterr().out
