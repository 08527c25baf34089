"""In-server tracer of FlashInfer's paged-KV page tables (loaded into SGLang only via llmhost/fi/trace/sitehook).

What it records, every Nth attention-metadata step: kv_indptr, kv_indices, kv_last_page_len, req_pool_indices (and
qo_indptr for prefill), batch size, forward mode, whether the step was a CUDA-graph replay, and a timestamp.
Where: SGLang builds these arrays in FlashInferIndicesUpdaterDecode/Prefill.call_begin_forward, for eager steps
(init_forward_metadata) and for CUDA-graph replays alike (init_forward_metadata_out_graph, where the wrappers'
begin_forward is a per-instance partial(fast_decode_plan)). Patching the wrapper classes' plan() would miss the
replays; patching call_begin_forward on the updater classes sees both, after the indices are written.
How, without stalling the scheduler: the step is only counted unless it is sampled; a sample is an async D2H copy
into a free pinned staging buffer followed by a CUDA event, and a background thread waits on the event and writes
compressed .npz shards + a stats JSON. No free buffer = the sample is dropped and counted (`dropped_busy`).

Settings (environment of the server): LLMHOST_FI_TRACE_DIR (required; output dir), LLMHOST_FI_TRACE_EVERY (sample
every Nth step per mode, default 4), LLMHOST_FI_TRACE_MAX_BYTES (staging bytes per sample, default 4 MiB; longer
index arrays are truncated and marked), LLMHOST_FI_TRACE_SLOTS (staging buffers, default 8). Creating
<dir>/STOP stops sampling and flushes. While <dir>/PAUSE exists the patched function calls straight through (one
attribute test per step: nothing counted, nothing copied) — the "tracer off" arm of the overhead measurement; the
writer thread looks for the file every flush (2 s) and reports the state as "paused" in the stats file.
Files: <dir>/shard-<pid>-<n>.npz, <dir>/stats-<pid>.json.
"""
from __future__ import annotations

import atexit
import collections
import functools
import importlib.abc
import inspect
import io
import json
import os
import queue
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from llmhost import files  # stdlib only: safe to load inside the server

TARGET_MODULE = "sglang.srt.layers.attention.flashinfer_backend"
UPDATERS = {"FlashInferIndicesUpdaterDecode": "decode", "FlashInferIndicesUpdaterPrefill": "prefill"}
# Small arrays first: when a sample exceeds the staging buffer only the tail of `indices` is cut.
ARRAY_ORDER = ("indptr", "last_page_len", "req_pool_indices", "qo_indptr", "indices")


@dataclass(frozen=True, slots=True)
class TraceSettings:
    trace_dir: str
    every: int = 4
    max_bytes: int = 4 * 2**20
    slots: int = 8
    shard_samples: int = 64
    flush_s: float = 2.0

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ) -> TraceSettings | None:
        trace_dir = env.get("LLMHOST_FI_TRACE_DIR", "")
        if not trace_dir:
            return None
        return cls(trace_dir=trace_dir, every=max(1, int(env.get("LLMHOST_FI_TRACE_EVERY", "4"))),
                   max_bytes=max(4096, int(env.get("LLMHOST_FI_TRACE_MAX_BYTES", str(4 * 2**20)))),
                   slots=max(1, int(env.get("LLMHOST_FI_TRACE_SLOTS", "8"))))


def _is_torch(array: Any) -> bool:
    return hasattr(array, "is_cuda") and hasattr(array, "dtype")


class Stager:
    """A fixed set of int32 staging buffers (pinned host memory for CUDA sources, plain numpy otherwise)."""

    def __init__(self, slots: int, capacity: int, pinned: bool) -> None:
        self.capacity = capacity
        if pinned:
            import torch

            self._free = collections.deque(torch.empty(capacity, dtype=torch.int32, pin_memory=True)
                                           for _ in range(slots))
        else:
            import numpy as np

            self._free = collections.deque(np.empty(capacity, dtype=np.int32) for _ in range(slots))
        self._lock = threading.Lock()

    def acquire(self) -> Any | None:
        with self._lock:
            return self._free.popleft() if self._free else None

    def release(self, buf: Any) -> None:
        with self._lock:
            self._free.append(buf)

    def copy_into(self, buf: Any, arrays: dict[str, Any]) -> tuple[dict[str, tuple[int, int]], Callable[[], Any]]:
        """Enqueue copies of `arrays` into buf; returns {name: (offset, length)} and a wait-until-copied function."""
        layout, offset = {}, 0
        cuda = False
        for name in ARRAY_ORDER:
            if name not in arrays:
                continue
            src = arrays[name]
            count = min(len(src), self.capacity - offset)
            if _is_torch(src):
                import torch

                part = src[:count]
                part = part if part.dtype == torch.int32 else part.to(torch.int32)
                buf[offset:offset + count].copy_(part, non_blocking=True)
                cuda = cuda or part.is_cuda
            else:
                buf[offset:offset + count] = src[:count]
            layout[name] = (offset, count)
            offset += count
        if not cuda:
            return layout, lambda: None
        import torch

        event = torch.cuda.Event()
        event.record()
        return layout, event.synchronize


class Recorder:
    """Counts every planned step, samples every Nth per mode, and owns the writer thread."""

    def __init__(self, settings: TraceSettings) -> None:
        self.settings = settings
        self.dir = Path(settings.trace_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.counters: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self.patched: list[str] = []
        self.active = True
        self.paused = (self.dir / "PAUSE").exists()
        self._stager: Stager | None = None
        self._lock = threading.Lock()
        self._pending: queue.Queue = queue.Queue()
        self._shard: list[tuple[dict, dict]] = []
        self._shard_no = 0
        self._thread: threading.Thread | None = None
        self._thread_pid = 0

    # ---- forward thread
    def count(self, key: str) -> int:
        with self._lock:
            self.counters[key] += 1
            return self.counters[key]

    def observe(self, meta: dict[str, Any], arrays: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
        """Called after each plan: count it, and maybe stage a copy of its index arrays (built only if sampled)."""
        mode = meta["mode"]
        kind = "capture" if meta["graph"] and not meta["fast_plan"] and mode == "decode" else (
            "graph" if meta["graph"] else "eager")
        seen = self.count(f"{mode}_{kind}")
        if not self.active or kind == "capture" or meta.get("spec"):
            return  # capture-time plans are dummy batches; speculative layouts are out of scope
        if (seen - 1) % self.settings.every:
            return
        arrays = arrays() if callable(arrays) else arrays
        first = next(iter(arrays.values()))
        if _is_torch(first) and first.is_cuda:
            import torch

            if torch.cuda.is_current_stream_capturing():
                self.count("skipped_capturing")
                return
        if self._stager is None:
            self._stager = Stager(self.settings.slots, self.settings.max_bytes // 4, pinned=_is_torch(first))
        buf = self._stager.acquire()
        if buf is None:
            self.count("dropped_busy")
            return
        layout, wait = self._stager.copy_into(buf, arrays)
        meta = {**meta, "kind": kind, "step": seen, "t": time.time(),
                "truncated": layout["indices"][1] < len(arrays["indices"])}
        self.count("sampled")
        self._pending.put((buf, layout, wait, meta))
        if self._thread is not None and self._thread_pid != os.getpid():
            self.start()  # a forked child inherits the patch but not the writer thread

    # ---- writer thread
    def start(self) -> None:
        if self._thread is None or self._thread_pid != os.getpid():
            if self._thread is None:  # once per recorder: a forked child gets its own writer at once
                os.register_at_fork(after_in_child=self._after_fork)
            self._thread_pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="llmhost-fi-trace", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    def _after_fork(self) -> None:
        """In a forked child: fresh locks and queue (the parent's may have been held at the fork), a new writer.
        Without it a paused tracer — which never reaches observe() — would never write the child's stats."""
        self._lock = threading.Lock()
        self._pending = queue.Queue()
        if self._stager is not None:
            self._stager._lock = threading.Lock()
        self.start()

    def close(self) -> None:
        """At interpreter exit: collect what is staged and write it (a SIGKILL loses at most flush_s of samples)."""
        self.drain()
        self.flush()

    def drain(self, timeout_s: float = 0.0) -> int:
        """Collect every staged sample (waiting up to timeout_s for the first one); returns how many."""
        done = 0
        while True:
            try:
                item = self._pending.get(timeout=timeout_s) if timeout_s and not done else self._pending.get_nowait()
            except queue.Empty:
                return done
            self._collect(*item)
            done += 1

    def _run(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                self.drain(self.settings.flush_s)
                if (self.dir / "STOP").exists() and self.active:
                    self.active = False
                self.paused = (self.dir / "PAUSE").exists()
                if len(self._shard) >= self.settings.shard_samples or time.monotonic() - last_flush >= \
                        self.settings.flush_s:
                    self.flush()
                    last_flush = time.monotonic()
            except Exception as exc:  # e.g. a full disk: stop sampling, keep the server and report why
                self.active = False
                if len(self.errors) < 5:
                    self.errors.append(f"writer: {type(exc).__name__}: {exc}")
                time.sleep(self.settings.flush_s)

    def _collect(self, buf: Any, layout: dict, wait: Callable[[], Any], meta: dict) -> None:
        import numpy as np

        wait()
        host = buf.numpy() if _is_torch(buf) else buf
        arrays = {name: np.array(host[off:off + n], dtype=np.int32) for name, (off, n) in layout.items()}
        assert self._stager is not None
        self._stager.release(buf)
        with self._lock:
            self._shard.append((meta, arrays))

    def flush(self) -> None:
        """Write the collected samples as one shard and rewrite the stats file."""
        with self._lock:
            samples, self._shard = self._shard, []
            if samples:
                self._shard_no += 1
            shard_no = self._shard_no
        if samples:
            files.write_bytes_atomic(self.dir / f"shard-{os.getpid()}-{shard_no:05d}.npz", pack_shard(samples))
            self.count("written")
        stats = json.dumps(self.stats(), indent=1).encode()
        files.write_bytes_atomic(self.dir / f"stats-{os.getpid()}.json", stats)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counters = dict(self.counters)
        return {"pid": os.getpid(), "settings": asdict(self.settings), "counters": counters, "shards": self._shard_no,
                "patched": self.patched, "errors": self.errors[:5], "stopped": not self.active, "paused": self.paused,
                "updated_at": time.time()}


def pack_shard(samples: list[tuple[dict, dict]]) -> bytes:
    """One .npz: per array name the samples concatenated + offsets, and the metas as JSON bytes."""
    import numpy as np

    out: dict[str, Any] = {"meta": np.frombuffer(json.dumps([m for m, _ in samples]).encode(), dtype=np.uint8)}
    for name in ARRAY_ORDER:
        parts = [arrays.get(name, np.zeros(0, np.int32)) for _, arrays in samples]
        out[name] = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        out[f"{name}_off"] = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
    handle = io.BytesIO()
    np.savez_compressed(handle, **out)
    return handle.getvalue()


# ------------------------------------------------------------------------------------------------ the patch
def _uses_fast_plan(wrapper: Any) -> bool:
    func = getattr(getattr(wrapper, "begin_forward", None), "func", None)
    return getattr(func, "__name__", "") in ("fast_decode_plan", "fast_prefill_plan")


def extract_decode(updater: Any, a: dict[str, Any]) -> tuple[dict, Callable[[], dict]]:
    """Meta + index arrays of a decode plan; indptr was cumsum'ed in place into the kv_indptr argument."""
    wrapper = a["wrapper"]
    bs = len(a["req_pool_indices"])
    count = min(int(a["paged_kernel_lens_sum"]), len(wrapper._paged_kv_indices_buf))
    meta = {"mode": "decode", "bs": bs, "graph": bool(getattr(wrapper, "is_cuda_graph_enabled", False)),
            "fast_plan": _uses_fast_plan(wrapper), "spec": a.get("spec_info") is not None,
            "page_size": 1,  # SGLang plans FlashInfer with page_size 1 (req_to_token holds token slots)
            "pool_page_size": int(getattr(getattr(updater, "attn_backend", None), "page_size", 1) or 1)}
    return meta, lambda: {"indptr": a["kv_indptr"][:bs + 1], "indices": wrapper._paged_kv_indices_buf[:count],
                          "last_page_len": updater.kv_last_page_len[:bs],
                          "req_pool_indices": a["req_pool_indices"][:bs]}


def extract_prefill(updater: Any, a: dict[str, Any]) -> tuple[dict, Callable[[], dict]]:
    """Meta + index arrays of a prefill plan (with ragged prefill the paged part is the cached prefix only)."""
    wrapper = a["wrapper_paged"]
    bs = len(a["seq_lens"])
    count = min(int(a["paged_kernel_lens_sum"]), len(wrapper._paged_kv_indices_buf))
    meta = {"mode": "prefill", "bs": bs, "graph": bool(getattr(wrapper, "is_cuda_graph_enabled", False)),
            "fast_plan": _uses_fast_plan(wrapper), "spec": a.get("spec_info") is not None,
            "use_ragged": bool(a.get("use_ragged")), "page_size": 1,
            "pool_page_size": int(getattr(getattr(updater, "attn_backend", None), "page_size", 1) or 1)}
    return meta, lambda: {"indptr": a["kv_indptr"][:bs + 1], "indices": wrapper._paged_kv_indices_buf[:count],
                          "last_page_len": updater.kv_last_page_len[:bs],
                          "req_pool_indices": a["req_pool_indices"][:bs], "qo_indptr": a["qo_indptr"][:bs + 1]}


EXTRACTORS = {"decode": extract_decode, "prefill": extract_prefill}


def _wrap(original: Callable, mode: str, recorder: Recorder) -> Callable:
    signature = inspect.signature(original)
    extract = EXTRACTORS[mode]

    @functools.wraps(original)
    def call_begin_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if recorder.paused:  # the "tracer off" arm: the original call and one attribute test, nothing else
            return original(self, *args, **kwargs)
        result = original(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
            recorder.observe(*extract(self, bound))
        except Exception as exc:  # tracing must never take the server down; the error is reported in stats
            recorder.count("errors")
            if len(recorder.errors) < 5:
                recorder.errors.append(f"{mode}: {type(exc).__name__}: {exc}")
        return result

    call_begin_forward.__llmhost_traced__ = True  # type: ignore[attr-defined]
    return call_begin_forward


def patch_backend(module: Any, recorder: Recorder) -> list[str]:
    """Wrap call_begin_forward of SGLang's two indices-updater classes (idempotent); returns what was patched."""
    for cls_name, mode in UPDATERS.items():
        cls = getattr(module, cls_name, None)
        if cls is None or getattr(cls.call_begin_forward, "__llmhost_traced__", False):
            continue
        cls.call_begin_forward = _wrap(cls.call_begin_forward, mode, recorder)
        recorder.patched.append(cls_name)
    recorder.start()
    recorder.flush()  # a stats file per patched process, even before the first sample
    return recorder.patched


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, callback: Callable[[Any], Any]) -> None:
        self._inner, self._callback = inner, callback

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs `callback(module)` right after TARGET_MODULE is first imported; imports nothing itself."""

    def __init__(self, target: str, callback: Callable[[Any], Any]) -> None:
        self.target, self.callback = target, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.callback)
                return spec
        return None


def install(settings: TraceSettings) -> Recorder:
    """Patch the backend now if SGLang already imported it, else as soon as it is imported."""
    recorder = Recorder(settings)
    if TARGET_MODULE in sys.modules:
        patch_backend(sys.modules[TARGET_MODULE], recorder)
    else:
        sys.meta_path.insert(0, PatchOnImport(TARGET_MODULE, lambda module: patch_backend(module, recorder)))
    return recorder


def install_from_env() -> Recorder | None:
    """Entry used by the hook's sitecustomize: inert (returns None) unless LLMHOST_FI_TRACE_DIR is set."""
    settings = TraceSettings.from_env(os.environ)
    return install(settings) if settings else None
