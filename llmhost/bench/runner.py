"""Running a benchmark plan: arm by arm on a freshly restarted server, point by point with SGLang's load generator.

run_bench.py builds the plan and the run directory; this module executes it: a server restart per arm with the
arm's flags as data (llmhost.serve.lifecycle), an untimed warm pass (full runs), the tool-call check, then each
point after a verified prefix-cache flush, retried once (after a restart when the server died). Progress lines carry an ETA that learns from reality.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

from llmhost.bench import arms as arms_mod
from llmhost import config
from llmhost.bench import points, salvage, store, telemetry, toolcalls
from llmhost.bench.records import PointRecord, PointSummary, ServerRecord, ToolCallCase, ToolCallSkipped
from llmhost.provenance import redact_secrets, utc_now
from llmhost.serve import lifecycle, serverlog
from llmhost.serve.console import Console, ServeError, ServerBusy
from llmhost.serve.endpoints import ServerClient
from llmhost.bench.workloads import REGISTRY as WORKLOADS

RESTART_EST_S = 130.0  # measured on an H200 (SGLang 0.5.17, warm kernel caches): 102-162 s to ready; ~7 min cold
WARM_ARM_EST_S = 15.0  # the untimed warm pass of a full run: load-generator start + 16 short requests


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def arm_overhead_s(quick: bool) -> float:
    """Per-arm time outside the points: the restart, plus the warm pass of a full run."""
    return RESTART_EST_S + (0.0 if quick else WARM_ARM_EST_S)


class BenchError(Exception):
    """A problem that stops the run; the message is one line naming it and the next step."""


class UserStopped(Exception):
    """./serve.sh stop ran during the run: the run ends and never restarts the server; str() = when (UTC)."""


@dataclasses.dataclass(slots=True)
class Bench:
    """What every step of a run needs (mutable run state: progress counters, the point telemetry is tagged with)."""

    cfg: config.Config
    store: store.RunStore
    module: str
    seed: int
    env: dict[str, str]
    sampler: telemetry.Sampler
    total: int
    done: int = 0
    est_left_s: float = 0.0
    est_spent_s: float = 0.0
    only_missing: bool = False  # --resume --only-missing: a point that failed its retry is not tried again
    started_at: float = dataclasses.field(default_factory=time.time)  # a ./serve.sh stop after this is the user's
    t0: float = dataclasses.field(default_factory=time.monotonic)

    def eta(self) -> str:
        """Remaining estimate, scaled by how the estimates compared with reality so far."""
        factor = (time.monotonic() - self.t0) / self.est_spent_s if self.est_spent_s > 30 else 1.0
        return fmt_s(self.est_left_s * min(max(factor, 0.3), 5.0))

    def progress(self, text: str) -> None:
        print(f"[bench {self.done}/{self.total}] {text}  ETA {self.eta()}", flush=True)

    def spend(self, estimate_s: float) -> None:
        self.est_left_s -= estimate_s
        self.est_spent_s += estimate_s


# --- the environment ---------------------------------------------------------------------------------------------

def interrupt_on_sigterm() -> None:
    """Treat SIGTERM (kill, timeout(1)) like Ctrl-C, so the running point's load generator, which lives in its
    own session, is stopped too instead of loading the server on its own after run_bench.py is gone."""
    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


def loadgen_env(cfg: config.Config) -> dict[str, str]:
    """Load-generator environment: bench_serving reads the API key from OPENAI_API_KEY, never from its argv."""
    env = dict(os.environ)
    key = cfg.api_key()
    if key:
        env["OPENAI_API_KEY"] = key
    return env


# --- one arm: a fresh server -------------------------------------------------------------------------------------

def restart_server(b: Bench, arm: arms_mod.Arm) -> str:
    """A fresh server with this arm's one difference, its flags passed as data; record servers/<arm>.json.
    Returns '' or a one-line error. Its progress goes to raw/serve-<arm>.log."""
    flags, settings = arms_mod.server_overrides(arm)
    started = time.time()
    try:
        with open(b.store.raw_dir() / f"serve-{arm.name}.log", "a") as log:
            ready = lifecycle.restart(b.cfg, extra_args=flags, settings=settings, console=Console(log, log),
                                      unless_stopped_since=b.started_at)
    except lifecycle.StoppedByUser as exc:
        raise UserStopped(exc.when) from None
    except ServerBusy as exc:  # waited lifecycle.BUSY_WAIT_S for another start/stop/restart
        return f"server busy, arm {arm.name} not started: {exc}"
    except ServeError as exc:
        check_user_stop(b)  # a stop while it was starting: the user's word, not a failed start
        return f"server restart failed for arm {arm.name}: {exc}"
    reply = server_client(b.cfg).server_info()
    try:
        info = reply.json() if reply.ok else {"error": f"HTTP {reply.describe()}: {reply.text[:200]}"}
    except ValueError:
        info = {"error": "not JSON"}
    b.store.write_server(ServerRecord(
        arm=arm.name, launch_command=ready.launch_command or None, server_info=redact_secrets(info),
        ready_s=time.time() - started, started_at=ready.started_at or utc_now(started)))
    return ""


def server_client(cfg: config.Config) -> ServerClient:
    return ServerClient.for_config(cfg, cfg.api_key())


def server_alive(cfg: config.Config) -> bool:
    return server_client(cfg).health(timeout=10).ok


def warm_arm(b: Bench, arm: arms_mod.Arm) -> None:
    """A small untimed pass (first-request and kernel warm-up); a failure is a warning, never fatal."""
    probe = points.make_point(arm.name, "chat", "concurrency", 8, None, 16, 0)
    raw = b.store.raw_dir()
    argv = points.bench_argv(probe, WORKLOADS["chat"], base_url=b.cfg.base_url, model_dir=b.cfg.model_dir,
                             served_model_name=b.cfg.served_model_name, seed=b.seed,
                             output_file=raw / f"warm-{arm.name}.jsonl", measured=False)
    code, error = points.run_loadgen(b.cfg.sglang_python, b.module, argv, starts_file=raw / f"warm-{arm.name}.starts",
                                     log_file=raw / f"warm-{arm.name}.log", env=b.env, limit_s=300)
    store.redact_jsonl(raw / f"warm-{arm.name}.jsonl")
    if code:
        print(f"[bench] warning: warm pass of arm {arm.name} failed ({error}) — continuing", flush=True)


def check_tools(b: Bench, arm: arms_mod.Arm) -> None:
    """Tool-call quality of this arm (skipped with a reason on dummy weights)."""
    from llmhost.client import Endpoint, make_client

    endpoint = Endpoint(b.cfg.base_url + "/v1", b.cfg.served_model_name, b.cfg.api_key())
    rows = toolcalls.check(arm.name, make_client(endpoint, timeout_s=120), b.cfg.served_model_name, b.cfg.load_format)
    b.store.append_toolcalls(rows)
    scored = [r for r in rows if isinstance(r, ToolCallCase)]
    skipped = "; ".join(r.skipped for r in rows if isinstance(r, ToolCallSkipped))
    print(f"[bench] tool calls, arm {arm.name}: "
          + (f"{sum(r.ok for r in scored)}/{len(scored)} right" if scored else skipped), flush=True)


# --- one point: flush, (warm), measure, parse ----------------------------------------------------------------------

def attempt_point(b: Bench, point: points.Point, attempt: int) -> PointRecord:
    """Run one attempt of a point; returns its points.jsonl record (failures are data, named with the server
    log's cause when it has one)."""
    b.sampler.point_id = point.point_id
    started = time.time()
    stem = b.store.raw_dir() / f"{point.point_id}.a{attempt}.{int(started)}"  # unique: an orphan may still write
    log_offset = serverlog.size(b.cfg.state_dir / "server.log")
    flush = server_client(b.cfg).flush_cache(wait_s=120)  # 200 only once SGLang emptied the tree
    error = "" if flush else f"prefix cache flush failed: {flush.detail}"
    summary, rel = None, ""
    if flush and point.pattern == "warm":
        error = warm_pass(b, point, stem)
    if flush and not error:
        summary, rel, error = measure(b, point, stem, started)
    if error:
        cause = serverlog.error_cause(b.cfg.state_dir / "server.log", log_offset)
        error = f"{error} — server log: {cause}"[:400] if cause else error
    record = PointRecord.of(point, attempt=attempt, status="failed" if error else "ok", error=error or None,
                            started_at=started, ended_at=time.time(),
                            cache_flushed=bool(flush) and point.pattern != "warm", summary=summary,
                            requests_file=rel or f"requests/{point.point_id}.jsonl")
    b.sampler.point_id = None
    return record


def loadgen_kwargs(b: Bench) -> dict[str, object]:
    return dict(base_url=b.cfg.base_url, model_dir=b.cfg.model_dir, served_model_name=b.cfg.served_model_name,
                seed=b.seed)


def warm_pass(b: Bench, point: points.Point, stem: Path) -> str:
    """The untimed pass of a warm point over the very prompts it measures; '' or the error (measuring after a
    failed warm pass would publish cold as warm)."""
    argv = points.bench_argv(point, WORKLOADS[point.workload], output_file=Path(f"{stem}.warm.jsonl"),
                             measured=False, **loadgen_kwargs(b))
    code, error = points.run_loadgen(b.cfg.sglang_python, b.module, argv, starts_file=Path(f"{stem}.warm.starts"),
                                     log_file=Path(f"{stem}.log"), env=b.env, limit_s=points.timeout_s(point))
    store.redact_jsonl(Path(f"{stem}.warm.jsonl"))
    return f"warm pass failed: {error}" if code else ""


def measure(b: Bench, point: points.Point, stem: Path, started: float) -> tuple[PointSummary | None, str, str]:
    """The measured load-generator run -> (summary, requests file, error or ''). A run killed at its time limit
    keeps the requests that finished before the kill (llmhost.bench.salvage); the point is still failed."""
    argv = points.bench_argv(point, WORKLOADS[point.workload], output_file=Path(f"{stem}.jsonl"), **loadgen_kwargs(b))
    starts = Path(f"{stem}.starts")
    code, error = points.run_loadgen(b.cfg.sglang_python, b.module, argv, starts_file=starts,
                                     log_file=Path(f"{stem}.log"), env=b.env, limit_s=points.timeout_s(point))
    summary, rel, rows = None, "", []
    if not code:
        try:
            details = points.read_details(Path(f"{stem}.jsonl"))
            rows = points.request_rows(details, json.loads(starts.read_text()), started)
            summary = points.summarize(details, rows, point.request_rate)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # reading only: a failed write ends the run
            error = f"unreadable load-generator output: {type(exc).__name__}: {exc}"[:300]
    elif code == points.TIMED_OUT:
        rows = salvage.completed_requests(points.completed_file(starts), salvage.warmup_requests(argv))
        summary = salvage.summarize(rows, point.request_rate) if rows else None
        error += f"; the {len(rows)} requests that finished before the kill are kept" if rows else ""
    if summary is not None:
        rel = b.store.write_requests(point.point_id, rows)
    store.redact_jsonl(Path(f"{stem}.jsonl"))  # bench_serving copies /server_info, API key included, into it
    if not error and summary and summary.completed == 0:  # bench_serving exits 0 even when all requests failed
        first = next((r.error for r in rows if r.error), "no error text")
        error = f"every request failed ({first})"[:300]
    if not error and not server_alive(b.cfg):
        error = "the server stopped answering /health during the point"
    return summary, rel, error


def attempt_range(last: PointRecord | None) -> range:
    """The attempts a point gets in this pass: a try and its retry. Attempts come in such pairs, so a point
    whose try failed just before a kill (odd attempt) gets only its retry, and a --resume of a point that failed
    its retry (even attempt) gets a fresh pair."""
    if last is None:
        return range(1, 3)
    return range(last.attempt + 1, last.attempt + (2 if last.attempt % 2 else 3))


def run_point(b: Bench, arm: arms_mod.Arm, point: points.Point, last: PointRecord | None) -> bool:
    """Attempts until ok or failed on the retry; a dead server is restarted before the retry, unless the user
    stopped it (UserStopped then ends the run). Returns ok."""
    attempts = attempt_range(last)
    for attempt in attempts:
        b.progress(f"{point.point_id}: running{' (retry)' if attempt % 2 == 0 else ''}")
        record = attempt_point(b, point, attempt)
        b.store.append_point(record)
        s = record.summary
        if record.status == "ok" and s is not None:
            note = "  CLIENT-BOUND" if s.client_bound else ""
            b.done += 1
            b.spend(points.estimate_s(point))
            b.progress(f"{point.point_id} ok {record.ended_at - record.started_at:.1f}s "
                       f"({s.completed} done, {s.failed} failed, {s.output_throughput:.0f} tok/s){note}")
            return True
        print(f"[bench] {point.point_id} attempt {attempt} failed: {record.error}", flush=True)
        if attempt != attempts[-1] and not server_alive(b.cfg):
            check_user_stop(b)
            print(f"[bench] the server is not answering — restarting arm {arm.name} before the retry", flush=True)
            error = restart_server(b, arm)
            if error:
                print(f"[bench] {error}", flush=True)
    check_user_stop(b)  # a stop during the last attempt: say so now, not at the next arm
    b.done += 1
    b.spend(points.estimate_s(point))
    return False


def check_user_stop(b: Bench) -> None:
    """UserStopped when ./serve.sh stop ran since this run began (a later start removes its mark)."""
    when = lifecycle.stopped_by_user(b.cfg, b.started_at)
    if when:
        raise UserStopped(when)


# --- the run: arm by arm ----------------------------------------------------------------------------------

def run_arms(b: Bench, arms: list[arms_mod.Arm], plan: list[points.Point], quick: bool) -> None:
    """Arm by arm: fresh server, warm pass, tool calls, then every point not yet recorded."""
    attempts = b.store.latest_attempts()
    done = b.store.done_points(b.only_missing)
    for arm in arms:
        todo = [p for p in plan if p.arm == arm.name and p.point_id not in done]
        if not todo:
            continue
        b.progress(f"arm {arm.name}: restarting the server with {' '.join(arm.flags) or 'the baseline flags'}")
        error = restart_server(b, arm)
        b.est_left_s -= arm_overhead_s(quick)
        if error:  # recorded as attempt-1 failures: --resume tries them again
            print(f"[bench] {error} — its {len(todo)} points are marked failed", flush=True)
            for p in todo:
                b.store.append_point(PointRecord.of(p, attempt=1, status="failed", error=error,
                                                    started_at=time.time(), ended_at=time.time(), cache_flushed=False,
                                                    summary=None, requests_file=f"requests/{p.point_id}.jsonl"))
                b.done += 1
                b.spend(points.estimate_s(p))
            continue
        if not quick:
            warm_arm(b, arm)
        if arm.name not in b.store.toolcall_arms():
            check_tools(b, arm)
        for p in todo:
            run_point(b, arm, p, attempts.get(p.point_id))
