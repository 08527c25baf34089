"""The results store of one benchmark run: $RESULTS_DIR/bench/<run_id>/, written as llmhost.bench.records.

    manifest.json             Manifest: run metadata, provenance + the plan (written atomically, first; rewritten
                              whole when adaptive repeats join the plan, before they run)
    points.jsonl              PointRecord: one line per finished attempt of a point
    requests/<point_id>.jsonl RequestRecord: one line per request of the point's latest attempt
    telemetry.jsonl           TelemetrySample: /metrics + GPU samples (llmhost/bench/telemetry.py)
    toolcalls.jsonl           ToolCallCase / ToolCallSkipped (llmhost/bench/toolcalls.py)
    servers/<arm>.json        ServerRecord: each arm's exact launch command, full /server_info and decode
    startups.jsonl            StartupRecord: one line per restart of a --startup run (no points, no telemetry)
    sittings.jsonl            llmhost.bench.sittings: each invocation's span, the boots it paid, the ETAs it printed

    stream_requests.jsonl     StreamRequestRecord: one line per measured request of a --single-stream run
    stream_arms.jsonl         StreamArmRecord: one line per arm of a --single-stream run
    stream_kernels.jsonl      StreamKernelRecord: its GPU kernels per forward pass, one line per arm
    point_kernels.jsonl       PointKernelRecord: --kernel-profile's GPU kernels per forward pass under a load
    raw/                      bench_serving's own output, start-time records and logs, per attempt

Every write goes through llmhost.files: JSON files are replaced atomically, JSONL lines are appended whole and
fsynced (a torn last line is closed off first), so a run killed at any instant resumes (`run_bench.py --resume
DIR`) without losing a recorded point.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from llmhost import files
from llmhost.bench import records
from llmhost.bench.records import Manifest, PointRecord, RecordError, RequestRecord, ServerRecord, TelemetrySample
from llmhost.bench.stream_records import PointKernelRecord, StreamArmRecord, StreamKernelRecord, StreamRequestRecord
from llmhost.provenance import redact_secrets


def redact_jsonl(path: Path) -> None:
    """Rewrite a JSONL file (atomically) with secrets redacted on every line (unreadable lines are dropped);
    absent file: nothing to do. bench_serving copies /server_info, API key included, into its output."""
    if path.is_file():  # its NaN values stay as bench_serving wrote them: this is its file, not one of our records
        rows = files.read_jsonl(path).rows
        files.write_text_atomic(path, "".join(json.dumps(redact_secrets(row)) + "\n" for row in rows))


def read_manifest(file: Path) -> Manifest:
    """manifest.json as a Manifest, or RecordError with one line naming the file, the damage and the way on."""
    fresh = "start a new run with ./run_bench.py (the plan of this one is lost with its manifest)"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{file} is missing — pass a run directory of run_bench.py (results/bench/<run_id>)") \
            from None
    except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise RecordError(f"{file} is not readable JSON ({exc}) — {fresh}") from None
    try:
        return Manifest.from_dict(data)
    except records.NewerSchemaError as exc:
        raise RecordError(f"{file}: {exc}") from None
    except RecordError as exc:
        raise RecordError(f"{file} is not a manifest run_bench.py wrote ({exc}) — {fresh}") from None


def new_run_id(tag: str = "", now: float | None = None) -> str:
    """UTC YYYYmmdd-HHMMSS plus an optional -tag."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{tag}" if tag else stamp


class RunStore:
    """One run directory; all writes go through here."""

    def __init__(self, root: Path):
        self.root = root
        self.is_latest = False  # set once `latest` points here (a run that recorded nothing leaves it alone)
        self.points_path = root / "points.jsonl"
        self.telemetry_path = root / "telemetry.jsonl"
        self.toolcalls_path = root / "toolcalls.jsonl"
        self.sittings_path = root / "sittings.jsonl"

    @classmethod
    def create(cls, results_dir: Path, tag: str = "") -> "RunStore":
        """A fresh run directory (a second one in the same second gets a numeric suffix)."""
        bench = results_dir / "bench"
        bench.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id(tag)
        root, n = bench / run_id, 1
        while True:
            try:
                root.mkdir()
                break
            except FileExistsError:
                n += 1
                root = bench / f"{run_id}.{n}"
        return cls(root)  # `latest` moves to it with its first point record, not before

    @property
    def run_id(self) -> str:
        return self.root.name

    def point_latest(self) -> None:
        """Make $RESULTS_DIR/bench/latest point at this run (relative link, replaced atomically)."""
        link = self.root.parent / "latest"
        tmp = self.root.parent / f".latest.{os.getpid()}"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(self.root.name)
        os.replace(tmp, link)

    def write_manifest(self, manifest: Manifest) -> None:
        files.write_json_atomic(self.root / "manifest.json", manifest.to_dict())

    def read_manifest(self) -> Manifest:
        """The run's manifest (run_bench.py --resume and the dashboard read it alike); RecordError, one line, when
        it is missing, damaged or written by a newer toolkit."""
        return read_manifest(self.root / "manifest.json")

    def add_adaptive_repeats(self, extra: list[records.Point]) -> None:
        """Adaptive repeats join the manifest's plan before they run, so a --resume after a kill runs those not
        finished and the dashboard counts them as planned."""
        manifest = self.read_manifest()
        known = {p.point_id for p in manifest.plan}
        new = tuple(p for p in extra if p.point_id not in known)
        if new:
            self.write_manifest(dataclasses.replace(
                manifest, plan=manifest.plan + new,
                adaptive_repeats=manifest.adaptive_repeats + tuple(p.point_id for p in new)))

    def raw_dir(self) -> Path:
        path = self.root / "raw"
        try:
            path.mkdir(exist_ok=True)
        except OSError as err:
            raise files.write_error(path, err) from err
        return path

    def write_requests(self, point_id: str, rows: list[RequestRecord]) -> str:
        """The requests file of a point's latest attempt (replaced whole); returns its run-relative path."""
        rel = f"requests/{point_id}.jsonl"
        files.write_jsonl_atomic(self.root / rel, [r.to_dict() for r in rows])
        return rel

    def append_point(self, record: PointRecord) -> None:
        """Append one attempt; the first one recorded moves `latest` here."""
        records.append_records(self.points_path, [record])
        if not self.is_latest:
            self.point_latest()
            self.is_latest = True

    def append_telemetry(self, samples: list[TelemetrySample]) -> None:
        records.append_records(self.telemetry_path, samples)

    def append_toolcalls(self, rows: list[records.ToolCallCase | records.ToolCallSkipped]) -> None:
        records.append_records(self.toolcalls_path, rows)

    def append_startup(self, record: records.StartupRecord) -> None:
        records.append_records(self.root / "startups.jsonl", [record])

    def append_sitting(self, record: records.Record) -> None:
        records.append_records(self.sittings_path, [record])

    def append_stream(self, record: StreamRequestRecord | StreamArmRecord | StreamKernelRecord) -> None:
        """A --single-stream record, to stream_requests.jsonl, stream_arms.jsonl or stream_kernels.jsonl by its
        type."""
        name = "stream_arms.jsonl" if isinstance(record, StreamArmRecord) else \
            "stream_kernels.jsonl" if isinstance(record, StreamKernelRecord) else "stream_requests.jsonl"
        records.append_records(self.root / name, [record])

    def append_point_kernels(self, record: PointKernelRecord) -> None:
        records.append_records(self.root / "point_kernels.jsonl", [record])

    def read_point_kernels(self) -> records.Loaded[PointKernelRecord]:
        return records.read_records(self.root / "point_kernels.jsonl", PointKernelRecord.from_dict,
                                    shown_as="point_kernels.jsonl")

    def read_stream_kernels(self) -> records.Loaded[StreamKernelRecord]:
        return records.read_records(self.root / "stream_kernels.jsonl", StreamKernelRecord.from_dict,
                                    shown_as="stream_kernels.jsonl")

    def read_stream_arms(self) -> records.Loaded[StreamArmRecord]:
        return records.read_records(self.root / "stream_arms.jsonl", StreamArmRecord.from_dict,
                                    shown_as="stream_arms.jsonl")

    def write_server(self, record: ServerRecord) -> None:
        files.write_json_atomic(self.root / "servers" / f"{record.arm}.json", record.to_dict())

    def read_points(self) -> records.Loaded[PointRecord]:
        """Every recorded attempt, and one line per kind of damage skipped (a torn last line: a crash mid-write)."""
        return records.read_records(self.points_path, PointRecord.from_dict, shown_as="points.jsonl")

    def latest_attempts(self) -> dict[str, PointRecord]:
        """point_id -> its latest recorded attempt (a damaged line is skipped: that point runs again)."""
        return {r.point_id: r for r in self.read_points().records}

    def done_points(self, only_missing: bool = False) -> set[str]:
        """Points needing no more work: latest attempt ok. only_missing (the old --resume): also those that
        failed on their retry (attempt >= 2), so only points never finished run again."""
        return {pid for pid, r in self.latest_attempts().items()
                if r.status == "ok" or (only_missing and r.attempt >= 2)}

    def toolcall_arms(self) -> set[str]:
        """Arms whose tool-call check is already recorded (resume does not repeat it)."""
        return {r.arm for r in records.read_records(self.toolcalls_path, records.toolcall_from_dict).records}


def resume_lines(run: RunStore, plan: list[records.Point], only_missing: bool) -> list[str]:
    """What `--resume` will do, said before it does it: points kept, retried, run for the first time, and the
    damage it found (a torn last line is skipped by readers and closed off before the next record)."""
    loaded = run.read_points()
    latest = {r.point_id: r for r in loaded.records}
    ok = [p.point_id for p in plan if p.point_id in latest and latest[p.point_id].status == "ok"]
    failed = [p.point_id for p in plan if p.point_id in latest and latest[p.point_id].status != "ok"]
    missing = len(plan) - len(ok) - len(failed)
    retried = [pid for pid in failed if not (only_missing and latest[pid].attempt >= 2)]
    kept_failed = len(failed) - len(retried)
    again = f" (tried again: {', '.join(retried[:3])}{' ...' if len(retried) > 3 else ''})" if retried else ""
    lines = [f"resume: {len(ok)} of {len(plan)} points ok (kept), {len(retried)} failed{again}, {missing} not yet run"
             + (f", {kept_failed} failed on their retry (kept failed: --only-missing)" if kept_failed else "")]
    lines += [f"warning: {w}" for w in loaded.warnings]
    for path in (run.telemetry_path, run.toolcalls_path):
        if files.has_torn_tail(path):
            lines.append(f"warning: {path.name}: a torn last line (a crash mid-write) is skipped by readers and "
                         "closed off before the next record")
    return lines
