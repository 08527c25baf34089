"""Where the model API is and how to reach it: base URL, served model name, API key, an `openai` client.

Used by smoke_test.py on the GPU host or on a laptop through the SSH tunnel, so this module needs only the `openai`
SDK (imported lazily) and the stdlib; llmhost.config (stdlib) supplies the defaults from config.env.
Precedence: command-line flag > environment (OPENAI_API_KEY for the key) > config.env (PORT, SERVED_MODEL_NAME,
API_KEY_FILE). The key is held in memory only: never printed, logged or written to results.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

NO_KEY = "EMPTY"  # the SDK insists on some key; SGLang ignores it when started without --api-key


class ClientError(Exception):
    """A setup problem with a one-line message for the user (what failed + what to do next)."""


@dataclass(frozen=True)  # no slots=True: laptops may run Python 3.9
class Endpoint:
    base_url: str  # ends in /v1
    model: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        parsed = urlparse(self.base_url)
        return parsed.port or (443 if parsed.scheme == "https" else 80)

    def public(self) -> dict[str, object]:
        """Safe to print or store: the key is reduced to whether one is set."""
        return {"base_url": self.base_url, "model": self.model, "api_key_set": self.api_key is not None}


def tunnel_hint(port: int) -> str:
    return f"ssh -N -L {port}:127.0.0.1:{port} user@gpu-host"


def read_key_file(path: str) -> str | None:
    """The key in the --api-key-file file; a file others may read is refused (llmhost.config.read_secret)."""
    from llmhost import config

    try:
        return config.read_secret(path, f"--api-key-file {path}", "check the path")
    except OSError as exc:
        raise ClientError(str(exc)) from None


def resolve(base_url: str | None, model: str | None, api_key_file: str | None,
            env: dict[str, str] | None = None) -> Endpoint:
    """The endpoint from flags, the environment and config.env (loaded only for what flags leave open)."""
    env = dict(os.environ if env is None else env)
    cfg = None
    if base_url is None or model is None or (api_key_file is None and not env.get("OPENAI_API_KEY")):
        from llmhost import config
        try:
            cfg = config.load(env)
        except config.ConfigError as exc:
            raise ClientError(f"{exc} — fix it, or pass --base-url/--model/--api-key-file") from None
    if base_url is None:
        base_url = cfg.base_url + "/v1"  # the one base-URL builder (HOST and PORT, IPv6 in brackets)
    base_url = base_url.rstrip("/")
    if not base_url.endswith("/v1"):
        base_url += "/v1"
    if api_key_file is not None:
        key = read_key_file(api_key_file)
    elif env.get("OPENAI_API_KEY"):
        key = env["OPENAI_API_KEY"]
    else:
        try:
            key = cfg.api_key()
        except OSError as exc:
            raise ClientError(f"{exc} (or pass --api-key-file)") from None
    return Endpoint(base_url, model if model is not None else cfg.served_model_name, key)


def make_client(ep: Endpoint, timeout_s: float = 120.0) -> Any:
    """An openai.OpenAI for the endpoint; no retries, so a missing server or bad key shows at once."""
    import openai

    return openai.OpenAI(base_url=ep.base_url, api_key=ep.api_key or NO_KEY, timeout=timeout_s, max_retries=0)


def describe_error(exc: BaseException, ep: Endpoint) -> str:
    """One line saying what went wrong talking to the server and what to try next."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return f"no answer from {ep.base_url} in time — is the server still starting? (./serve.sh status)"
    if isinstance(exc, openai.APIConnectionError):
        return (f"cannot connect to {ep.base_url} — start the server (./serve.sh start) or open the tunnel: "
                f"{tunnel_hint(ep.port)}")
    if isinstance(exc, openai.AuthenticationError):
        which = "was rejected" if ep.api_key else "is required"
        return (f"the server answered 401: an API key {which} — pass --api-key-file FILE or set OPENAI_API_KEY "
                "(the key in API_KEY_FILE on the server)")
    if isinstance(exc, openai.APIStatusError):  # a web server's HTML error page is many lines: join them
        return f"the server answered {exc.status_code}: {' '.join(str(exc.message).split())[:200]}"
    return " ".join(f"{type(exc).__name__}: {exc}".split())


ROUTER_INFO_KEY = "router_manager"  # sglang-router 0.3.2's /get_server_info: {"router_manager": true, counts}


def load_format(client: Any, ep: Endpoint) -> tuple[str | None, str]:
    """(the server's --load-format from SGLang's /server_info, "dummy" = random weights; or None, and why not)."""
    root = ep.base_url[: -len("/v1")]
    why = "/server_info unreadable"
    for path in ("/server_info", "/get_server_info"):  # the second: SGLang releases before /server_info
        try:
            info = client.get(root + path, cast_to=object)
        except Exception:  # noqa: BLE001 - not SGLang, or an older one: the caller says what it assumed
            continue
        if isinstance(info, str):  # the router's answer is JSON sent as text/plain, which the SDK leaves as text
            try:
                info = json.loads(info)
            except ValueError:
                continue
        if isinstance(info, dict) and isinstance(info.get("load_format"), str):
            return info["load_format"], path
        if isinstance(info, dict) and info.get(ROUTER_INFO_KEY):
            why = "SGLang's router answers, and it does not pass a server's /server_info on"
    return None, why


def preflight(client: Any, ep: Endpoint) -> tuple[list[str], str | None]:
    """(model ids served, None) or ([], one-line error): GET /v1/models through the SDK."""
    try:
        return [m.id for m in client.models.list()], None
    except Exception as exc:  # noqa: BLE001 - any failure here is reported, not raised
        return [], describe_error(exc, ep)
