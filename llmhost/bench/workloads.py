"""Benchmark workloads: what the requests look like, as bench_serving dataset arguments (offline datasets only).

    agent        16 distinct 4,096-token system prompts, 128-token questions, 256-token answers
                 (bench_serving's generated-shared-prefix dataset, native /generate endpoint)
    chat         1,024 random token ids in, 256 out (random-ids: no ShareGPT download)
    long         8,192 in, 256 out (random-ids)
    agent-tools  the agent prompts through the OpenAI chat endpoint with three tool schemas in every request

How tools travel: bench_serving's sglang-oai-chat request function merges `--extra-request-body` into every chat
payload (after its own defaults), so `{"tools": [...], "tool_choice": "auto"}` there puts the schemas in each
request exactly as an OpenAI client would; the chat template renders them into the prompt, so they are part of the
shared prefix too. No custom dataset file is needed. Prompts are generated once: random-ids is seeded and
generated-shared-prefix prompts are cached by bench_serving under ~/.cache/sglang (keyed by seed and sizes).
A primed point's priming pass (llmhost.bench.points.is_primed: the agent sweep and warm points) uses the same seed
with one 1-token question per group (dataset_args(prime=True)).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Literal

Kind = Literal["gsp", "random-ids", "openai-chat"]
AGENT_GROUPS = 16  # distinct system prompts; gsp sends groups x prompts-per-group requests

# The tool schemas sent with every agent-tools request (also used by the tool-call quality check).
TOOLS: list[dict[str, object]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": "Search the internal documentation.",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "What to search for"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 20}}}}},
    {"type": "function", "function": {
        "name": "create_ticket", "description": "Open a support ticket.",
        "parameters": {"type": "object", "required": ["title", "priority"], "properties": {
            "title": {"type": "string"},
            "priority": {"type": "string", "enum": ["low", "medium", "high"]}}}}},
]


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    name: str
    kind: Kind
    description: str
    backend: str
    input_len: int  # tokens per request (system prompt + question for gsp)
    output_len: int

    @property
    def params(self) -> dict[str, object]:
        """Dataset parameters recorded in the manifest (what makes the prompts)."""
        if self.kind == "random-ids":
            return {"dataset": "random-ids", "random_input_len": self.input_len,
                    "random_output_len": self.output_len, "random_range_ratio": 1.0, "backend": self.backend}
        params: dict[str, object] = {"dataset": "generated-shared-prefix", "gsp_num_groups": AGENT_GROUPS,
                                     "gsp_system_prompt_len": 4096, "gsp_question_len": 128,
                                     "gsp_output_len": self.output_len, "backend": self.backend}
        if self.kind == "openai-chat":
            params["tools"] = [t["function"]["name"] for t in TOOLS]  # type: ignore[index]
        return params

    def dataset_args(self, num_prompts: int, prime: bool = False) -> list[str]:
        """bench_serving arguments that select this workload's prompts for `num_prompts` requests; `prime`: one
        1-token question per system prompt, which caches the prompts a warm point then asks new questions over."""
        if self.kind == "random-ids":
            if prime:
                raise ValueError(f"workload {self.name} has no shared prefixes to prime")
            # --tokenize-prompt: send the ids themselves. Without it bench_serving decodes them to text, which the
            # server re-tokenizes to 4-8% more tokens (up to 26%) than the input length every count reports.
            return ["--backend", self.backend, "--dataset-name", "random-ids", "--num-prompts", str(num_prompts),
                    "--random-input-len", str(self.input_len), "--random-output-len", str(self.output_len),
                    "--random-range-ratio", "1.0", "--tokenize-prompt"]
        # Same seed, same system prompts: gsp draws all of them first, then the questions, so a pass with one
        # 1-token question per group caches exactly the prompts of the measured pass and none of its questions.
        per, question, output = (1, 1, 1) if prime else (per_group(num_prompts), 128, self.output_len)
        args = ["--backend", self.backend, "--dataset-name", "generated-shared-prefix",
                "--num-prompts", str(AGENT_GROUPS * per),
                "--gsp-num-groups", str(AGENT_GROUPS), "--gsp-prompts-per-group", str(per),
                "--gsp-system-prompt-len", "4096", "--gsp-question-len", str(question),
                "--gsp-output-len", str(output)]
        if self.kind == "openai-chat":
            args += ["--extra-request-body", json.dumps({"tools": TOOLS, "tool_choice": "auto"})]
        return args


def per_group(num_prompts: int) -> int:
    """Prompts per system prompt: gsp ignores --num-prompts and sends groups x prompts-per-group requests."""
    return max(1, -(-num_prompts // AGENT_GROUPS))


def actual_prompts(workload: Workload, num_prompts: int) -> int:
    """How many requests bench_serving will really send (gsp rounds up to whole groups)."""
    return num_prompts if workload.kind == "random-ids" else AGENT_GROUPS * per_group(num_prompts)


REGISTRY: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("agent", "gsp", "Agent: 16 shared 4,096-token system prompts, 128-token question, 256-token answer",
                 "sglang", 4096 + 128, 256),
        Workload("chat", "random-ids", "Chat: 1,024 random tokens in, 256 out", "sglang", 1024, 256),
        Workload("long", "random-ids", "Long context: 8,192 random tokens in, 256 out", "sglang", 8192, 256),
        Workload("agent-tools", "openai-chat",
                 "Agent prompts via /v1/chat/completions with 3 tool schemas in every request",
                 "sglang-oai-chat", 4096 + 128, 256),
    )
}
