"""SGLang's plain HTTP endpoints through one small client: health, health_generate, metrics, flush_cache,
freeze_gc, server_info, model_info (model calls go through the `openai` SDK instead: llmhost/client.py).

`requests` does the work where it is installed; the host's python3 runs serve.sh before any venv exists, so the
same client falls back to urllib there. Failures are data: a Reply with status 0 and the reason, never a raise.

    client = ServerClient.for_config(cfg)       # cfg.base_url (the one base-URL builder: llmhost.config) + API key
    client.health().ok, client.metrics().text, client.flush_cache(wait_s=120)
Nothing is written.
"""
from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from typing import Any, Literal

from llmhost.config import Config


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer: status 0 = none at all (refused, reset, timeout), and `text` then says why."""

    status: int
    text: str

    @property
    def ok(self) -> bool:
        return self.status == 200

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.text)

    def describe(self) -> str:
        """'503' or the reason no answer came, for one-line messages."""
        return str(self.status) if self.status else self.text


@dataclasses.dataclass(frozen=True, slots=True)
class Flush:
    """How a prefix-cache flush ended: `state` flushed, busy (HTTP 400: requests ran), down (connection refused)
    or failed (another answer, or none); `detail` is the one-line reason ('' once flushed)."""

    state: Literal["flushed", "busy", "down", "failed"]
    detail: str

    def __bool__(self) -> bool:
        return self.state == "flushed"


class ServerClient:
    """GET/POST against one server. Proxies from the environment are ignored: the server is on this host or at
    the near end of the SSH tunnel, and a corporate HTTP_PROXY must not route loopback traffic away."""

    __slots__ = ("base_url", "api_key", "_session")

    def __init__(self, base_url: str, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._session: Any = None

    @classmethod
    def for_config(cls, cfg: Config, api_key: str | None = None) -> "ServerClient":
        return cls(cfg.base_url, api_key)

    # ---- the endpoints
    def health(self, timeout: float = 5.0) -> Reply:
        return self.get("/health", timeout)

    def health_generate(self, timeout: float = 30.0) -> Reply:
        """200 only after a real generation succeeded; SGLang 0.5.17 waits a whole second before it looks."""
        return self.get("/health_generate", timeout)

    def generate_token(self, timeout: float = 30.0) -> Reply:
        """200 once the server generated one token for a one-token prompt: readiness without /health_generate's
        second. Like SGLang's own health check, kept out of its metrics (log_metrics); needs the API key, if any."""
        return self.post("/generate", {"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                                       "log_metrics": False}, timeout)

    def metrics(self, timeout: float = 5.0) -> Reply:
        return self.get("/metrics", timeout)

    def server_info(self, timeout: float = 10.0) -> Reply:
        """SGLang's /server_info; where that is 404, /get_server_info (SGLang releases before /server_info). Behind
        sglang-router 0.3.2 that is the router's own counts, not a server's arguments: ask a worker
        (router.info_url)."""
        reply = self.get("/server_info", timeout)
        return self.get("/get_server_info", timeout) if reply.status == 404 else reply

    def model_info(self, timeout: float = 10.0) -> Reply:
        return self.get("/model_info", timeout)

    def freeze_gc(self, timeout: float = 30.0) -> Reply:
        """gc.freeze() in the server's processes (SGLang 0.5.17: POST /freeze_gc, 200 'Garbage collection frozen.')."""
        return self.post("/freeze_gc", None, timeout)

    def flush_cache(self, wait_s: float = 30.0, timeout: float = 10.0) -> "Flush":
        """Empty SGLang's prefix (radix) cache; the Flush says flushed, busy, down or failed (truthy once flushed).

        SGLang 0.5.17 answers 400 "Flush cache failed." while any request is running or queued, so a busy server
        is asked again every 0.5 s for up to wait_s (in-flight requests of a previous point drain first). A refused
        connection is a server that is not there: no amount of waiting helps, so it is answered at once.
        """
        deadline = time.monotonic() + wait_s
        while True:
            reply = self.post("/flush_cache", None, timeout)
            if reply.ok:
                return Flush("flushed", "")
            if reply.status == 0 and "Refused" in reply.text:
                return Flush("down", f"server down ({reply.text})")
            if reply.status not in (400, 0):
                return Flush("failed", f"HTTP {reply.status}: {reply.text[:120]}")
            if time.monotonic() >= deadline:
                busy = f"HTTP 400 for {wait_s:.0f} s (requests still running)" if reply.status else reply.text
                return Flush("busy" if reply.status else "failed", f"server busy: {busy}" if reply.status
                             else f"no answer for {wait_s:.0f} s ({busy})")
            time.sleep(0.5)

    # ---- the transport
    def get(self, path: str, timeout: float = 5.0) -> Reply:
        return self._send("GET", path, None, timeout)

    def post(self, path: str, payload: object = None, timeout: float = 30.0) -> Reply:
        return self._send("POST", path, b"" if payload is None else json.dumps(payload).encode(), timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _send(self, method: str, path: str, body: bytes | None, timeout: float) -> Reply:
        try:
            import requests
        except ImportError:
            return self._send_urllib(method, path, body, timeout)
        if self._session is None:
            self._session = requests.Session()
            self._session.trust_env = False
        try:
            resp = self._session.request(method, self.base_url + path, data=body, headers=self._headers(body),
                                         timeout=timeout)
        except requests.RequestException as exc:
            return Reply(0, _reason(exc))
        return Reply(resp.status_code, resp.content.decode("utf-8", "replace"))

    def _send_urllib(self, method: str, path: str, body: bytes | None, timeout: float) -> Reply:
        req = urllib.request.Request(self.base_url + path, data=body, headers=self._headers(body), method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as resp:
                return Reply(resp.status, resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError) as exc:
            return Reply(0, _reason(getattr(exc, "reason", exc)))


def _reason(exc: BaseException) -> str:
    """'ConnectionRefusedError: ...' cut to one line: requests nests the cause several levels deep."""
    while exc.__context__ is not None and not isinstance(exc, (ConnectionError, TimeoutError)):
        exc = exc.__context__
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:200]}"
