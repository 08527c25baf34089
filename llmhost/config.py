"""One configuration source for bash and Python: config.env (KEY=value) + environment overrides.

Rules: skip blank and '#' lines; split at the first '='; strip surrounding whitespace; expand a leading '~/' and
${KEY} of keys defined earlier in the file; an environment variable of the same name wins over the file.
bash reads the result through `python3 -m llmhost.config --env0` (lib.sh: load_config), so both languages see
exactly the same values. Stdlib only: this runs before any venv exists.

    python3 -m llmhost.config --print      # effective configuration, secrets redacted
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = REPO_ROOT / "config.env"
LOCAL_FILE = REPO_ROOT / "config.local.env"
_REF = re.compile(r"\$\{([A-Z0-9_]+)\}")


@dataclasses.dataclass(frozen=True)  # no slots=True: laptops may run Python 3.9
class Config:
    work_dir: str
    results_dir: str
    flashinfer_workspace_base: str
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
    tool_call_parser: str
    reasoning_parser: str
    server_extra_args: str
    server_env: str
    ready_timeout_s: int
    tmux_session: str
    bench_user_arms: str

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

    def api_key(self) -> str | None:
        """The API key from API_KEY_FILE, or None when no key is configured."""
        if not self.api_key_file:
            return None
        try:
            key = Path(self.api_key_file).read_text().strip()
        except OSError as exc:  # still an OSError for callers; the message names the setting and the way out
            raise OSError(f"API_KEY_FILE={self.api_key_file} cannot be read ({exc.strerror}) — fix the path, "
                          "or set API_KEY_FILE= for no key") from None
        return key or None


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message is one line for the user."""


def parse_lines(text: str, env: dict[str, str]) -> dict[str, str]:
    """Parse KEY=value lines; env wins over the file; ~/ and ${KEY} expand against values seen so far."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConfigError(f"line {number}: expected KEY=value, got {line!r}")
        key, value = (part.strip() for part in line.split("=", 1))
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ConfigError(f"line {number}: bad key {key!r} (use UPPER_SNAKE_CASE)")
        if key in env:
            values[key] = env[key]
            continue

        def ref(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise ConfigError(f"line {number}: ${{{name}}} is not defined above {key}")
            return values[name]

        value = _REF.sub(ref, value)
        if value == "~" or value.startswith("~/"):
            value = str(Path.home()) + value[1:]
        values[key] = value
    return values


def load_values(env: dict[str, str] | None = None) -> dict[str, str]:
    """Raw KEY -> value map: config.env, then config.local.env (or $LLMHOST_CONFIG), then the environment."""
    env = dict(os.environ if env is None else env)
    text = DEFAULT_FILE.read_text()
    override = env.get("LLMHOST_CONFIG") or (str(LOCAL_FILE) if LOCAL_FILE.exists() else "")
    if not override:
        return parse_lines(text, env)
    path = Path(override)
    if not path.is_file():
        raise ConfigError(f"LLMHOST_CONFIG={override} is not a file")
    local_text = path.read_text()
    # The local file's values, its ${KEY}s resolved against config.env and earlier local lines ...
    combined = parse_lines(text + "\n" + local_text, env)
    local = {key: combined[key] for key in parse_lines(local_text, {k: "" for k in combined})}
    # ... then act like environment overrides, so a local WORK_DIR moves MODEL_DIR, SGLANG_PYTHON, ... with it
    # (the environment still wins); unknown local keys stay in, for load() to name.
    return {**parse_lines(text, {**local, **env}), **local}


def load(env: dict[str, str] | None = None) -> Config:
    """Load and validate the effective configuration."""
    values = load_values(env)
    fields = {f.name: f for f in dataclasses.fields(Config)}
    missing = [k.upper() for k in fields if k.upper() not in values]
    if missing:
        raise ConfigError(f"config.env lacks {', '.join(missing)}")
    unknown = [k for k in values if k.lower() not in fields]
    if unknown:
        raise ConfigError(f"unknown setting {', '.join(unknown)} (typo? see config.env for the keys)")
    kwargs: dict[str, object] = {}
    for name, field in fields.items():
        value = values[name.upper()]
        if field.type == "int":
            try:
                kwargs[name] = int(value)
            except ValueError:
                raise ConfigError(f"{name.upper()}={value!r} is not an integer") from None
        else:
            kwargs[name] = value
    cfg = Config(**kwargs)  # type: ignore[arg-type]
    for port_name in ("port", "dashboard_port"):
        if not 0 < getattr(cfg, port_name) < 65536:
            raise ConfigError(f"{port_name.upper()}={getattr(cfg, port_name)} is not a TCP port")
    if not Path(cfg.work_dir).is_absolute():  # empty made /server, /venv, /flashinfer-cache out of every path
        raise ConfigError(f"WORK_DIR={cfg.work_dir!r} must be an absolute path (e.g. ~/llmhost)")
    return cfg


def redacted(cfg: Config) -> dict[str, object]:
    """Config as a dict safe for logs and results (no secret values; API_KEY_FILE is a path, kept)."""
    out = dataclasses.asdict(cfg)
    out["api_key_set"] = bool(cfg.api_key_file)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--env0", action="store_true", help="print KEY=value records separated by NUL (for lib.sh)")
    mode.add_argument("--print", action="store_true", help="print the effective configuration (default)")
    args = parser.parse_args(argv)
    try:
        values = load_values()
        load()  # validate types too
    except (ConfigError, OSError) as exc:
        print(f"config: {exc}", file=sys.stderr)
        return 1
    if args.env0:
        sys.stdout.write("".join(f"{k}={v}\0" for k, v in values.items()))
    else:
        width = max(map(len, values))
        for key, value in values.items():
            print(f"{key:<{width}} = {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
