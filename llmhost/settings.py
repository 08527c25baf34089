"""What each config.env setting may hold: one table, KEY -> check, read by llmhost.config (and through it, lib.sh).

A check takes the raw text and returns the typed value, or raises ValueError whose message completes the sentence
"<source>: KEY=value ..." (e.g. "is not a port (1-65535)"). The choices of LOAD_FORMAT and the two parsers are
SGLang 0.5.17's own (`python -m sglang.launch_server --help`; tests/unit/test_settings.py compares them with the
captured help), so a typo is refused here instead of by a server that took minutes to start. Stdlib only.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Callable, Dict

REPO_ROOT = Path(__file__).resolve().parent.parent
# Secret-looking environment names, ending in TOKEN, KEY, SECRET, PASSWORD... (HF_TOKEN, OPENAI_API_KEY): kept from
# the server's inherited environment and masked where SERVER_ENV is recorded. SGLANG_INIT_NEW_TOKEN_RATIO and
# TOKENIZERS_PARALLELISM are settings and pass.
SECRET_ENV_NAME = re.compile(r"([A-Za-z0-9_]*_)?(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)")

LOAD_FORMATS = ("auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf", "bitsandbytes",
                "mistral", "layered", "flash_rl", "remote", "remote_instance", "fastsafetensors", "private",
                "runai_streamer")
TOOL_CALL_PARSERS = ("auto", "apertus2509", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32",
                     "deepseekv4", "glm", "glm45", "glm47", "gpt-oss", "kimi_k2", "kimi_k3", "lfm2", "llama3", "mimo",
                     "minicpm5", "mistral", "poolside_v1", "pythonic", "qwen", "qwen25", "qwen3_coder", "step3",
                     "step3p5", "minimax-m2", "minimax-m3", "trinity", "interns1", "hermes", "hunyuan", "gigachat3",
                     "gemma4", "inkling")
REASONING_PARSERS = ("auto", "apertus2509", "deepseek-r1", "deepseek-v3", "deepseek-v4", "glm45", "hunyuan", "gpt-oss",
                     "kimi", "kimi_k2", "kimi_k3", "mimo", "poolside_v1", "qwen3", "qwen3-thinking", "minimax",
                     "minimax-append-think", "minimax-m3", "step3", "step3p5", "mistral", "nemotron_3", "interns1",
                     "gemma4", "inkling", "cohere_command4")
# sglang-router 0.3.2's --policy choices for regular (not prefill/decode) mode; manual needs routing keys we never send
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")

Check = Callable[[str], object]


def _integer(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError("is not an integer")
    return int(text)


def at_least(low: int, unit: str = "") -> Check:
    def check(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise ValueError(f"must be >= {low}{unit}")
        return value
    return check


def port(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= 65535:
        raise ValueError("is not a port (1-65535)")
    return int(text)


def one_of(choices: tuple[str, ...], what: str) -> Check:
    def check(text: str) -> str:
        if text not in choices:
            raise ValueError(f"is not one of SGLang's {what} ({', '.join(choices)})")
        return text
    return check


def auto_or(check: Check, what: str) -> Check:
    """'auto' (SGLang or the toolkit decides) or a value `check` accepts."""
    def checked(text: str) -> str:
        if text != "auto":
            try:
                check(text)
            except ValueError:
                raise ValueError(f"must be auto or {what}") from None
        return text
    return checked


def _fraction(text: str) -> float:
    value = float(text)  # ValueError for words
    if not 0 < value < 1:
        raise ValueError
    return value


def _chunk(text: str) -> int:
    value = _integer(text)
    if value != -1 and value < 1:
        raise ValueError
    return value


def word(text: str) -> str:
    """One token: no spaces or control characters (names, ids)."""
    if not text or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError("must be one word (no spaces)")
    return text


def matching(regex: str, reason: str) -> Check:
    """Text the whole of which matches `regex`; else `reason`."""
    def check(text: str) -> str:
        if not re.fullmatch(regex, text):
            raise ValueError(reason)
        return text
    return check


def directory(absolute: bool) -> Check:
    """A directory path (relative ones are relative to the checkout) that is not an existing file."""
    def check(text: str) -> str:
        if not text or not text.isprintable():
            raise ValueError("must be a directory path")
        path = Path(text)
        if absolute and not path.is_absolute():  # empty made /server, /venv, /flashinfer-cache out of every path
            raise ValueError("must be an absolute path (e.g. ~/llmhost)")
        if (path if path.is_absolute() else REPO_ROOT / path).is_file():
            raise ValueError("is a file, not a directory")
        return text
    return check


def optional(check: Check) -> Check:
    """`check`, or empty (the setting off)."""
    return lambda text: text and check(text)


def optional_path(text: str) -> str:
    if text and not text.isprintable():
        raise ValueError("must be a path on one line")
    return text


def command(text: str) -> str:
    if not text:
        raise ValueError("must name a program (a path, or a name on PATH)")
    return optional_path(text)


def graph_sizes(text: str) -> str:
    """auto (SGLang's own CUDA graph sizes) or whole numbers > 0 separated by spaces (llmhost/serve/graphs.py)."""
    words = text.split()
    if text != "auto" and (not words or not all(w.isdigit() and int(w) > 0 for w in words)):
        raise ValueError("must be auto or whole numbers > 0 separated by spaces (e.g. 1 2 4 8)")
    return text


def shell_words(text: str) -> str:
    try:
        shlex.split(text)
    except ValueError as exc:  # "No closing quotation"
        raise ValueError(f"cannot be split like a shell command line ({exc})") from None
    return text


def env_pairs(text: str) -> str:
    for item in shlex.split(shell_words(text)):
        name, sep, _ = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"has {item!r}, which is not NAME=VALUE")
    return text


def secret_env_names(text: str) -> list[str]:
    """The secret-looking names of NAME=VALUE pairs (SERVER_ENV's words), e.g. HF_TOKEN."""
    return [name for name, sep, _ in (item.partition("=") for item in _env_items(text))
            if sep and SECRET_ENV_NAME.fullmatch(name)]


def redact_env_pairs(text: str) -> str:
    """NAME=VALUE pairs as results may hold them: each secret-looking name's value masked, the rest as written."""
    if not secret_env_names(text):
        return text
    return shlex.join(f"{name}=<redacted>" if sep and SECRET_ENV_NAME.fullmatch(name) else item
                      for item in _env_items(text) for name, sep, _ in [item.partition("=")])


def _env_items(text: str) -> list[str]:
    try:
        return shlex.split(shell_words(text))
    except ValueError:  # not a shell line (env_pairs refuses it): its words
        return text.split()


def tmux_session(text: str) -> str:
    if not text or any(c in text for c in ":.") or not text.isprintable():
        raise ValueError("must be a name without ':' or '.' (tmux would rewrite it)")
    return text


def arm_specs(text: str) -> str:
    for spec in (part.strip() for part in text.split(";")):
        if spec and not re.fullmatch(r"[A-Za-z0-9_-]+=.*", spec):
            raise ValueError(f"has {spec!r}, which is not NAME=launch_server flags (NAME: letters, digits, - and _)")
    return text


def optional_price(text: str) -> float | None:
    """Empty (no price: costs are not shown) or a positive amount of money such as 3.50; no sign, exponent or nan."""
    if not text:
        return None
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?|\.[0-9]+", text) or float(text) == 0:
        raise ValueError("must be empty (costs not shown) or a positive price in US dollars per hour, e.g. 3.50")
    return float(text)


def device_list(text: str) -> str:
    """Empty (every visible GPU) or nvidia-smi indices separated by commas: 0,1 (a repeat shares a GPU between
    the router's local workers; llmhost/serve/parallel.py refuses it without the router)."""
    if text and not re.fullmatch(r"[0-9]+(,[0-9]+)*", text):
        raise ValueError("must be empty (every visible GPU) or GPU indices separated by commas (e.g. 0,1)")
    return text


def worker_urls(text: str) -> str:
    """Empty (local workers) or http(s)://host:port URLs separated by spaces."""
    for url in text.split():
        if not re.fullmatch(r"https?://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}/?", url):
            raise ValueError(f"has {url!r}, which is not a worker URL such as http://10.0.0.2:30000")
    return text


def optional_endpoint(text: str) -> str:
    """Empty or host:port (IPv6 in brackets), as SGLang's --dist-init-addr takes it."""
    if text and not re.fullmatch(r"([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}", text):
        raise ValueError("must be empty or host:port of node 0 (e.g. 10.0.0.1:25000)")
    if text:
        port(text.rsplit(":", 1)[1])
    return text


def index_url(text: str) -> str:
    """A package index (PEP 503 simple API) setup's installers can use: http(s), or file:// for a local mirror."""
    if not re.fullmatch(r"(https?|file)://\S+", text):
        raise ValueError("is not an index URL (http://, https:// or file://)")
    return text.rstrip("/")


CHECKS: Dict[str, Check] = {  # every config.env key, in config.env's order; the Config field is the key lower-cased
    "WORK_DIR": directory(absolute=True),
    "RESULTS_DIR": directory(absolute=False),
    "FLASHINFER_WORKSPACE_BASE": directory(absolute=True),
    "BYTECODE_CACHE": optional(directory(absolute=True)),
    "MODEL_ID": matching(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?",
                         "is not a Hugging Face repo id (e.g. Qwen/Qwen3-4B)"),
    "MODEL_DIR": directory(absolute=True),
    "SERVED_MODEL_NAME": word,
    "LOAD_FORMAT": one_of(LOAD_FORMATS, "load formats"),
    "HOST": matching(r"[A-Za-z0-9._:%-]+", "is not a host name or IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)"),
    "PORT": port,
    "DASHBOARD_PORT": port,
    "SGLANG_PYTHON": command,
    "SGLANG_VERSION": matching(r"[0-9]+(\.[0-9]+)+[A-Za-z0-9.+-]*", "is not a release number (e.g. 0.5.17)"),
    "PYPI_INDEX_URL": index_url,
    "FLASHINFER_INDEX_URL": index_url,
    "FLASHINFER_JIT_CACHE_INDEX_URL": index_url,
    "API_KEY_FILE": optional_path,
    "TOKENIZER_WORKER_NUM": auto_or(at_least(1), "a number of processes >= 1"),
    "MEM_FRACTION_STATIC": auto_or(_fraction, "a fraction between 0 and 1"),
    "CHUNKED_PREFILL_SIZE": auto_or(_chunk, "a number of tokens >= 1 (-1 = off)"),
    "CUDA_GRAPH_PREFILL_TOKENS": graph_sizes,
    "CUDA_GRAPH_DECODE_BATCHES": graph_sizes,
    "TOOL_CALL_PARSER": one_of(TOOL_CALL_PARSERS, "tool-call parsers"),
    "REASONING_PARSER": one_of(REASONING_PARSERS, "reasoning parsers"),
    "SERVER_EXTRA_ARGS": shell_words,
    "SERVER_ENV": env_pairs,
    "FREEZE_GC": matching(r"on|off", "must be on or off"),
    "SCHEDULER_PRELOAD": matching(r"on|off|standby", "must be on, off or standby"),
    "SHARED_PREFIX_DECODE": matching(r"on|off", "must be on or off"),
    "READY_TIMEOUT_S": at_least(1, " seconds"),  # 0 would give up before the first poll
    "TMUX_SESSION": tmux_session,
    "BENCH_USER_ARMS": arm_specs,
    "TP_SIZE": at_least(1, " GPUs"),
    "DP_SIZE": at_least(1, " copies"),
    "GPUS": device_list,
    "NNODES": at_least(1, " hosts"),
    "DIST_INIT_ADDR": optional_endpoint,
    "ROUTER": matching(r"on|off", "must be on or off"),
    "WORKER_URLS": worker_urls,
    "ROUTER_POLICY": one_of(ROUTER_POLICIES, "router policies"),
    "ROUTER_METRICS_PORT": port,
    "GPU_HOURLY_USD": optional_price,
}
