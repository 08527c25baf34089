"""Stand-in for `python -m sglang_router.launch_router` (sglang-router 0.3.2), for CPU tests: same options, routes
and worker handling, without Rust.

    PYTHONPATH=tests/standin python -m sglang_router.launch_router --host 127.0.0.1 --port 30000 \
        --worker-urls http://127.0.0.1:30001 http://127.0.0.1:30002 --policy cache_aware [--api-key K]

Accepts exactly the options of its captured --help (tests/captures/router_launch_help.txt: the 0.3.2 wheel's
RouterArgs.add_cli_args printed by argparse, without the usage examples; unknown -> exit 2) and
exports `parse_router_args` and `launch_router` as the real module does. As the real router:
  - binds --host/--port at once and adds workers as they pass a health check (--health-check-endpoint, every
    --worker-startup-check-interval s until healthy, then every --health-check-interval-secs);
  - routes: /liveness /readiness /health /health_generate /v1/models /get_model_info /get_server_info /workers (open),
    /v1/chat/completions /v1/completions /generate /flush_cache /get_loads (with --api-key: `Authorization: Bearer
    <key>`, else 401), the route names as in the wheel's route table; a request goes to one healthy worker (503 when
    there is none), streamed back as it comes, with the router's --api-key as the worker's bearer token;
    /flush_cache goes to every worker (206, partial_success, when one refuses: documented, not captured).
    Answered by the router itself, as captured on the H200 (tests/captures/router_routes.txt): /health_generate
    (200 once any worker is healthy: no generation),
    /get_server_info (its own counts, not a worker's server info), /v1/models (the served names it read from each
    worker's /server_info when the worker joined), /readiness, /workers, /get_loads; /server_info, /model_info and
    /metrics are 404 on its port;
  - Prometheus text on --prometheus-host:--prometheus-port /metrics (default 0.0.0.0:29000), smg_* names as in the
    wheel (label sets simplified).
Policies: cache_aware sends equal prompt prefixes to the same worker; round_robin, random, power_of_two (fewer
requests in flight of two random picks). Logs "Starting router on HOST:PORT" and "Router ready | workers: N".
"""
from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import random
import secrets
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang._standin.args import CAPTURES, build_parser

try:  # as the real launch_router's import of its mini load balancer does (sglang_router/mini_lb.py, 0.3.2)
    from sglang.srt.tracing.trace import trace_req_start  # noqa: F401
except ImportError:  # SGLang 0.5.17 has no such module: the real one runs untraced too
    pass

OPEN_ROUTES = ("/liveness", "/readiness", "/health", "/health_generate", "/v1/models", "/get_model_info",
               "/get_server_info", "/workers")
KEYED_ROUTES = ("/v1/chat/completions", "/v1/completions", "/generate", "/flush_cache", "/get_loads")


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} INFO smg: {msg}", flush=True)


def parse_router_args(argv: list[str]):
    text = (CAPTURES / "router_launch_help.txt").read_text()
    return build_parser(text, prog="launch_router.py").parse_args(argv)


class Pool:
    """The workers, their health and the requests each has in flight; `pick` applies the policy."""

    def __init__(self, args):
        self.args, self.lock = args, threading.Lock()
        self.urls = [u.rstrip("/") for u in args.worker_urls or []]
        self.healthy: set[str] = set()
        self.in_flight = {u: 0 for u in self.urls}
        self.turn = itertools.count()
        self.requests = 0
        self.joined: dict[str, dict] = {}  # worker URL -> the /server_info it answered when it first passed a check

    def check(self, url: str) -> bool:
        endpoint = self.args.health_check_endpoint or "/health"
        status, _, _ = forward_once(url, "GET", endpoint, b"", None, float(self.args.health_check_timeout_secs or 5))
        return status == 200

    def watch(self) -> None:
        startup = float(self.args.worker_startup_check_interval or 30)
        interval = float(self.args.health_check_interval_secs or 60)
        while True:
            for url in self.urls:
                ok = self.check(url)
                # as the real router: a worker joins once, with the metadata its /server_info gave then
                info = worker_info(url, self.args.api_key) if ok and url not in self.joined else None
                with self.lock:
                    was = url in self.healthy
                    (self.healthy.add if ok else self.healthy.discard)(url)
                    if info is not None:
                        self.joined[url] = info
                if ok and not was:
                    log(f"Worker {url} is healthy; Router ready | workers: {len(self.healthy)}")
            time.sleep(startup if len(self.healthy) < len(self.urls) else interval)

    def pick(self, body: bytes) -> str | None:
        with self.lock:
            ready = [u for u in self.urls if u in self.healthy]
            if not ready:
                return None
            policy = self.args.policy or "cache_aware"
            if policy == "cache_aware":
                return ready[int(hashlib.sha256(body[:512]).hexdigest(), 16) % len(ready)]
            if policy == "random":
                return random.choice(ready)
            if policy == "power_of_two":
                return min(random.sample(ready, min(2, len(ready))), key=self.in_flight.__getitem__)
            return ready[next(self.turn) % len(ready)]


def worker_info(url: str, key: str | None) -> dict:
    """What the real router keeps of a worker when it joins: fields of its /server_info and /model_info, as text."""
    def get(path: str) -> dict:
        status, _, body = forward_once(url, "GET", path, b"", key, 10)
        try:
            return json.loads(body) if status == 200 else {}
        except ValueError:
            return {}
    info, model = get("/server_info"), get("/model_info")
    kept = {k: info.get(k) for k in ("served_model_name", "model_path", "tp_size", "dp_size", "disaggregation_mode",
                                     "load_balance_method")}
    kept.update(model_type=model.get("model_type"), architectures=json.dumps(model.get("architectures")))
    return {k: str(v) for k, v in kept.items()}


def forward_once(url: str, method: str, path: str, body: bytes, key: str | None, timeout: float):
    """(status, content type, body) of one request to a worker; status 0 when it did not answer."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        conn.request(method, path, body=body or None, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type"), reply.read()
    except OSError:
        return 0, None, b""
    finally:
        conn.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    pool: Pool

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    def reply(self, status: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    def route(self) -> None:
        path = self.path.split("?")[0]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.pool.args.api_key
        if path not in OPEN_ROUTES + KEYED_ROUTES:
            return self.reply(404, b"", None)
        if path in KEYED_ROUTES and key and not self.authorized(key):
            return self.reply(401, b'{"error":"Unauthorized"}')
        with self.pool.lock:
            self.pool.requests += 1
            healthy = len(self.pool.healthy)
            joined = dict(self.pool.joined)
            loads = [(u, self.pool.in_flight[u]) for u in self.pool.urls if u in joined]
        text = "text/plain; charset=utf-8"
        if path in ("/liveness", "/health"):
            return self.reply(200, b"OK", text)
        if path == "/health_generate":  # the real router's own answer: it does not generate
            return self.reply(200, b"At least one router has healthy workers", text) if healthy else \
                self.reply(503, b"No routers with healthy workers available", text)
        if path == "/get_server_info":
            return self.reply(200, json.dumps({"router_manager": True, "routers_count": 1,
                                               "workers_count": len(joined)}, separators=(",", ":")).encode(), text)
        if path == "/v1/models":
            names = list(dict.fromkeys(i["served_model_name"] for i in joined.values()))
            if not names:
                return self.reply(503, b"No models available", text)
            data = [{"id": n, "object": "model", "owned_by": "local"} for n in names]
            return self.reply(200, json.dumps({"object": "list", "data": data}, separators=(",", ":")).encode(), text)
        if path == "/readiness":
            body = {"status": "ready", "healthy_workers": healthy, "total_workers": len(joined)} if healthy else \
                {"status": "not ready", "reason": "insufficient healthy workers"}
            return self.reply(200 if healthy else 503, json.dumps(body, separators=(",", ":")).encode())
        if path == "/workers":
            listed = [{"id": str(uuid.uuid5(uuid.NAMESPACE_URL, u)), "url": u,
                       "model_id": joined[u]["served_model_name"], "priority": 50, "cost": 1.0, "worker_type": "regular", "is_healthy": u in self.pool.healthy,
                       "load": n, "connection_mode": "HTTP", "metadata": joined[u], "disable_health_check": False}
                      for u, n in loads]
            return self.reply(200, json.dumps({"workers": listed, "total": len(listed), "stats": {
                "prefill_count": 0, "decode_count": 0, "regular_count": len(listed)}}).encode())
        if path == "/get_loads":
            return self.reply(200, json.dumps({"workers": [{"worker": u, "load": n} for u, n in loads]}).encode())
        if path == "/flush_cache":  # to every worker that joined; a refusal makes it a partial success (206, as
            # the gateway's API reference documents it: not captured, the workers were idle then)
            codes = {u: forward_once(u, "POST", path, b"", key, 30)[0] for u in joined}
            done = [u for u, c in codes.items() if c == 200]
            n = len(codes)
            body = {"status": "success" if len(done) == n else "partial_success",
                    "message": f"Successfully flushed cache on all {n} HTTP workers" if len(done) == n else
                    f"Cache flush: {len(done)} succeeded, {n - len(done)} failed", "workers_flushed": len(done),
                    "total_http_workers": n, "total_workers": n}
            if len(done) < n:
                body.update(successful=done, failed=[{"worker": u, "error": f"HTTP {c}"} for u, c in codes.items()
                                                     if c != 200])
            return self.reply(200 if len(done) == n else 206, json.dumps(body).encode())
        self.forward(path, body)

    def authorized(self, key: str) -> bool:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, key)

    def forward(self, path: str, body: bytes) -> None:
        url = self.pool.pick(body)
        if url is None:
            return self.reply(503, b'{"error":"No available workers"}')
        parsed = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port,
                                          timeout=float(self.pool.args.request_timeout_secs or 1800))
        key = self.pool.args.api_key
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        with self.pool.lock:
            self.pool.in_flight[url] += 1
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            upstream = conn.getresponse()
            self.send_response(upstream.status)
            self.send_header("Content-Type", upstream.getheader("Content-Type") or "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := upstream.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            conn.close()
            with self.pool.lock:
                self.pool.in_flight[url] -= 1


def metrics_server(pool: Pool) -> ThreadingHTTPServer:
    class Metrics(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:
            with pool.lock:
                text = (f"# TYPE smg_worker_pool_size gauge\nsmg_worker_pool_size {len(pool.healthy)}\n"
                        f"# TYPE smg_http_requests_total counter\nsmg_http_requests_total {pool.requests}\n")
            body = text.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    host = pool.args.prometheus_host or "0.0.0.0"
    return ThreadingHTTPServer((host, int(pool.args.prometheus_port or 29000)), Metrics)


def launch_router(args) -> None:
    pool = Pool(args)
    host, port = args.host or "0.0.0.0", int(args.port or 30000)
    handler = type("RouterHandler", (Handler,), {"pool": pool})
    server = type("RouterServer", (ThreadingHTTPServer,), {"request_queue_size": 2048})((host, port), handler)
    server.daemon_threads = True
    metrics = metrics_server(pool)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    threading.Thread(target=pool.watch, daemon=True).start()
    log(f"Starting router on {host}:{port} | mode: Regular | policy: {args.policy or 'cache_aware'} | "
        f"workers: {len(pool.urls)}")
    server.serve_forever()


def main() -> None:
    launch_router(parse_router_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
