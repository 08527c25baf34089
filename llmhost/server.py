"""The SGLang server's lifecycle: launch spec, HTTP probes, port ownership, readiness.

Stdlib only, so serve.sh can run it with the host's python3 before any venv exists.

    python3 -m llmhost.server print-command       # the launch command start would run (no side effects)
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from llmhost.config import Config


# ---------------------------------------------------------------- HTTP probes (stdlib, no client SDK)
def base_url(target: Config | str) -> str:
    """http://host:port of a Config (0.0.0.0 -> 127.0.0.1) or a URL given as is."""
    return target.base_url if isinstance(target, Config) else str(target).rstrip("/")


def _request(
    target: Config | str, path: str, method: str, body: bytes | None, timeout: float, api_key: str | None
) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(base_url(target) + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:  # refused, reset, timeout: no HTTP answer at all
        reason = getattr(exc, "reason", exc)
        return 0, f"{type(reason).__name__}: {reason}"


def http_get(
    target: Config | str, path: str, timeout: float = 5.0, api_key: str | None = None
) -> tuple[int, str]:
    """GET path -> (HTTP status, body text). Status 0 means no HTTP answer; the body then says why."""
    return _request(target, path, "GET", None, timeout, api_key)


def http_post(
    target: Config | str, path: str, payload: object = None, timeout: float = 30.0, api_key: str | None = None
) -> tuple[int, str]:
    """POST a JSON payload (or nothing) -> (HTTP status, body text); status 0 = no HTTP answer."""
    body = b"" if payload is None else json.dumps(payload).encode()
    return _request(target, path, "POST", body, timeout, api_key)


def flush_cache(
    target: Config | str, api_key: str | None = None, wait_s: float = 30.0, timeout: float = 10.0
) -> bool:
    """Empty SGLang's prefix (radix) cache; True once flushed.

    SGLang 0.5.17 answers 400 "Flush cache failed." while any request is running or queued, so this retries
    every 0.5 s for up to wait_s (in-flight requests of a previous benchmark point drain first).
    """
    deadline = time.monotonic() + wait_s
    while True:
        status, _ = http_post(target, "/flush_cache", None, timeout, api_key)
        if status == 200:
            return True
        if status not in (400, 0) or time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
