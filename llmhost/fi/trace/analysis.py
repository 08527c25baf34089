"""Pure analysis of traced FlashInfer page tables: how many requests share a batch, how much of their KV is shared
(the radix prefix cache at work), how fragmented their physical pages are, and how all that moves over time.

Per sampled batch (CSR page table: indptr[b]..indptr[b+1] are request b's pages in `indices`):
  sharing_ratio     references to pages that >= 2 requests of the batch read / all references
  dedup_ratio       1 - distinct pages / references (KV reads a shared-prefix kernel could skip)
  mean_run_len      references / runs, a run being consecutive physical pages p, p+1, ... of one request
  contiguous_pairs  neighbouring pages of a request that are physically adjacent / all neighbour pairs
CUDA-graph decode batches are padded to a captured size with dummy requests of KV length 1 (SGLang's seq-len fill
value); a real decode request always has >= 2 tokens (prompt + the token being decoded), so length-1 requests of
graph steps are counted as padding and left out. numpy only; `fi_trace.py analyze` writes the result as trace.json.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmhost.stats import percentile

ARRAYS = ("indptr", "last_page_len", "req_pool_indices", "qo_indptr", "indices")
MAX_BATCH_ROWS = 4000


class TraceFormatError(ValueError):
    """A trace directory without usable shards; the message is one line."""


@dataclass(frozen=True, slots=True)
class Sample:
    meta: dict[str, Any]
    indptr: np.ndarray
    indices: np.ndarray
    qo_indptr: np.ndarray
    req_pool_indices: np.ndarray
    last_page_len: np.ndarray


def read_shard(path: Path) -> list[Sample]:
    """Unpack one shard written by llmhost/fi/trace.py (concatenated arrays + offsets + JSON metas)."""
    with np.load(path) as npz:
        metas = json.loads(npz["meta"].tobytes().decode())
        parts = {name: (npz[name], npz[f"{name}_off"]) for name in ARRAYS}
    samples = []
    for i, meta in enumerate(metas):
        arrays = {name: data[off[i]:off[i + 1]] for name, (data, off) in parts.items()}
        samples.append(Sample(meta=meta, **arrays))
    return samples


def load_trace(trace_dir: Path) -> tuple[list[Sample], list[dict[str, Any]]]:
    """All samples (sorted by time) and all per-process stats files of a trace directory."""
    shards = sorted(trace_dir.glob("shard-*.npz"))
    stats = [read_json(p) for p in sorted(trace_dir.glob("stats-*.json"))]
    if not shards and not stats:
        raise TraceFormatError(f"{trace_dir} holds no shard-*.npz or stats-*.json (was the server started with "
                               "the hook? run ./fi_trace.py capture)")
    samples = []
    for path in shards:
        try:
            found = read_shard(path)
            found.sort(key=lambda s: s.meta["t"])  # reads every sample's time here, where the file can be named
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            raise _damaged(path, exc) from None
        samples += found
    return sorted(samples, key=lambda s: s.meta["t"]), stats


def read_json(path: Path) -> Any:
    """A JSON file of the trace directory; a damaged one is a TraceFormatError naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _damaged(path, exc) from None


def _damaged(path: Path, exc: Exception) -> TraceFormatError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return TraceFormatError(f"{path} is damaged ({reason}) — move it aside and re-run ./fi_trace.py analyze, or "
                            "capture again")


def batch_metrics(indptr: np.ndarray, indices: np.ndarray, *, page_size: int = 1,
                  drop_padding: bool = False) -> dict[str, Any]:
    """Sharing and contiguity of one CSR page table (see the module docstring for the definitions)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64) // max(1, page_size)
    lengths = np.diff(indptr)
    keep = indptr[1:] <= len(indices)  # a truncated sample: requests past the copied range are unknown
    padding = int(np.sum(keep & (lengths <= 1))) if drop_padding else 0
    if drop_padding:
        keep &= lengths > 1
    keep &= lengths > 0
    starts, lengths = indptr[:-1][keep], lengths[keep]
    refs = int(lengths.sum())
    out: dict[str, Any] = {"requests": int(keep.sum()), "padding": padding, "refs": refs,
                           "unique_pages": 0, "shared_pages": 0, "sharing_ratio": 0.0, "dedup_ratio": 0.0,
                           "runs": 0, "mean_run_len": 0.0, "contiguous_pairs": 0.0,
                           "mean_kv_len": float(lengths.mean()) if refs else 0.0,
                           "max_kv_len": int(lengths.max()) if refs else 0}
    if not refs:
        return out
    owner = np.repeat(np.arange(len(starts)), lengths)
    pos = np.arange(refs) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    pages = indices[np.repeat(starts, lengths) + pos]
    # sharing: count each (request, page) once, then pages held by >= 2 requests
    pairs = np.unique(np.stack([owner, pages]), axis=1)
    distinct, holders = np.unique(pairs[1], return_counts=True)
    shared = holders >= 2
    shared_refs = int(np.sum(holders[np.searchsorted(distinct, pages)] >= 2))
    # contiguity: a new run starts at each request's first page and wherever page != previous page + 1
    same_req = owner[1:] == owner[:-1]
    step_one = np.diff(pages) == 1
    breaks = int(np.sum(same_req & ~step_one))
    runs = len(starts) + breaks
    pairs_total = int(np.sum(same_req))
    out.update(unique_pages=int(len(distinct)), shared_pages=int(shared.sum()),
               sharing_ratio=shared_refs / refs, dedup_ratio=1.0 - len(distinct) / refs, runs=runs,
               mean_run_len=refs / runs,
               contiguous_pairs=float(np.sum(same_req & step_one)) / pairs_total if pairs_total else 1.0)
    return out


def sample_row(sample: Sample) -> dict[str, Any]:
    """One compact row per sampled batch: when, which mode, graph or eager, and its metrics."""
    meta = sample.meta
    graph_decode = meta["mode"] == "decode" and meta.get("graph", False)
    metrics = batch_metrics(sample.indptr, sample.indices, page_size=int(meta.get("page_size", 1)),
                            drop_padding=graph_decode)
    row = {"t": meta["t"], "mode": meta["mode"], "kind": meta.get("kind", "eager"), "bs": meta["bs"],
           "truncated": bool(meta.get("truncated")), **metrics}
    if len(sample.qo_indptr) > 1:
        row["new_tokens"] = int(sample.qo_indptr[-1] - sample.qo_indptr[0])
    return row


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over batches, plus reference-weighted sharing and run length (big batches count more)."""
    if not rows:
        return {"batches": 0}
    refs = np.array([r["refs"] for r in rows], dtype=float)
    weight = refs / refs.sum() if refs.sum() else np.full(len(rows), 1.0 / len(rows))

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    def weighted(key: str) -> float:
        return float(np.sum(weight * np.array([r[key] for r in rows], dtype=float)))

    return {"batches": len(rows), "mean_requests": mean("requests"),
            "p90_requests": percentile([r["requests"] for r in rows], 90),
            "mean_padding": mean("padding"), "mean_kv_len": mean("mean_kv_len"),
            "sharing_ratio": weighted("sharing_ratio"), "dedup_ratio": weighted("dedup_ratio"),
            "mean_run_len": weighted("mean_run_len"), "contiguous_pairs": weighted("contiguous_pairs"),
            "truncated": int(sum(r["truncated"] for r in rows))}


def windows(rows: list[dict[str, Any]], count: int = 12) -> list[dict[str, Any]]:
    """Split the trace into `count` equal time windows and summarize each mode in each one."""
    if not rows:
        return []
    t0, t1 = rows[0]["t"], rows[-1]["t"]
    width = max((t1 - t0) / count, 1e-9)
    out = []
    for w in range(count):
        lo, hi = t0 + w * width, t0 + (w + 1) * width
        inside = [r for r in rows if lo <= r["t"] < hi or (w == count - 1 and r["t"] == t1)]
        for mode in ("decode", "prefill"):
            picked = [r for r in inside if r["mode"] == mode]
            if picked:
                out.append({"window": w, "start_s": lo - t0, "end_s": hi - t0, "mode": mode,
                            **summarize_rows(picked)})
    return out


def merge_counters(stats: list[dict[str, Any]]) -> dict[str, int]:
    """Add up the per-process counters (one stats file per scheduler process)."""
    total: dict[str, int] = {}
    for record in stats:
        for key, value in record.get("counters", {}).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def graph_proof(counters: dict[str, int], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many decode steps the hook saw as CUDA-graph replays vs eager: the evidence it sees both paths."""
    sampled = {kind: sum(1 for r in rows if r["mode"] == "decode" and r["kind"] == kind)
               for kind in ("graph", "eager")}
    seen_graph, seen_eager = counters.get("decode_graph", 0), counters.get("decode_eager", 0)
    return {"decode_steps_graph": seen_graph, "decode_steps_eager": seen_eager,
            "decode_graph_captures": counters.get("decode_capture", 0),
            "prefill_steps": counters.get("prefill_eager", 0) + counters.get("prefill_graph", 0),
            "sampled_graph": sampled["graph"], "sampled_eager": sampled["eager"],
            "graph_share": seen_graph / (seen_graph + seen_eager) if seen_graph + seen_eager else None,
            "sees_graph_replays": seen_graph > 0}


def thin(rows: list[dict[str, Any]], limit: int = MAX_BATCH_ROWS) -> list[dict[str, Any]]:
    """At most `limit` rows, evenly spaced, so trace.json stays small on long captures."""
    if len(rows) <= limit:
        return rows
    picks = np.linspace(0, len(rows) - 1, limit).round().astype(int)
    return [rows[i] for i in picks]


def analyze(samples: list[Sample], stats: list[dict[str, Any]], n_windows: int = 12) -> dict[str, Any]:
    """Everything trace.json holds besides the envelope (schema, created_at, env)."""
    rows = [sample_row(s) for s in samples]
    counters = merge_counters(stats)
    return {"samples": len(rows), "counters": counters, "processes": len(stats),
            "errors": [e for record in stats for e in record.get("errors", [])][:10],
            "settings": stats[0].get("settings") if stats else None,
            "duration_s": rows[-1]["t"] - rows[0]["t"] if rows else 0.0,
            "graph_proof": graph_proof(counters, rows),
            "summary": {mode: summarize_rows([r for r in rows if r["mode"] == mode])
                        for mode in ("decode", "prefill")},
            "windows": windows(rows, n_windows), "batches": thin(rows)}
