"""Telemetry sampler: SGLang /metrics and GPU counters once a second, on one clock, into telemetry.jsonl.

Each tick stamps one `time.time()` (the clock the per-request start times use) on every sample it writes
(llmhost.bench.records.TelemetrySample):
    source "metrics": name "sglang:num_running_reqs", ..., labels as SGLang exports them, plus {"worker": "worker0"}
                      when the samples are one of several workers' behind the router (see scrape_targets)
    source "gpu":     name "gpu_util_pct" | "gpu_mem_used_gb" | "gpu_power_w" | "gpu_sm_clock_mhz", labels {"gpu": "0"}
    source "client":  name "loadgen_cpu_pct": the load generator's CPU use since the last tick, % of one core (one
                      Python process streams every request of a point: near 100% it, not the server, sets the pace)
Only the live-state series below are kept (the full exposition is ~390 samples, ~100 MB an hour at 1 Hz).
sglang-router does not serve SGLang's /metrics, so under ROUTER=on each worker is scraped itself (the runner names
them after every server restart, from the layout start recorded). GPU counters cover every GPU of the host, labelled
by its NVML index (= nvidia-smi's, the numbering GPUS uses), so every GPU of any layout is sampled; they come from NVML
(nvidia-ml-py) and fall back to `nvidia-smi`; without either, only metrics are written.
A write that fails (disk full for a moment) does not stop sampling: the next write that works adds a source "gap"
sample (name telemetry_gap_s, value = seconds lost, labels {"error": ...}), and run_bench.py ends with a warning.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

from llmhost import nvidia
from llmhost.bench.records import TelemetrySample
from llmhost.files import WriteError
from llmhost.serve import metrics, procfs
from llmhost.serve.endpoints import ServerClient
from llmhost.serve.router import LOCAL_HOST

METRICS_KEPT = (
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
    "sglang:gen_throughput", "sglang:kv_used_tokens", "sglang:kv_available_tokens", "sglang:kv_evictable_tokens",
    "sglang:max_total_num_tokens", "sglang:num_retracted_reqs", "sglang:utilization",
    "sglang:prompt_tokens_total", "sglang:cached_tokens_total", "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_count",
    "sglang:inter_token_latency_seconds_sum", "sglang:inter_token_latency_seconds_count",
    "sglang:queue_time_seconds_sum", "sglang:queue_time_seconds_count",
    "sglang:per_stage_req_latency_seconds_sum", "sglang:per_stage_req_latency_seconds_count",
    "sglang:cuda_graph_passes_total",  # one per prefill batch (mode prefill_*): how arrivals were batched
)
SMI_FIELDS = (("utilization.gpu", "gpu_util_pct", 1.0), ("memory.used", "gpu_mem_used_gb", 1 / 1024),
              ("power.draw", "gpu_power_w", 1.0), ("clocks.sm", "gpu_sm_clock_mhz", 1.0))


def metric_rows(text: str, t: float, point_id: str | None, worker: str = "") -> list[TelemetrySample]:
    """Samples of the kept series of one /metrics scrape; `worker` (when not '') added to their labels."""
    extra = {"worker": worker} if worker else {}
    return [TelemetrySample(t, "metrics", s.name, {**s.labels, **extra}, s.value, point_id)
            for s in metrics.parse(text) if s.name in METRICS_KEPT and math.isfinite(s.value)]  # NaN is not JSON


def scrape_targets(layout: Sequence[Mapping], base_url: str, worker_urls: Sequence[str]) -> list[tuple[str, str]]:
    """(worker label, URL) of every SGLang /metrics to scrape for a server layout (llmhost.serve.service.layout):
    behind the router, each local worker on its loopback port by its name, or, with none local, each of WORKER_URLS
    by its host:port; otherwise the one server at base_url, unlabelled (its samples as SGLang exports them)."""
    if not any(m.get("name") == "router" for m in layout):
        return [("", base_url)]
    local = [(m["name"], f"http://{LOCAL_HOST}:{m['port']}") for m in layout if m.get("name") != "router"]
    return local or [(urlsplit(url).netloc or url, url) for url in worker_urls]


def smi_rows(csv_text: str, t: float, point_id: str | None) -> list[TelemetrySample]:
    """Rows from `nvidia-smi --query-gpu=index,<SMI_FIELDS> --format=csv,noheader,nounits` output."""
    rows = []
    for line in csv_text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 1 + len(SMI_FIELDS):
            continue
        for cell, (_, name, scale) in zip(cells[1:], SMI_FIELDS):
            try:
                value = float(cell) * scale
            except ValueError:  # "[N/A]" (e.g. power on some boards)
                continue
            rows.append(TelemetrySample(t, "gpu", name, {"gpu": cells[0]}, value, point_id))
    return rows


def nvml_reader(pynvml) -> Callable[[float, str | None], list[TelemetrySample]]:
    """Every GPU's counters through NVML, labelled by index; a counter the board lacks is skipped, like "[N/A]"."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    readers = {"gpu_util_pct": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
               "gpu_mem_used_gb": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30,
               "gpu_power_w": lambda h: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
               "gpu_sm_clock_mhz": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)}

    def read(t: float, point_id: str | None) -> list[TelemetrySample]:
        rows = []
        for i, h in enumerate(handles):
            for name, counter in readers.items():
                try:
                    value = float(counter(h))
                except pynvml.NVMLError:  # e.g. power Not Supported on some boards
                    continue
                rows.append(TelemetrySample(t, "gpu", name, {"gpu": str(i)}, value, point_id))
        return rows

    return read


def gpu_reader() -> Callable[[float, str | None], list[TelemetrySample]]:
    """The best available GPU counter source: NVML, else nvidia-smi, else nothing (llmhost.nvidia's rule)."""
    pynvml = nvidia.nvml()
    if pynvml is not None:
        try:
            return nvml_reader(pynvml)
        except Exception:  # noqa: BLE001 - a driver that cannot list its devices: try the CLI
            pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return lambda t, point_id: []
    query = ",".join(["index", *(f for f, _, _ in SMI_FIELDS)])

    def smi(t: float, point_id: str | None) -> list[TelemetrySample]:
        try:
            out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5, check=True).stdout
        except (subprocess.SubprocessError, OSError):
            return []
        return smi_rows(out, t, point_id)

    return smi


GAP_NAME = "telemetry_gap_s"
CLIENT_CPU = "loadgen_cpu_pct"


class ClientCpu:
    """The load generator's CPU use per tick, from /proc: `pid()` names the process now (None: none running; a new
    PID, e.g. a fresh process after a point was killed at its limit, starts a new baseline)."""

    def __init__(self, pid: Callable[[], int | None]):
        self.pid = pid
        self._last: tuple[int, float, float] | None = None  # pid, unix s, cpu s

    def read(self, t: float, point_id: str | None) -> list[TelemetrySample]:
        pid = self.pid()
        cpu = procfs.cpu_seconds(pid) if pid else None
        last, self._last = self._last, (pid, t, cpu) if pid and cpu is not None else None
        if self._last is None or last is None or last[0] != pid or t <= last[1]:
            return []
        return [TelemetrySample(t, "client", CLIENT_CPU, {}, 100.0 * (cpu - last[2]) / (t - last[1]), point_id)]


@dataclasses.dataclass(frozen=True, slots=True)
class Gap:
    """Unix seconds [start, end) whose samples could not be written, and why."""

    start: float
    end: float
    error: str


class Sampler:
    """Background thread: every interval_s, scrape /metrics (of each target) + GPU and hand the rows to `sink`."""

    def __init__(self, base_url: str, sink: Callable[[list[TelemetrySample]], None], api_key: str | None = None,
                 interval_s: float = 1.0):
        self.sink, self.interval_s, self._api_key = sink, interval_s, api_key
        self._targets: tuple[tuple[str, ServerClient], ...] = ()
        self.scrape([("", base_url)])
        self.point_id: str | None = None  # set by the runner; rows carry the point running at sample time
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self.gaps: list[Gap] = []  # closed gaps: telemetry that could not be written
        self._gap_open: tuple[float, str] | None = None  # (start, error) while writes fail
        self._gpu: Callable[[float, str | None], list[TelemetrySample]] = lambda t, p: []
        self._client: ClientCpu | None = None

    def scrape(self, targets: Sequence[tuple[str, str]]) -> None:
        """From the next tick on, scrape these (worker label, URL) (scrape_targets: after each server restart)."""
        # clients of its own: the runner's thread has its own connections; one assignment, so a tick sees old or new
        self._targets = tuple((worker, ServerClient(url, self._api_key)) for worker, url in targets)

    def watch_client(self, pid: Callable[[], int | None] | None) -> None:
        """From the next tick on, sample the CPU use of the process `pid()` names (the boot's load generator);
        None: stop."""
        self._client = ClientCpu(pid) if pid else None

    def start(self) -> "Sampler":
        self._gpu = gpu_reader()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample_once(self) -> list[TelemetrySample]:
        t, point_id = time.time(), self.point_id
        rows: list[TelemetrySample] = []
        for worker, client in self._targets:
            scrape = client.metrics(timeout=2.0)
            if scrape.ok:
                try:
                    rows += metric_rows(scrape.text, t, point_id, worker)
                except metrics.MetricsError:
                    pass  # a garbled scrape is a missing sample, not a failed run
        rows += self._gpu(t, point_id)
        client = self._client
        return rows + client.read(t, point_id) if client else rows

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._write(self.sample_once())
            self.ticks += 1
            next_t += self.interval_s  # fixed ticks: a slow scrape does not push the schedule back
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        if self._gap_open is not None:  # still failing at the end: the gap is known, if not written
            self.gaps.append(Gap(self._gap_open[0], time.time(), self._gap_open[1]))

    def _write(self, rows: list[TelemetrySample]) -> None:
        """Hand rows to the sink; a write failure (disk full for a moment) opens a gap instead of ending the thread,
        and the first write that works again records the gap as a sample, so the hole is data, not a mystery."""
        now = time.time()
        if self._gap_open is not None:
            start, error = self._gap_open
            rows = [TelemetrySample(start, "gap", GAP_NAME, {"error": error[:200]}, now - start, None), *rows]
        try:
            self.sink(rows)
        except WriteError as exc:
            if self._gap_open is None:
                print(f"[bench] warning: telemetry not written ({exc}) — sampling on; the gap is recorded",
                      file=sys.stderr, flush=True)
                self._gap_open = (now, str(exc))
            return
        if self._gap_open is not None:
            self.gaps.append(Gap(self._gap_open[0], now, self._gap_open[1]))
            self._gap_open = None

    def gap_warning(self) -> str | None:
        """The closing warning of a run whose telemetry has holes; None when it has none."""
        if not self.gaps:
            return None
        lost_s = sum(g.end - g.start for g in self.gaps)
        return (f"telemetry has {len(self.gaps)} gap(s), {lost_s:.0f} s not recorded (first: {self.gaps[0].error}) "
                "— the points' own request data is complete")
