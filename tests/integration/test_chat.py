"""smoke_test.py chat through a pseudo-terminal against the stand-in: streaming turns, commands, tool loop, Ctrl-C/D."""
from __future__ import annotations

import os
import sys

import pexpect
import pytest

from standin.harness import free_port, launch

SERVED = "qwen3-4b"
PROMPT = "you> "


def spawn(repo, url: str, *extra: str) -> pexpect.spawn:
    env = {**os.environ, "OPENAI_API_KEY": "", "TERM": "dumb"}
    child = pexpect.spawn(sys.executable, [str(repo / "smoke_test.py"), "chat", "--base-url", url, "--model", SERVED,
                                           "--max-tokens", "24", *extra],
                          cwd=str(repo), env=env, encoding="utf-8", timeout=30)
    child.expect_exact(PROMPT)
    return child


@pytest.fixture(scope="module")
def server():
    port = free_port()
    # why: 40 ms per token makes a 300-token reply last 12 s, long enough to interrupt it mid-stream
    with launch(port, "--served-model-name", SERVED, "--enable-cache-report", env={"STANDIN_ITL_MS": "40"}) as srv:
        yield srv


def test_turns_stream_with_timing_and_commands_work(server, repo):
    child = spawn(repo, server.url, "--max-tokens", "3")
    child.sendline("Hello there")
    child.expect(r"\[thinking\] .+ \[/thinking\]")  # random weights answer only in reasoning_content
    child.expect(r"\[ttft \d+\.\d{3}s, total \d+\.\d{3}s, \d+ prompt \+ 3 completion tokens\]")
    child.expect_exact(PROMPT)
    child.sendline("/system You are terse.")
    child.expect_exact("[system prompt set]")
    child.sendline("/history")
    child.expect_exact("system: You are terse.")
    child.expect_exact("user: Hello there")
    child.expect_exact("[2 messages]")
    child.sendline("/reset")
    child.expect_exact("[conversation cleared]")
    child.sendline("/history")
    child.expect_exact("[0 messages]")
    child.sendline("/help")
    child.expect_exact("/tools [auto|forced|off]")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_forced_tool_call_runs_get_weather_and_the_model_continues(server, repo):
    child = spawn(repo, server.url, "--tools", "--tool-choice", "forced")
    child.sendline("What is the weather in Paris?")
    child.expect(r"\[tool\] get_weather\(\{\}\) -> \{\"city\": \"Paris\", \"temperature_c\": -?\d+, \"conditions\"")
    child.expect(r"\[ttft [^\]]+\]")  # the follow-up turn after the tool result
    child.expect_exact(PROMPT)
    child.sendline("/history")
    child.expect(r"assistant: .*tool_calls=\[\{\"id\": \"call_")
    child.expect_exact("tool: {\"city\": \"Paris\"")
    child.sendline("/tools")
    child.expect_exact("[tools off]")
    child.sendline("/tools")
    child.expect_exact("[tools auto]")
    child.sendeof()
    child.expect_exact("bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_cancels_a_reply_then_ctrl_c_at_the_prompt_exits(server, repo):
    child = spawn(repo, server.url, "--max-tokens", "300")
    child.sendline("Tell me a long story")
    child.expect_exact("[thinking] ")
    child.sendintr()
    child.expect_exact("[reply cancelled]")
    child.expect_exact(PROMPT)
    child.sendline("/history")
    child.expect_exact("[0 messages]")  # the cancelled turn is not kept
    child.sendintr()
    child.expect_exact("bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in (child.before or "")
