"""Running a benchmark plan: boot by boot on a freshly restarted server, point by point with SGLang's load generator.

run_bench.py builds the plan and the run directory; this module executes it. Consecutive arms with the same launch
flags share one server boot; a boot is a restart with those flags as data (llmhost.serve.lifecycle), one
load-generator process that runs all of its points in-process (llmhost.bench.loadgen_process), an untimed warm pass
(full runs), the tool-call check of each arm, then its points in a seeded shuffle, each after a verified prefix-cache
flush and retried once (after a restart when the server died). Progress lines carry an ETA that learns from reality.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from llmhost.bench import arms as arms_mod
from llmhost import config
from llmhost.bench import budget, costs, load_profile, points, records, salvage, sittings, store, telemetry, toolcalls
from llmhost.bench.loadgen import completed_file
from llmhost.bench.bootwatch import BootWatch
from llmhost.bench.eta import Eta, fmt_s
from llmhost.bench.loadgen_process import LoadGenerator
from llmhost.bench.records import PointRecord, PointSummary, RequestRecord, ServerRecord, ToolCallCase, ToolCallSkipped
from llmhost.provenance import redact_secrets, utc_now
from llmhost.bench.liveness import flush_all, info_client, server_alive, server_watch
from llmhost.serve import lifecycle, serverlog
from llmhost.serve.console import Console, ServeError, ServerBusy
from llmhost.serve.shared_prefix import said
from llmhost.serve.spec import bytecode_env, with_settings
from llmhost.bench.workloads import REGISTRY as WORKLOADS


def arm_overhead_s(quick: bool) -> float:
    """Per-boot time outside the points by the H200 defaults (llmhost.bench.costs learns this host's)."""
    return costs.CostModel().boot_s(quick)


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
    loadgen: LoadGenerator | None = None  # the running boot's load generator
    done: int = 0
    clock: Eta | None = None  # the ETA, re-fit as points finish (set before the run starts)
    sitting: sittings.Sitting | None = None  # records this invocation's boots and ETAs (set before the run starts)
    budget_end: float | None = None  # time.monotonic() the --budget-min budget ends; None: no adaptive repeats
    only_missing: bool = False  # --resume --only-missing: a point that failed its retry is not tried again
    check_tool_calls: bool = True  # False in a tune: its levers schedule requests, they do not change the answers
    started_at: float = dataclasses.field(default_factory=time.time)  # a ./serve.sh stop after this is the user's
    serving: arms_mod.Arm | None = None  # the arm the server was last started with: the run leaves it serving
    kernel_profile: bool = False  # --kernel-profile: each closed-loop load's first repeat once more, profiled

    def progress(self, text: str) -> None:
        """A progress line with the ETA, which the sitting records too (the run's end tells how far it swung)."""
        left_s = self.clock.seconds_left() if self.clock else None
        print(f"[bench {self.done}/{self.total}] {text}  ETA {'?' if left_s is None else fmt_s(left_s)}", flush=True)
        if self.sitting and self.clock and left_s is not None:
            self.sitting.eta_shown(self.done, left_s, self.clock.anchor, self.clock.added_s)

    def boot_paid(self, lead: str, arms: Iterable[str], started_at: float, error: str = "",
                  is_fault: bool = False) -> None:
        """A boot that began at started_at (time.time()) is over: the sitting records it, a planned one that
        came up re-fits the ETA."""
        boot_s = time.time() - started_at
        if self.sitting:
            self.sitting.boot(lead, arms, started_at, boot_s, error, is_fault)
        if self.clock and not (error or is_fault):
            self.clock.boot_done(boot_s)

    def spend(self, point: points.Point, wall_s: float) -> None:
        """A point is done (ok or failed) after wall_s seconds: the ETA re-fits."""
        if self.clock:
            self.clock.point_done(point, wall_s)


# --- the environment ---------------------------------------------------------------------------------------------

def interrupt_on_sigterm() -> None:
    """Treat SIGTERM (kill, timeout(1)) like Ctrl-C, so the running point's load generator, which lives in its
    own session, is stopped too instead of loading the server on its own after run_bench.py is gone."""
    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


def loadgen_env(cfg: config.Config) -> dict[str, str]:
    """Load-generator environment: bench_serving reads the API key from OPENAI_API_KEY, never from its argv; it
    imports SGLang too, so it keeps its bytecode where the server does (BYTECODE_CACHE) when the shell forbids it."""
    env = {**os.environ, **bytecode_env(cfg, os.environ)}
    key = cfg.api_key()
    if key:
        env["OPENAI_API_KEY"] = key
    return env


# --- one arm: a fresh server -------------------------------------------------------------------------------------

def restart_server(b: Bench, arm: arms_mod.Arm, reason: str = "") -> str:
    """A fresh server with this arm's one difference, its flags passed as data; record servers/<arm>.json (a
    restart after a fault adds `reason` to the record's restarts). Returns '' or a one-line error. Its progress
    goes to raw/serve-<arm>.log."""
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
    reply = info_client(b.cfg).server_info()
    try:
        info = reply.json() if reply.ok else {"error": f"HTTP {reply.describe()}: {reply.text[:200]}"}
    except ValueError:
        info = {"error": "not JSON"}
    earlier = read_server(b, arm.name)
    restarts = (*earlier.restarts, f"{utc_now(started)} {reason}") if reason and earlier else \
        ((f"{utc_now(started)} {reason}",) if reason else ())
    b.store.write_server(ServerRecord(
        arm=arm.name, launch_command=ready.launch_command or None, server_info=redact_secrets(info),
        ready_s=time.time() - started, started_at=ready.started_at or utc_now(started), restarts=restarts,
        layout=ready.layout, decode=said.of_server(with_settings(b.cfg, settings))[1]))
    b.sampler.scrape(telemetry.scrape_targets(ready.layout, ready.base_url, b.cfg.worker_urls.split()))
    b.serving = arm
    return ""


def boot_watch(b: Bench, arm: arms_mod.Arm) -> BootWatch:
    """Lines while this arm's start runs past what a boot takes here (the ETA says nothing of an overrun): how long
    it has run, the server log's last line, and what is left once it is ready."""
    expected_s = b.clock.boot_left_s() if b.clock else arm_overhead_s(quick=False)

    def say(text: str) -> None:
        rest = f"; then ~{fmt_s(b.clock.refit() - b.clock.boot_left_s())} for the rest" if b.clock else ""
        print(f"[bench {b.done}/{b.total}] arm {arm.name}: {text}{rest}", flush=True)

    return BootWatch(say, expected_s, b.cfg.state_dir / "server.log")


def read_server(b: Bench, arm: str) -> ServerRecord | None:
    """servers/<arm>.json as written, or None (absent or unreadable)."""
    try:
        return ServerRecord.from_dict(json.loads((b.store.root / "servers" / f"{arm}.json").read_text()))
    except (OSError, ValueError):  # RecordError is a ValueError
        return None


def share_boot(b: Bench, lead: arms_mod.Arm, arm: arms_mod.Arm) -> None:
    """An arm with the lead's launch flags runs on the lead's boot: its servers/<arm>.json is the lead's."""
    record = read_server(b, lead.name)
    if record is not None:
        b.store.write_server(dataclasses.replace(record, arm=arm.name, restarts=()))


def warm_arm(b: Bench, arm: arms_mod.Arm) -> None:
    """A small untimed pass (first-request and kernel warm-up); a failure is a warning, never fatal."""
    probe = points.make_point(arm.name, "chat", "concurrency", 8, None, 16, 0)
    raw = b.store.raw_dir()
    argv = points.bench_argv(probe, WORKLOADS["chat"], base_url=b.cfg.base_url, model_dir=b.cfg.model_dir,
                             served_model_name=b.cfg.served_model_name, seed=b.seed,
                             output_file=raw / f"warm-{arm.name}.jsonl")
    assert b.loadgen is not None
    _, error = b.loadgen.run(argv, raw / f"warm-{arm.name}.requests.jsonl", limit_s=300, watch=server_watch(b.cfg))
    store.redact_jsonl(raw / f"warm-{arm.name}.jsonl")
    if error:
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


# --- one point: flush, (prime), measure, parse --------------------------------------------------------------------

def point_argv(b: Bench, point: points.Point, output_file: Path, prime: bool = False) -> list[str]:
    return points.bench_argv(point, WORKLOADS[point.workload], base_url=b.cfg.base_url, model_dir=b.cfg.model_dir,
                             served_model_name=b.cfg.served_model_name, seed=points.point_seed(b.seed, point),
                             output_file=output_file, prime=prime)


def dataset_argvs(b: Bench, todo: list[points.Point]) -> list[list[str]]:
    """Every pass of these points (priming passes too), for the load generator to build their datasets while the
    server boots; the output file is never written by a prepare."""
    unused = b.store.raw_dir() / "prepare.jsonl"
    return [point_argv(b, p, unused, prime) for p in todo
            for prime in ((False, True) if points.is_primed(p) else (False,))]


def measure(b: Bench, point: points.Point, stem: str, prime: bool = False,
            also: Callable[[], str] | None = None) -> tuple[dict[str, float] | None, str]:
    """One pass of the point through the boot's load generator -> (the module's totals, '') or (None, error).
    Its request records land in <stem>[.prime].requests.jsonl, the module's own output in <stem>[.prime].jsonl.
    `also`: polled every second of the pass with the server watch (a profile trigger)."""
    base = f"{stem}.prime" if prime else stem
    argv = point_argv(b, point, Path(f"{base}.jsonl"), prime)
    assert b.loadgen is not None
    dead = server_watch(b.cfg)
    watch = dead if also is None else (lambda: dead() or also())
    totals, error = b.loadgen.run(argv, Path(f"{base}.requests.jsonl"), limit_s=points.timeout_s(point),
                                  watch=watch)
    store.redact_jsonl(Path(f"{base}.jsonl"))  # bench_serving copies /server_info, API key included, into it
    return totals, error


def prepare(b: Bench, point: points.Point, stem: str) -> tuple[bool, str]:
    """The start every pass of a point has: the prefix cache flushed, then primed for a primed point -> (flushed,
    '' or why not)."""
    flush = flush_all(b.cfg, wait_s=120)  # flushed only once SGLang emptied the tree (each worker's, behind a router)
    if not flush:
        return False, f"prefix cache flush failed: {flush.detail}"
    if points.is_primed(point):
        _, prime_error = measure(b, point, stem, prime=True)
        return True, f"priming pass failed: {prime_error}" if prime_error else ""  # else cold passes for warm
    return True, ""


def attempt_point(b: Bench, point: points.Point, attempt: int) -> PointRecord:
    """Run one attempt of a point; returns its points.jsonl record (failures are data, named with the server
    log's cause when it has one)."""
    b.sampler.point_id = point.point_id
    started = time.time()
    stem = str(b.store.raw_dir() / f"{point.point_id}.a{attempt}.{int(started)}")  # unique per attempt
    log_offset = serverlog.size(b.cfg.state_dir / "server.log")
    flushed, error = prepare(b, point, stem)
    summary, rel = None, ""
    if not error:
        summary, rel, error = measure_point(b, point, stem)
    if error:
        log = b.cfg.state_dir / "server.log"  # this server's own: a launch rotates it
        cause = serverlog.error_cause(log, log_offset)
        if not cause and server_watch(b.cfg)():  # it died before the point began: the traceback it left then
            cause = serverlog.error_cause(log, 0, (serverlog.EXCEPTION_LINE,))
        error = f"{error} — server log: {cause}"[:400] if cause else error
    record = PointRecord.of(point, attempt=attempt, status="failed" if error else "ok", error=error or None,
                            started_at=started, ended_at=time.time(),
                            cache_flushed=flushed and not points.is_primed(point), summary=summary,
                            requests_file=rel or f"requests/{point.point_id}.jsonl")
    b.sampler.point_id = None
    return record


def profile_point(b: Bench, point: points.Point) -> None:
    """--kernel-profile: the point once more, unmeasured and from the same start (flushed, primed), with SGLang's
    profiler on for a request's lifetime of forward passes in its steady stretch (llmhost.bench.load_profile); the
    record lands in point_kernels.jsonl, a failure as its reason. The pass counts in the ETA as its own point."""
    started = time.monotonic()
    pass_ = load_profile.profile_pass(point)
    stem = str(b.store.raw_dir() / f"{pass_.point_id}.{int(time.time())}")
    b.progress(f"{pass_.point_id}: running once more, profiled")
    trigger = load_profile.Trigger(info_client(b.cfg), b.store.raw_dir() / f"profile-{point.point_id}",
                                   completed_file(Path(f"{stem}.requests.jsonl")), load_profile.after_requests(point),
                                   load_profile.profile_steps(point))
    _, error = prepare(b, point, stem)
    if not error:
        _, error = measure(b, point, stem, also=trigger)
    shape = b.store.read_manifest().model_shape
    record = load_profile.collect(pass_, trigger, shape.num_layers if shape else 0, error)
    b.store.append_point_kernels(record)
    if b.clock:
        b.clock.point_done(pass_, time.monotonic() - started)
    print(f"[bench] {load_profile.line(record)}", flush=True)


def measure_point(b: Bench, point: points.Point, stem: str) -> tuple[PointSummary | None, str, str]:
    """The measured pass -> (summary, requests file, error or ''). A pass that ended without the module's totals
    (killed at its time limit, the load generator died) keeps the requests that finished before (llmhost.bench.
    salvage); the point is still failed."""
    totals, error = measure(b, point, stem)
    requests_file = Path(f"{stem}.requests.jsonl")
    summary, rows = None, []
    try:
        if totals is not None:
            rows = records.read_records(requests_file, RequestRecord.from_dict).records
            summary = with_window(point, points.summarize(totals, rows, point.request_rate), rows)
        else:
            rows = salvage.completed_requests(requests_file)
            summary = salvage.summarize(rows, point.request_rate) if rows else None
            error += f"; the {len(rows)} requests that finished before it ended are kept" if rows else ""
    except (OSError, ValueError, KeyError, TypeError) as exc:  # reading only: a failed write ends the run
        error = f"unreadable load-generator output: {type(exc).__name__}: {exc}"[:300]
    rel = b.store.write_requests(point.point_id, rows) if summary is not None else ""
    if not error and summary and summary.completed == 0:  # the module returns normally when all requests failed
        first = next((r.error for r in rows if r.error), "no error text")
        error = f"every request failed ({first.strip().splitlines()[-1] if first.strip() else first})"[:300]
    if not error and not server_alive(b.cfg):
        error = "the server stopped answering /health during the point"
    return summary, rel, error


def with_window(point: points.Point, summary: PointSummary, rows: list[RequestRecord]) -> PointSummary:
    """The summary with its steady window's length and output tok/s (adaptive repeats aim at the CI of what the
    dashboard's headline quotes: the steady windows)."""
    from llmhost.bench import window  # numpy: imported once a point is summarised (run_bench.py checked it)

    w, steadiness = window.measure(point, rows)
    if not w.has_window:
        return summary
    return dataclasses.replace(summary, steady_window_s=w.duration_s,
                               steady_output_throughput=w.output_throughput if steadiness.is_steady else None)


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
    started = time.monotonic()
    for attempt in attempts:
        b.progress(f"{point.point_id}: running{' (retry)' if attempt % 2 == 0 else ''}")
        record = attempt_point(b, point, attempt)
        b.store.append_point(record)
        s = record.summary
        if record.status == "ok" and s is not None:
            note = "  CLIENT-BOUND" if s.client_bound else ""
            b.done += 1
            b.spend(point, record.ended_at - record.started_at)
            b.progress(f"{point.point_id} ok {record.ended_at - record.started_at:.1f}s "
                       f"({s.completed} done, {s.failed} failed, {s.output_throughput:.0f} tok/s){note}")
            if b.kernel_profile and load_profile.is_profiled(point):
                profile_point(b, point)
            return True
        print(f"[bench] {point.point_id} attempt {attempt} failed: {record.error}", flush=True)
        if attempt != attempts[-1] and not server_alive(b.cfg):
            check_user_stop(b)
            print(f"[bench] the server is not answering — restarting arm {arm.name} before the retry", flush=True)
            restarted = time.time()
            error = restart_server(b, arm, reason=f"restarted after {point.point_id} attempt {attempt}: {record.error}")
            b.boot_paid(arm.name, [arm.name], restarted, error, is_fault=True)
            if error:
                print(f"[bench] {error}", flush=True)
    check_user_stop(b)  # a stop during the last attempt: say so now, not at the next arm
    b.done += 1
    b.spend(point, time.monotonic() - started)
    if b.kernel_profile and load_profile.is_profiled(point) and b.clock:
        b.clock.point_done(load_profile.profile_pass(point), 0.0)  # a failed point is not profiled: off the ETA
    return False


def check_user_stop(b: Bench) -> None:
    """UserStopped when ./serve.sh stop ran since this run began (a later start removes its mark)."""
    when = lifecycle.stopped_by_user(b.cfg, b.started_at)
    if when:
        raise UserStopped(when)


# --- the run: boot by boot -------------------------------------------------------------------------------

boots = arms_mod.boots  # which arms share a server boot (the budget planner prices boots by it too)


def run_arms(b: Bench, arms: list[arms_mod.Arm], plan: list[points.Point], quick: bool) -> None:
    """Boot by boot: fresh server, load generator, warm pass, tool calls, then every point not yet recorded."""
    attempts = b.store.latest_attempts()
    done = b.store.done_points(b.only_missing)
    for group in boots(arms):
        names = {a.name for a in group}
        todo = points.boot_order([p for p in plan if p.arm in names and p.point_id not in done], b.seed)
        if todo:
            run_boot(b, group, todo, {p.point_id: attempts[p.point_id] for p in todo if p.point_id in attempts},
                     quick)


def run_boot(b: Bench, group: list[arms_mod.Arm], todo: list[points.Point], last: dict[str, PointRecord],
             quick: bool) -> None:
    """One server boot: restart, load generator, warm pass, tool calls, its points (`last`: their latest
    recorded attempts)."""
    lead = group[0]
    b.progress(f"arm {'+'.join(a.name for a in group)}: restarting the server with "
               f"{' '.join(lead.flags) or 'the baseline flags'}")
    booted = time.time()
    by_name = {a.name: a for a in group}
    with LoadGenerator(b.cfg.sglang_python, b.module, b.env, b.store.raw_dir() / f"loadgen-{lead.name}.log") as gen:
        gen.launch(prepare=dataset_argvs(b, todo + adaptive_ahead(b, todo)))  # built while the server boots
        with boot_watch(b, lead):
            error = restart_server(b, lead)
        if error:  # recorded as attempt-1 failures: --resume tries them again
            b.boot_paid(lead.name, by_name, booted, error)
            print(f"[bench] {error} — its {len(todo)} points are marked failed", flush=True)
            for p in todo:
                b.store.append_point(PointRecord.of(p, attempt=1, status="failed", error=error,
                                                    started_at=time.time(), ended_at=time.time(), cache_flushed=False,
                                                    summary=None, requests_file=f"requests/{p.point_id}.jsonl"))
                b.done += 1
                b.spend(p, 0.0)
            gen.kill()
            return
        for arm in group[1:]:
            share_boot(b, lead, arm)
        gen.start()  # LoadgenError (an SGLang whose API this toolkit does not drive) ends the run in one line
        b.loadgen = gen
        b.sampler.watch_client(gen.pid)
        try:
            if not quick:
                warm_arm(b, lead)
            for arm in group:
                if b.check_tool_calls and arm.name not in b.store.toolcall_arms():
                    check_tools(b, arm)
            b.boot_paid(lead.name, by_name, booted)
            for p in todo:
                run_point(b, by_name[p.arm], p, last.get(p.point_id))
            run_extra_repeats(b, by_name)
        finally:
            b.loadgen = None
            b.sampler.watch_client(None)


def adaptive_ahead(b: Bench, todo: list[points.Point]) -> list[points.Point]:
    """The adaptive repeats this boot could add under the budget's spare time (the budget left minus the ETA of the
    planned work left), whose datasets the load generator builds ahead with the planned ones'."""
    if b.budget_end is None or b.clock is None:
        return []
    return budget.likely_extra(todo, b.clock.model, b.budget_end - time.monotonic() - b.clock.seconds_left())


def run_extra_repeats(b: Bench, by_name: dict[str, arms_mod.Arm]) -> None:
    """Adaptive repeats on this boot, while its share of the budget lasts: the spare time (budget left minus the
    ETA of the planned work left) less what the later boots' headline points are expected to need, at least an
    even share (budget.boot_share_s)."""
    while b.budget_end is not None and b.clock is not None:
        later = [p for p in b.clock.left.values() if p.arm not in by_name]
        spare_s = budget.boot_share_s(b.budget_end - time.monotonic() - b.clock.seconds_left(), later,
                                      b.clock.boots_left, b.clock.model)
        extra = budget.extra_repeats(b.store.latest_attempts().values(), set(by_name), b.clock.model, spare_s)
        if not extra:
            return
        b.store.add_adaptive_repeats(extra)  # in the manifest's plan first: a --resume after a kill runs them
        b.total += len(extra)
        b.clock.add(extra)
        b.progress(f"adaptive repeats (throughput CI above {budget.CI_TARGET_PCT:g}%): "
                   f"{', '.join(p.point_id for p in extra)}")
        for p in extra:
            run_point(b, by_name[p.arm], p, None)
