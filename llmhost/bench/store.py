"""The results store of one benchmark run: $RESULTS_DIR/bench/<run_id>/ in the Phase 3 results contract.

    manifest.json             run metadata + the plan (written atomically, once, before the first point)
    points.jsonl              one line per finished attempt of a point
    requests/<point_id>.jsonl one line per request of the point's latest attempt
    telemetry.jsonl           /metrics + GPU samples (llmhost/bench/telemetry.py)
    toolcalls.jsonl           tool-call quality cases (llmhost/bench/toolcalls.py)
    servers/<arm>.json        each arm's exact launch command and full /server_info
    raw/                      bench_serving's own output, start-time records and logs, per attempt

JSON files are written tmp + os.replace; JSONL lines are appended whole with flush + fsync, and readers skip a torn
last line, so a run killed at any instant resumes (`run_bench.py --resume DIR`) without losing a recorded point.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_APPEND_LOCK = threading.Lock()  # telemetry appends from its own thread


def write_json(path: Path, data: object) -> None:
    """Atomically replace `path` with `data` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    os.replace(tmp, path)


def append_jsonl(path: Path, rows: list[dict]) -> None:
    """Append complete lines, flushed and fsynced before returning."""
    if not rows:
        return
    text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)
    with _APPEND_LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON line; a torn or garbled line (a kill mid-write) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class ManifestError(ValueError):
    """A manifest.json that neither `run_bench.py --resume` nor make_dashboard.py can use; str() is one line."""


def damaged(file: Path, why: str) -> ManifestError:
    """The one verdict on a damaged manifest, shared by --resume and the dashboard: the plan lives only there."""
    return ManifestError(f"{file} is damaged ({why}) — a run cannot be resumed or reported without its plan; "
                         "start a new run with ./run_bench.py")


def load_manifest(root: Path) -> dict:
    """The run's manifest.json, checked the one way both its readers apply (schema 1, arms and plan entries that
    name themselves); raises ManifestError."""
    file = Path(root) / "manifest.json"
    try:
        manifest = json.loads(file.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ManifestError(f"{file} cannot be read ({exc.strerror})") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise damaged(file, f"not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise damaged(file, "not a JSON object")
    if manifest.get("schema") != 1:
        raise ManifestError(f"{file} has schema {manifest.get('schema')!r}, this toolkit reads 1 — use the toolkit "
                            "version that wrote it")
    for key, needs in (("arms", "name"), ("plan", "point_id")):
        entries = manifest.get(key)
        if not isinstance(entries, list) or not all(isinstance(e, dict) and needs in e for e in entries):
            raise damaged(file, f"'{key}' is not a list of entries with a {needs}")
    return manifest


def versions(python: str) -> dict[str, str | None]:
    """Package versions of the server's Python (metadata only: no torch import) and of this toolkit."""
    code = ("import importlib.metadata as m, json\nout = {}\nfor n in ('sglang', 'flashinfer-python', 'torch'):\n"
            "    try: out[n] = m.version(n)\n    except Exception: out[n] = None\nprint(json.dumps(out))")
    try:
        found = json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60).stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        found = {}
    try:
        from importlib.metadata import version
        ours: str | None = version("llmhost")
    except Exception:  # noqa: BLE001 - a plain checkout, not installed
        ours = None
    return {"sglang": found.get("sglang"), "flashinfer": found.get("flashinfer-python"), "torch": found.get("torch"),
            "llmhost": ours}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def redact(value: object) -> object:
    """A copy with every non-empty *api_key* value replaced (SGLang's /server_info echoes its server_args)."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if "api_key" in str(k) and v else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def redact_jsonl(path: Path) -> None:
    """Rewrite a JSONL file (atomically) with redact() applied to every JSON line; absent file: nothing to do."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    out = []
    for line in lines:
        try:
            out.append(json.dumps(redact(json.loads(line))))
        except json.JSONDecodeError:
            out.append(line)  # a torn last line stays as it was
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in out))
    os.replace(tmp, path)


def new_run_id(tag: str = "", now: float | None = None) -> str:
    """UTC YYYYmmdd-HHMMSS plus an optional -tag."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{tag}" if tag else stamp


class RunStore:
    """One run directory; all writes go through here."""

    def __init__(self, root: Path):
        self.root = root
        self.points_path = root / "points.jsonl"
        self.telemetry_path = root / "telemetry.jsonl"
        self.toolcalls_path = root / "toolcalls.jsonl"

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
        store = cls(root)
        store.point_latest()
        return store

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

    def write_manifest(self, manifest: dict) -> None:
        write_json(self.root / "manifest.json", manifest)

    def read_manifest(self) -> dict:
        return load_manifest(self.root)

    def raw_dir(self) -> Path:
        path = self.root / "raw"
        path.mkdir(exist_ok=True)
        return path

    def write_requests(self, point_id: str, rows: list[dict]) -> str:
        """The requests file of a point's latest attempt (replaced whole); returns its run-relative path."""
        rel = f"requests/{point_id}.jsonl"
        path = self.root / rel
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as out:
            out.write("".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        return rel

    def append_point(self, record: dict) -> None:
        append_jsonl(self.points_path, [record])

    def write_server(self, arm: str, record: dict) -> None:
        write_json(self.root / "servers" / f"{arm}.json", record)

    def latest_attempts(self) -> dict[str, dict]:
        """point_id -> its latest recorded attempt."""
        latest: dict[str, dict] = {}
        for row in read_jsonl(self.points_path):
            latest[row["point_id"]] = row
        return latest

    def done_points(self) -> set[str]:
        """Points needing no more work: latest attempt ok, or failed on its retry (attempt >= 2)."""
        return {pid for pid, row in self.latest_attempts().items()
                if row.get("status") == "ok" or int(row.get("attempt", 1)) >= 2}

    def toolcall_arms(self) -> set[str]:
        """Arms whose tool-call check is already recorded (resume does not repeat it)."""
        return {row["arm"] for row in read_jsonl(self.toolcalls_path) if "arm" in row}
