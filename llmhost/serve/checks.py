"""Serve-side checks, before any work: settings that cannot work (one line naming the setting and where it came
from), and what a launch needs from the host (model files, SGLang's Python, a free port, GPU room).

Loading and type checks are llmhost.config's; these are the values only the server lifecycle can judge.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from llmhost import config
from llmhost.config import Config
from llmhost.serve import gpu
from llmhost.serve.console import ServeError
from llmhost.serve.procfs import port_holder
from llmhost.serve.spec import gpu_room_problem

# SGLang 0.5.17's --load-format choices (sglang/srt/server_args.py LOAD_FORMAT_CHOICES): an unknown one is
# refused here instead of by launch_server a minute into the start.
LOAD_FORMATS = ("auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf",
                "bitsandbytes", "mistral", "layered", "flash_rl", "remote", "remote_instance", "fastsafetensors",
                "private", "runai_streamer")
_HOST = re.compile(r"[A-Za-z0-9._%:-]+")  # a name, IPv4 or IPv6 literal (with a %zone); no spaces, no scheme


def origin(name: str, env: Mapping[str, str] | None = None) -> str:
    """Where a setting's value came from: "environment", or "<file>:<line>" of the line that set it last (a file
    in the checkout by its name, another by its path)."""
    env = os.environ if env is None else env
    if name in env:
        return "environment"
    local = env.get("LLMHOST_CONFIG") or (str(config.LOCAL_FILE) if config.LOCAL_FILE.exists() else "")
    for path in map(Path, filter(None, (local, str(config.DEFAULT_FILE)))):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        numbers = [n for n, line in enumerate(lines, 1) if line.strip().startswith(f"{name}=")]
        if numbers:
            label = path.name if path.resolve().parent == config.REPO_ROOT else str(path)
            return f"{label}:{numbers[-1]}"
    return "config.env"


def _refuse(name: str, value: object, why: str, env: Mapping[str, str] | None) -> ServeError:
    """'<source>: KEY=value why': bare values, quoted when empty or spaced."""
    text = str(value)
    shown = text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)
    return ServeError(f"{origin(name, env)}: {name}={shown} {why}")


def check_settings(cfg: Config, env: Mapping[str, str] | None = None) -> None:
    """Every serve setting a command could trip over later, refused now in one line (ServeError)."""
    if not _HOST.fullmatch(cfg.host):
        raise _refuse("HOST", cfg.host, "is not a host name or IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)", env)
    if not cfg.tmux_session or any(c in cfg.tmux_session for c in ":."):
        raise _refuse("TMUX_SESSION", cfg.tmux_session, "must be a name without ':' or '.' (tmux would rewrite it)",
                      env)
    if cfg.ready_timeout_s <= 0:
        raise _refuse("READY_TIMEOUT_S", cfg.ready_timeout_s, "must be > 0 seconds (default 900)", env)
    if cfg.load_format not in LOAD_FORMATS:
        raise _refuse("LOAD_FORMAT", cfg.load_format,
                      f"is not one of SGLang's load formats ({', '.join(LOAD_FORMATS)})", env)
    if os.path.exists(cfg.work_dir) and not os.path.isdir(cfg.work_dir):
        raise _refuse("WORK_DIR", cfg.work_dir, "is a file, not a directory", env)
    if cfg.api_key_file:
        _check_key_file(cfg.api_key_file, env)


def _check_key_file(path: str, env: Mapping[str, str] | None) -> None:
    """Refuse a key others can read, the way ssh refuses a loose private key."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise _refuse("API_KEY_FILE", path, f"cannot be read ({exc.strerror}) — fix the path, or set "
                      "API_KEY_FILE= for no key", env) from None
    if mode & 0o077:
        raise _refuse("API_KEY_FILE", path, f"may be read by other users (mode {mode:04o}) — run chmod 600 {path}",
                      env)


def check_launch(cfg: Config) -> None:
    """What a start needs from the host, checked before anything is launched (ServeError)."""
    if not (Path(cfg.model_dir) / "config.json").is_file():
        raise ServeError(f"MODEL_DIR={cfg.model_dir} has no config.json — run ./setup_host.sh or set MODEL_DIR")
    if not shutil.which(cfg.sglang_python):
        raise ServeError(f"SGLANG_PYTHON={cfg.sglang_python} is not an executable — run ./setup_host.sh or set it")
    try:
        key = cfg.api_key()
    except OSError as exc:
        raise ServeError(str(exc)) from None
    if cfg.api_key_file and not key:
        raise ServeError(f"API_KEY_FILE={cfg.api_key_file} is empty — put the key on its first line")
    holder = port_holder(cfg.host, cfg.port)
    if holder:
        raise ServeError(f"port {cfg.port} is held by {holder} — stop it (./serve.sh stop if it is ours) "
                         "or set PORT=<free port>")
    room = gpu_room_problem(gpu.free_total_mib()) if cfg.mem_fraction_static == "auto" else None
    if room:
        raise ServeError(room)
