"""Interactive streaming chat against the model API (`smoke_test.py chat`), with the demo get_weather tool loop.

Each turn streams the reply (reasoning dimmed inside [thinking]…[/thinking], then the answer) and ends with a line
giving time to first token, total time and token counts. With tools on, a reply that calls get_weather is answered
by a local deterministic fake (fake_weather), the result goes back as a `tool` message, and the model continues.
Random/dummy weights never call a tool on their own: `/tools forced` (or `--tool-choice forced`) names get_weather
in tool_choice with thinking off for the first request of each turn, as smoke_test's forced check does.
Ctrl-C during a reply cancels that reply (the turn is dropped from history); Ctrl-C or Ctrl-D at the prompt exits.
"""
from __future__ import annotations

import json
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from llmhost.client import Endpoint, describe_error
from llmhost.smoke.checks import GET_WEATHER

HELP = """commands:
  /tools [auto|forced|off]  toggle the get_weather tool (no argument: on<->off); forced makes the model call it
  /system <text>            set the system prompt (kept across /reset)
  /reset                    forget the conversation
  /history                  show the conversation so far
  /help                     this list
  /quit                     leave (Ctrl-D works too)"""
MAX_TOOL_ROUNDS = 3  # why: a model that keeps calling tools must not loop forever


def fake_weather(arguments: str) -> dict:
    """Deterministic stand-in for a weather service: same city -> same report."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    city = str(args.get("city") or "Paris") if isinstance(args, dict) else "Paris"
    seed = zlib.crc32(city.lower().encode())
    skies = ["sunny", "cloudy", "light rain", "windy", "snow"]
    return {"city": city, "temperature_c": seed % 35 - 5, "conditions": skies[seed % len(skies)]}


@dataclass
class Session:
    """Conversation state; `tool_mode` is off, auto or forced."""
    system: str | None = None
    tool_mode: str = "off"
    messages: list[dict] = field(default_factory=list)

    def history(self) -> list[dict]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.messages


@dataclass(frozen=True)
class Turn:
    content: str
    tool_calls: list[dict]
    ttft_s: float | None
    total_s: float
    usage: Any


class Printer:
    """Writes streamed text; reasoning is dimmed on a terminal and always bracketed so it reads apart."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.in_thinking = False

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def reasoning(self, text: str) -> None:
        if not self.in_thinking:
            self.write(("\x1b[2m" if self.tty else "") + "[thinking] ")
            self.in_thinking = True
        self.write(text)

    def content(self, text: str) -> None:
        self.end_thinking()
        self.write(text)

    def end_thinking(self) -> None:
        if self.in_thinking:
            self.write(" [/thinking]" + ("\x1b[0m" if self.tty else "") + "\n")
            self.in_thinking = False


def stream_turn(client: Any, ep: Endpoint, session: Session, printer: Printer, max_tokens: int,
                force_tool: bool, last_round: bool = False) -> Turn:
    """One streamed request; tool-call deltas are merged by index. KeyboardInterrupt propagates (caller cancels).
    On the last tool round tool_choice is "none": a call nobody answers would break the conversation's protocol."""
    kw: dict[str, Any] = {}
    if session.tool_mode != "off":
        kw["tools"] = [GET_WEATHER]
        kw["tool_choice"] = "none" if last_round else "auto"
        if force_tool:
            kw["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
            kw["extra_body"] = {"chat_template_kwargs": {"enable_thinking": False}}
    t0 = time.perf_counter()
    stream = client.chat.completions.create(model=ep.model, messages=session.history(), max_tokens=max_tokens,
                                            stream=True, stream_options={"include_usage": True}, **kw)
    ttft, content, calls, use = None, [], {}, None
    try:
        for chunk in stream:
            use = chunk.usage or use
            for choice in chunk.choices:
                delta = choice.delta
                reasoning = getattr(delta, "reasoning_content", None)
                if (reasoning or delta.content or delta.tool_calls) and ttft is None:
                    ttft = time.perf_counter() - t0
                if reasoning:
                    printer.reasoning(reasoning)
                if delta.content:
                    printer.content(delta.content)
                    content.append(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
    finally:
        stream.close()  # why: on Ctrl-C this drops the connection, so the server aborts the request
        printer.end_thinking()
    tool_calls = [{"id": c["id"] or f"call_{i}", "type": "function",
                   "function": {"name": c["name"], "arguments": c["arguments"]}} for i, c in sorted(calls.items())]
    return Turn("".join(content), tool_calls, ttft, time.perf_counter() - t0, use)


def timing_line(turn: Turn) -> str:
    ttft = f"{turn.ttft_s:.3f}s" if turn.ttft_s is not None else "n/a"
    tokens = f", {turn.usage.prompt_tokens} prompt + {turn.usage.completion_tokens} completion tokens" \
        if turn.usage is not None else ""
    return f"[ttft {ttft}, total {turn.total_s:.3f}s{tokens}]"


def reply(client: Any, ep: Endpoint, session: Session, printer: Printer, max_tokens: int) -> None:
    """The model's answer to the last user message, running get_weather calls in between."""
    for round_ in range(MAX_TOOL_ROUNDS + 1):
        force = session.tool_mode == "forced" and round_ == 0
        last = round_ == MAX_TOOL_ROUNDS
        turn = stream_turn(client, ep, session, printer, max_tokens, force and not last, last)
        calls = [] if last else turn.tool_calls  # why: every call in history needs its tool reply
        printer.write(("\n" if turn.content else "") + timing_line(turn) + "\n")
        session.messages.append({"role": "assistant", "content": turn.content,
                                 **({"tool_calls": calls} if calls else {})})
        if not calls:
            return
        for call in calls:
            fn = call["function"]
            result = fake_weather(fn["arguments"]) if fn["name"] == "get_weather" else {"error": "unknown tool"}
            printer.write(f"[tool] {fn['name']}({fn['arguments']}) -> {json.dumps(result)}\n")
            session.messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})


def command(line: str, session: Session, out: Printer) -> bool:
    """Handle a /command; False means quit."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name == "/quit":
        return False
    if name == "/help":
        out.write(HELP + "\n")
    elif name == "/reset":
        session.messages.clear()
        out.write("[conversation cleared]\n")
    elif name == "/system":
        session.system = arg or None
        out.write(f"[system prompt {'set' if arg else 'cleared'}]\n")
    elif name == "/history":
        for msg in session.history():
            extra = f" tool_calls={json.dumps(msg['tool_calls'])}" if msg.get("tool_calls") else ""
            out.write(f"{msg['role']}: {msg.get('content') or ''}{extra}\n")
        out.write(f"[{len(session.messages)} messages]\n")
    elif name == "/tools":
        modes = {"auto": "auto", "forced": "forced", "off": "off", "on": "auto", "": None}
        if arg.lower() not in modes:
            out.write(f"[unknown tool mode '{arg}'; use /tools auto|forced|off]\n")
            return True
        session.tool_mode = modes[arg.lower()] or ("off" if session.tool_mode != "off" else "auto")
        out.write(f"[tools {session.tool_mode}]\n")
    else:
        out.write(f"[unknown command {name}; /help lists them]\n")
    return True


def repl(client: Any, ep: Endpoint, session: Session, max_tokens: int,
         read: Callable[[str], str] = input, out: TextIO = sys.stdout) -> int:
    """The interactive loop; returns the exit status (0 on /quit, Ctrl-C or Ctrl-D at the prompt)."""
    printer = Printer(out)
    printer.write(f"chat with {ep.model} at {ep.base_url} — tools {session.tool_mode}; /help for commands\n")
    while True:
        try:
            line = read("you> ").strip()
        except (EOFError, KeyboardInterrupt):
            printer.write("\nbye\n")
            return 0
        if not line:
            continue
        if line.startswith("/"):
            if not command(line, session, printer):
                printer.write("bye\n")
                return 0
            continue
        mark = len(session.messages)
        session.messages.append({"role": "user", "content": line})
        try:
            reply(client, ep, session, printer, max_tokens)
        except KeyboardInterrupt:
            del session.messages[mark:]  # why: a half reply would poison the next turn's context
            printer.write("\n[reply cancelled]\n")
        except Exception as exc:  # noqa: BLE001 - show the problem, keep the session alive
            del session.messages[mark:]
            printer.write(f"\n[error] {describe_error(exc, ep)}\n")
