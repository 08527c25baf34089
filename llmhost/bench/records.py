"""What a benchmark run writes to disk, as typed records: one writer (`to_dict`) and one reader (`from_dict`) each.

    manifest.json             Manifest        run metadata, provenance, arms, workloads, the plan (schema number)
    points.jsonl              PointRecord     one line per finished attempt of a Point
    requests/<point>.jsonl    RequestRecord   one line per request of the point's latest attempt
    telemetry.jsonl           TelemetrySample one /metrics or GPU reading
    toolcalls.jsonl           ToolCallCase    one scored tool-call prompt, or ToolCallSkipped for a whole arm
    servers/<arm>.json        ServerRecord    an arm's exact launch command, /server_info and decode
    startups.jsonl            StartupRecord   one restart of a --startup run: ready time and its phases
    sittings.jsonl            (llmhost.bench.sittings) each invocation of a run: its span, boots and ETAs
    stream_*.jsonl            (llmhost.bench.stream_records) a --single-stream run's requests and arms

The schema number (SCHEMA, stored in manifest.json) covers the whole run directory. It changes only when a reader
of today could misread a new file; added fields get defaults instead, so older runs read with the current schema.
A run written by a newer toolkit (a larger number) is refused in one line. `from_dict` checks every field's type
and raises RecordError, whose message names the field; readers of JSONL files skip such a line and say so.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import shlex
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from llmhost import files
from llmhost.bench.arms import Arm
from llmhost.bench.model_shape import ModelShape
from llmhost.bench.workloads import Kind, Workload
from llmhost.provenance import Provenance, utc_now

SCHEMA = 1
Pattern = Literal["concurrency", "qps", "long", "burst", "cold", "warm"]
PATTERNS: tuple[str, ...] = typing.get_args(Pattern)
Status = Literal["ok", "failed"]
R = TypeVar("R")
RecordT = TypeVar("RecordT", bound="Record")


class RecordError(ValueError):
    """A stored record that does not have the shape this toolkit writes; the message is one line."""


class NewerSchemaError(RecordError):
    """A run written by a newer toolkit: nothing is wrong with it, this reader is too old."""


# --- one reader for every record type: the dataclass's own type hints say what each field must be ------------

def _convert(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            try:
                return _convert(value, option, where)
            except RecordError:
                if len(options) == 1:  # X | None: the error about X says more than "X or null"
                    raise
    elif origin is Literal:
        if value in args:
            return value
    elif origin is tuple and isinstance(value, (list, tuple)):
        if args[0] is float and all(type(v) in (int, float) for v in value):  # fast path: every ITL gap
            return tuple(map(float, value))
        return tuple(_convert(v, args[0], where) for v in value)
    elif origin is dict and isinstance(value, dict):
        return {str(k): _convert(v, args[1], where) for k, v in value.items()}
    elif dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return build(hint, value, where)
    elif hint is float and type(value) in (int, float):  # bool is an int subclass, not a number here
        return float(value)
    elif hint in (int, str, bool) and type(value) is hint:
        return value
    raise RecordError(f"{where} should be {_name(hint)}, not {repr(value)[:40]}")


def _name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _name(a) for a in args)
    return {tuple: "a list", dict: "an object"}.get(origin) or getattr(hint, "__name__", str(hint))


def build(cls: type[R], data: dict[str, Any], where: str, **given: Any) -> R:
    """An instance of dataclass `cls` from `data`, every field checked; `given` fields are taken as they are.
    A missing field takes its default; without one it is an error. Unknown keys are ignored."""
    if not isinstance(data, dict):
        raise RecordError(f"{where} should be a JSON object")
    hints = _hints(cls)
    kwargs: dict[str, Any] = dict(given)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in given:
            continue
        if field.name in data:
            kwargs[field.name] = _convert(data[field.name], hints[field.name], f"{where}: '{field.name}'")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise RecordError(f"{where} lacks '{field.name}'")
    return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # evaluated once per class: readers call build() per line


class Record:
    """Base of every stored record: `to_dict()` is its one writer, `from_dict()` its one reader."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]  # tuples are written as JSON lists

    @classmethod
    def from_dict(cls: type[RecordT], data: dict[str, Any]) -> RecordT:
        """The record from its JSON object, every field checked; RecordError (one line) when it does not fit."""
        label = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()  # PointRecord -> "point record"
        return build(cls, cls._upgrade(data) if isinstance(data, dict) else data, label)

    @classmethod
    def _upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """An older layout of this record, rewritten as today's before its fields are checked."""
        return data


# --- the records ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Point(Record):
    """One planned benchmark point: one load-generator run."""

    point_id: str
    arm: str
    workload: str
    pattern: Pattern
    concurrency: int | None
    request_rate: float | None  # None = all at once
    num_prompts: int
    repeat: int

    @property
    def load(self) -> float | None:
        """The x-axis value of the point: request rate for qps, else concurrency (None = all at once)."""
        return self.request_rate if self.pattern == "qps" else self.concurrency

    @property
    def group_key(self) -> tuple:
        """Identity of the point across repeats and runs (what --compare matches)."""
        return (self.arm, self.workload, self.pattern, self.concurrency, self.request_rate, self.num_prompts)


@dataclasses.dataclass(frozen=True, slots=True)
class PointSummary(Record):
    """bench_serving's own totals of an attempt, plus what the runner derived from the per-request records."""

    duration_s: float
    completed: int
    failed: int
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    offered_rate: float | None
    achieved_rate: float
    client_bound: bool
    samples: dict[str, int] = dataclasses.field(default_factory=dict)  # ttft_ms/itl_ms/e2e_ms sample counts
    low_support: tuple[str, ...] = ()  # percentiles with too few samples beyond them, e.g. "ttft_ms.p99.9"
    # The steady window (llmhost.bench.window) as the runner saw it, for adaptive repeats: its length (None: not
    # windowed) and output tok/s (None: no window, or the steadiness check failed). The dashboard recomputes both.
    steady_window_s: float | None = None
    steady_output_throughput: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PointRecord(Point):
    """One finished attempt of a point (a points.jsonl line): the Point's fields, then the outcome."""

    attempt: int
    status: Status
    error: str | None
    started_at: float  # unix seconds, the clock of the request and telemetry records
    ended_at: float
    cache_flushed: bool
    summary: PointSummary | None  # None when the attempt failed before it produced one
    requests_file: str  # run-relative path of the latest attempt's RequestRecords

    @classmethod
    def of(cls, point: Point, **outcome: Any) -> "PointRecord":
        return cls(**{f.name: getattr(point, f.name) for f in dataclasses.fields(Point)}, **outcome)

    @classmethod
    def _upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "summary": data.get("summary") or None}  # older runs wrote {} for none


@dataclasses.dataclass(frozen=True, slots=True)
class RequestRecord(Record):
    """One request, timed by SGLang's request function; start_s/end_s on the telemetry clock (time.time())."""

    start_s: float  # unix seconds
    ok: bool
    error: str
    prompt_tokens: int
    output_tokens: int
    ttft_ms: float | None  # first streamed token of any kind (content, reasoning, tool call); None: failed/none
    itl_ms: tuple[float, ...]  # every gap between streamed chunks (empty for a failed request)
    e2e_ms: float
    end_s: float | None = None  # unix seconds of the last chunk; None: failed (or a run before it was recorded)
    cached_tokens: int | None = None  # prompt tokens served from the prefix cache; None: failed or not reported
    # response headers back, ms after the same start as ttft_ms: the request's way in, before SGLang's clock starts
    # (llmhost.bench.loadgen); None: failed, or not measured (a run before it was recorded)
    headers_ms: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TelemetrySample(Record):
    t: float  # unix seconds, one stamp per sampler tick
    # gap: GAP_NAME, value = seconds whose samples could not be written; client: the load generator's own use
    source: Literal["metrics", "gpu", "gap", "client"]
    name: str
    labels: dict[str, str]
    value: float
    point_id: str | None  # the point running when sampled


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallCase(Record):
    arm: str
    case_id: str
    prompt: str
    expected_tool: str | None
    called_tool: str | None
    args_ok: bool
    ok: bool
    latency_ms: float
    error: str = ""  # the request failed (HTTP error, timeout): recorded as data


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallSkipped(Record):
    arm: str
    skipped: str  # why the arm's tool calls were not scored


def toolcall_from_dict(data: dict[str, Any]) -> ToolCallCase | ToolCallSkipped:
    """A toolcalls.jsonl line: a skip note for a whole arm, or one scored case."""
    if isinstance(data, dict) and "skipped" in data:
        return ToolCallSkipped.from_dict(data)
    return ToolCallCase.from_dict(data)


@dataclasses.dataclass(frozen=True, slots=True)
class ServerRecord(Record):
    arm: str
    launch_command: str | None  # shell-quoted, as serve.sh saved it (secrets are in a 0600 file, not here)
    server_info: dict[str, Any]  # /server_info, secrets redacted
    ready_s: float
    started_at: str  # UTC, ISO 8601
    restarts: tuple[str, ...] = ()  # "<UTC> <why>" per restart after a fault (the server died during a point)
    # which processes served the arm's points, on which GPUs and ranks: name, port, gpus (CUDA_VISIBLE_DEVICES, ''
    # = all visible; null for the router), tp_size, dp_size (llmhost.serve.service.layout)
    layout: tuple[dict[str, Any], ...] = ()
    # the decode it ran (llmhost.serve.shared_prefix.said.of_server): the shared-prefix plugin's line, SGLang's own
    # with it off, or '' (not known: ROUTER=on, or a run from before the plugin)
    decode: str = ""

    @classmethod
    def _upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        cmd, started = data.get("launch_command"), data.get("started_at")
        return {**data,  # older runs: the command as a list, the start as unix seconds
                "launch_command": shlex.join(map(str, cmd)) if isinstance(cmd, list) else cmd,
                "started_at": utc_now(started) if type(started) in (int, float) else started}


@dataclasses.dataclass(frozen=True, slots=True)
class StartupRecord(Record):
    """One restart of a `run_bench.py --startup` run: how soon the server was ready and where the time went."""

    arm: str
    repeat: int  # 1..N within the arm
    status: Status
    started_at: str  # UTC, ISO 8601: when the restart began (the stop of the previous server included)
    restart_s: float  # the whole restart: stop, GPU release, launch, ready
    # launch to ready, what ./serve.sh's 'ready in N s' line says (the pane stamps its launch to the second, so
    # this may exceed restart_s by up to 1 s on a fast start); None when the start failed
    ready_s: float | None
    phases: dict[str, float]  # phase -> seconds in log order (llmhost.serve.startup); {} when the log told none
    launch_command: str | None = None
    error: str = ""
    # with --import-profile: package -> import self seconds over the start's processes (llmhost.serve.import_profile)
    imports_s: dict[str, float] = dataclasses.field(default_factory=dict)
    import_processes: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class WorkloadRecord(Record):
    """A workload as the manifest records it: what makes its prompts."""

    name: str
    kind: Kind
    description: str
    params: dict[str, Any]

    @classmethod
    def of(cls, workload: Workload) -> "WorkloadRecord":
        return cls(workload.name, workload.kind, workload.description, workload.params)


@dataclasses.dataclass(frozen=True, slots=True)
class Estimate(Record):
    """What the dry run says the plan takes (llmhost.bench.dryrun), recorded when the run is planned and kept
    across --resume, so the run's end can say how it did against it (llmhost.bench.reckoning)."""

    estimate_s: float  # points + boots + the run's fixed part, by the cost model
    calibrated: bool
    label: str  # the cost model's own words: "calibrated on this host's last 2 run(s), ..." or "uncalibrated: ..."
    boots: int  # server boots the estimate counts: one per group of arms sharing launch flags
    budget_s: float | None  # --budget-min in seconds; None: --quick or --repeat fixed the plan


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest(Record):
    run_id: str
    provenance: Provenance  # stored flat (created_at, command, git_commit, ...), as before it had a type
    config: dict[str, Any]  # effective configuration, secrets redacted
    seed: int
    slo: dict[str, float] | None  # ttft_ms, itl_ms, pct: the SLO the run was planned with
    arms: tuple[Arm, ...]
    workloads: tuple[WorkloadRecord, ...]
    plan: tuple[Point, ...]  # adaptive repeats join it when the run decides them
    adaptive_repeats: tuple[str, ...] = ()  # point ids of the plan added during the run (llmhost.bench.budget)
    schema: int = SCHEMA
    tune: dict[str, Any] | None = None  # a --tune run: its search space, trials and stage (llmhost.tune.driver)
    startup_restarts: int | None = None  # a --startup run: restarts per arm, no points (llmhost.bench.startup_bench)
    estimate: Estimate | None = None  # the dry run's estimate of the plan; None: a tune, or a run made before
    single_stream_requests: int | None = None  # a --single-stream run: requests per arm (llmhost.bench.single_stream)
    # the served model's layers, KV heads, head size, dtype and weight bytes (llmhost.bench.model_shape); None: a
    # run made before, or a config.json it cannot count, model_shape_note then says why ("" for the former)
    model_shape: ModelShape | None = None
    model_shape_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {"schema": out.pop("schema"), "run_id": out.pop("run_id"), **out.pop("provenance"), **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        schema = data.get("schema") if isinstance(data, dict) else None
        if type(schema) is not int or schema < 1:
            raise RecordError(f"manifest has no valid schema number ({str(schema)[:20]!r})")
        if schema > SCHEMA:
            raise NewerSchemaError(f"manifest has schema {schema}, newer than this toolkit reads ({SCHEMA}) — "
                                   "update the toolkit (git pull) to read this run")
        return build(cls, data, "manifest", provenance=build(Provenance, data, "manifest"))


# --- reading a JSONL file of records -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Loaded(Generic[R]):
    records: list[R]
    warnings: list[str]  # one line per kind of damage skipped (torn last line, unreadable lines, wrong shape)


def read_records(path: Path, parse: Callable[[dict[str, Any]], R], shown_as: str | None = None) -> Loaded[R]:
    """Every record of a JSONL file that `parse` accepts; what was skipped is reported, naming the file
    (`shown_as`: the name to use in those lines, e.g. the run-relative path)."""
    read = files.read_jsonl(path)
    name = Path(shown_as or path)
    records: list[R] = []
    rejected: list[str] = []
    for row in read.rows:
        try:
            records.append(parse(row))
        except RecordError as exc:
            rejected.append(str(exc))
    warnings = read.warnings(name)
    if rejected:
        warnings.append(f"{name}: {len(rejected)} line(s) skipped, not the records run_bench.py writes "
                        f"(first: {rejected[0]})")
    return Loaded(records, warnings)


def append_records(path: Path, records: Sequence[Record]) -> None:
    """Append records as whole JSONL lines (files.append_jsonl: fsynced, a torn last line closed first)."""
    files.append_jsonl(path, [r.to_dict() for r in records])
