"""One configuration source for bash and Python: config.env (KEY=value) + environment overrides.

Rules: skip blank and '#' lines; split at the first '='; strip surrounding whitespace; expand a leading '~/' and
${KEY} of keys defined earlier in the file; an environment variable of the same name wins over the file.
bash reads the result through `python3 -m llmhost.config --env0` (lib.sh: load_config), so both languages see
exactly the same values. Stdlib only: this runs before any venv exists.

Every value remembers where it came from (`Config.source(key)`: "environment", "config.env:19",
"config.local.env:3"), and every value is checked against llmhost/settings.py before anything runs: a bad one is a
ConfigError whose one-line message names the setting and that source, e.g.
"config.local.env:7: PORT=70000 is not a port (1-65535)".

    python3 -m llmhost.config --print      # effective configuration and each value's source (API_KEY_FILE is a
                                           # path, not the key)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Mapping, Tuple

from llmhost.settings import CHECKS, REPO_ROOT, redact_env_pairs

DEFAULT_FILE = REPO_ROOT / "config.env"
LOCAL_FILE = REPO_ROOT / "config.local.env"
_REF = re.compile(r"\$\{([A-Z0-9_]+)\}")


@dataclasses.dataclass(frozen=True)  # no slots=True: laptops may run Python 3.9
class Config:
    work_dir: str
    results_dir: str
    flashinfer_workspace_base: str
    bytecode_cache: str
    model_id: str
    model_dir: str
    served_model_name: str
    load_format: str
    host: str
    port: int
    dashboard_port: int
    sglang_python: str
    sglang_version: str
    pypi_index_url: str
    flashinfer_index_url: str
    flashinfer_jit_cache_index_url: str
    api_key_file: str
    tokenizer_worker_num: str
    mem_fraction_static: str
    chunked_prefill_size: str
    cuda_graph_prefill_tokens: str
    cuda_graph_decode_batches: str
    tool_call_parser: str
    reasoning_parser: str
    server_extra_args: str
    server_env: str
    freeze_gc: str
    scheduler_preload: str
    shared_prefix_decode: str
    ready_timeout_s: int
    tmux_session: str
    bench_user_arms: str
    tp_size: int
    dp_size: int
    gpus: str
    nnodes: int
    dist_init_addr: str
    router: str
    worker_urls: str
    router_policy: str
    router_metrics_port: int
    gpu_hourly_usd: float | None
    _sources: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:  # an IPv6 literal such as ::1 goes in brackets, or the URL has no valid host
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def results_path(self) -> Path:
        path = Path(self.results_dir)
        return path if path.is_absolute() else REPO_ROOT / path

    @property
    def state_dir(self) -> Path:
        """Server state written by serve.sh: pid file, launch command, log, API-key YAML."""
        return Path(self.work_dir) / "server"

    def source(self, key: str) -> str:
        """Where KEY's value came from: "environment", "config.env:19", "config.local.env:3" (another file: its path)."""
        return self._sources.get(key.upper(), "config.env")

    def api_key(self) -> str | None:
        """The API key from API_KEY_FILE, or None when no key is configured."""
        if not self.api_key_file:
            return None
        return read_secret(self.api_key_file, f"{self.source('API_KEY_FILE')}: API_KEY_FILE={self.api_key_file}",
                           "fix the path, or set API_KEY_FILE= for no key")


def read_secret(path: str, named: str, fix: str) -> str | None:
    """A key file's first line; refused, like ssh refuses a loose private key, when group or others may read it.
    `named` says which setting or flag gave the path. Raises OSError with one line (naming `named`)."""
    file = Path(path).expanduser()
    try:
        mode = file.stat().st_mode
        key = file.read_text().strip()
    except OSError as exc:  # still an OSError for callers; the message names the setting and the way out
        raise OSError(f"{named} cannot be read ({exc.strerror}) — {fix}") from None
    except UnicodeDecodeError:
        raise OSError(f"{named} is not UTF-8 text — put the key on its first line") from None
    if os.name == "posix" and mode & 0o077:  # Windows reports 0o666 for every file: its ACLs are not mode bits
        raise OSError(f"{named} may be read by other users (mode {mode & 0o777:04o}) — run chmod 600 {file}")
    return key or None


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message is one line naming the setting and where it
    came from, e.g. "config.local.env:7: PORT=70000 is not a port (1-65535)"."""


# --- reading the files: KEY=value lines, each remembered with where it came from ------------------------------------

Entry = Tuple[str, str]  # (value, source): source is "environment" or "<file>:<line>"


def read_text(path: Path, label: str) -> str:
    """A config file as text; unreadable or non-UTF-8 bytes are a ConfigError naming the file and line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{label}: cannot be read ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{label}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8 text — save the file as "
                          "UTF-8") from None


def parse_entries(text: str, overrides: dict[str, Entry], label: str,
                  seen: dict[str, Entry] | None = None) -> dict[str, Entry]:
    """KEY -> (value, source) of one file; `overrides` win; ~/ and ${KEY} expand against values seen so far."""
    values: dict[str, Entry] = {}
    earlier = dict(seen or {})  # what ${KEY} may name: an earlier file's values, then this file's earlier lines
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{label}:{number}"
        if "=" not in line:
            raise ConfigError(f"{where}: expected KEY=value, got {line!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ConfigError(f"{where}: bad key {key!r} (use UPPER_SNAKE_CASE)")
        if key in overrides:
            values[key] = earlier[key] = overrides[key]
            continue

        def ref(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in earlier:
                raise ConfigError(f"{where}: ${{{name}}} is not defined above {key}")
            return earlier[name][0]

        value = _REF.sub(ref, value)
        if value == "~" or value.startswith("~/"):
            value = str(Path.home()) + value[1:]
        values[key] = earlier[key] = (value, where)
    return values


def parse_lines(text: str, env: dict[str, str]) -> dict[str, str]:
    """Parse KEY=value lines of config.env; env wins over the file; ~/ and ${KEY} expand against values seen so far."""
    return {k: v for k, (v, _) in parse_entries(text, _from_env(env), "config.env").items()}


def _from_env(env: dict[str, str]) -> dict[str, Entry]:
    return {key: (value, "environment") for key, value in env.items()}


def _label(path: Path) -> str:
    """How messages name a config file: its name inside the checkout, else the path as given."""
    return path.name if path.resolve().parent == REPO_ROOT else str(path)


def load_entries(env: dict[str, str] | None = None) -> dict[str, Entry]:
    """KEY -> (value, source): config.env, then config.local.env (or $LLMHOST_CONFIG), then the environment."""
    env = dict(os.environ if env is None else env)
    from_env = _from_env(env)
    text = read_text(DEFAULT_FILE, "config.env")
    override = env.get("LLMHOST_CONFIG") or (str(LOCAL_FILE) if LOCAL_FILE.exists() else "")
    if not override:
        return parse_entries(text, from_env, "config.env")
    path = Path(override)
    if not path.is_file():
        raise ConfigError(f"environment: LLMHOST_CONFIG={override} is not a file")
    defaults = parse_entries(text, from_env, "config.env")
    # The local file's values, its ${KEY}s resolved against config.env and earlier local lines ...
    local = parse_entries(read_text(path, _label(path)), from_env, _label(path), seen=defaults)
    # ... then act like environment overrides, so a local WORK_DIR moves MODEL_DIR, SGLANG_PYTHON, ... with it
    # (the environment still wins); unknown local keys stay in, for load() to name.
    return {**parse_entries(text, {**local, **from_env}, "config.env"), **local}


def load_values(env: dict[str, str] | None = None) -> dict[str, str]:
    """Raw KEY -> value map: config.env, then config.local.env (or $LLMHOST_CONFIG), then the environment."""
    return {key: value for key, (value, _) in load_entries(env).items()}


def load(env: dict[str, str] | None = None) -> Config:
    """Load and validate the effective configuration; a bad value is a ConfigError naming it and its source."""
    entries = load_entries(env)
    missing = [key for key in CHECKS if key not in entries]
    if missing:
        raise ConfigError(f"config.env lacks {', '.join(missing)}")
    for key, (_, source) in entries.items():
        if key not in CHECKS:
            raise ConfigError(f"{source}: unknown setting {key} (typo? see config.env for the keys)")
    typed: dict[str, object] = {}
    for key, check in CHECKS.items():
        value, source = entries[key]
        try:
            typed[key.lower()] = check(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}={_shown(value)} {exc}") from None
    return Config(**typed, _sources={key: source for key, (_, source) in entries.items()})  # type: ignore[arg-type]


def _shown(value: str) -> str:
    """A value as the message prints it: bare when that is unambiguous, quoted when empty or spaced."""
    return value if value and value.isprintable() and not any(c.isspace() for c in value) else repr(value)


def redacted(cfg: Config) -> dict[str, object]:
    """Config as a dict safe for logs and results (no secret values; API_KEY_FILE is a path, kept)."""
    out = {key.lower(): getattr(cfg, key.lower()) for key in CHECKS}
    out["server_env"] = redact_env_pairs(cfg.server_env)  # HF_TOKEN=<redacted>
    out["api_key_set"] = bool(cfg.api_key_file)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--env0", action="store_true", help="print KEY=value records separated by NUL (for lib.sh)")
    mode.add_argument("--print", action="store_true", help="print the effective configuration (default)")
    parser.add_argument("--log-prefix", default="config", help="prefix of the error line, e.g. serve for "
                        "'[serve] error: ...' (lib.sh passes its script's; default: config)")
    args = parser.parse_args(argv)
    try:
        entries = load_entries()
        load()  # validate every value too: bash gets exactly what Python accepts
    except ConfigError as exc:
        print(f"[{args.log_prefix}] error: {exc}", file=sys.stderr)
        return 1
    if args.env0:
        sys.stdout.write("".join(f"{k}={v}\0" for k, (v, _) in entries.items()))
    else:
        width = max(map(len, entries))
        for key, (value, source) in entries.items():
            print(f"{key:<{width}} = {value}    # {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
