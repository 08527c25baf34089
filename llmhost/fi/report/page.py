"""fi_report.html + fi_summary.json: the FlashInfer results as one offline page and one headline document.

Reads sparse.json, balance.json, jit.json and trace.json from the results directory (any may be missing) and never
touches a GPU or a server, so it can be rebuilt anywhere. The page opens with an environment card and a headline
table; each section (one module per stage: sparse_section, balance_section, jit_section, trace_section) explains its
mechanism with an inline SVG diagram above the measured charts and tables; a section without data says which
command produces it. The page is rendered by the toolkit's one renderer, llmhost.report.page (plotly.js inlined
once, offline, where plotly is installed).

    .venv/bin/python fi_bench.py report --out-dir results/fi
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from html import escape
from pathlib import Path

from llmhost import files
from llmhost.fi import balance, env, sparse
from llmhost.fi.report import balance_section, diagrams, jit_section, sparse_section, trace_section
from llmhost.fi.report import figures, headline
from llmhost.report import page

STAGES = ("sparse", "balance", "jit", "trace")
PRODUCE = {  # the exact command that writes each stage's JSON (defaults: MODEL_DIR / RESULTS_DIR from config.env)
    "sparse": sparse_section.COMMAND,
    "balance": balance_section.COMMAND,
    "jit": "./fi_jit_setup.sh, then python3 fi_bench.py jit --out-dir {out}",
    "trace": "python3 fi_trace.py capture --out-dir {out}  (restarts ./serve.sh with the tracer, then restores it)",
}
SECTIONS = {"sparse": sparse_section, "balance": balance_section, "jit": jit_section, "trace": trace_section}
HEADER = ("<h1>FlashInfer, opened up</h1><p>Decode attention over a paged KV cache, split-KV scheduling, JIT "
          "compilation and the live server's batches, measured on the GPU below. Every number comes from the JSON "
          "files next to this page.</p>")
HEADLINES = {"sparse": sparse.headline, "balance": balance.headline, "jit": jit_section.headline,
             "trace": trace_section.headline}


class ReportError(RuntimeError):
    """A results file that cannot be read, or a missing dependency; one line with the next command."""


def load(out_dir: Path) -> dict[str, dict | None]:
    """Each stage's JSON document, or None when its file does not exist; one that is not a JSON object with object
    'env' and 'ceilings' (the environment card's) is a ReportError naming its file."""
    docs: dict[str, dict | None] = {}
    for stage in STAGES:
        path = out_dir / f"{stage}.json"
        try:
            docs[stage] = json.loads(path.read_text()) if path.exists() else None
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{path} is unreadable ({exc}): re-run {PRODUCE[stage].format(out=out_dir)}") from None
        doc = docs[stage]
        with stage_guard(stage, out_dir):
            if doc is not None and not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            if doc is not None and not all(isinstance(doc.get(key) or {}, dict) for key in ("env", "ceilings")):
                raise TypeError("'env' and 'ceilings' should be objects")
    return docs


@contextlib.contextmanager
def stage_guard(stage: str, out_dir: Path) -> Iterator[None]:
    """A stage file whose fields are not what its stage writes (wrong types, missing keys) fails while its headline
    or section is built: one line naming the file and the command that rewrites it, not a traceback."""
    try:
        yield
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        raise ReportError(f"{out_dir / f'{stage}.json'} is not what its stage writes ({exc}): "
                          f"re-run {PRODUCE[stage].format(out=out_dir)}") from None


def summary(docs: dict[str, dict | None], out_dir: Path) -> dict:
    """fi_summary.json: the headline numbers of every stage that has data (None for the others)."""
    out: dict = {"schema": 1, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    for stage in STAGES:
        doc = docs[stage]
        with stage_guard(stage, out_dir):
            out[stage] = HEADLINES[stage](doc) if doc else None
    first = next((d for d in docs.values() if d), None)
    out["env"] = first.get("env") if first else None
    return out


def build(out_dir: Path) -> dict[str, Path]:
    """Write fi_summary.json and fi_report.html (charts only where plotly is installed); returns their paths.
    Both are built before either is written: a bad stage file leaves the previous ones in place."""
    docs = load(out_dir)
    summary_path, html_path = out_dir / "fi_summary.json", out_dir / "fi_report.html"
    head = summary(docs, out_dir)
    html = render(docs, head, out_dir)
    env.write_document(summary_path, head)
    files.write_text_atomic(html_path, html)
    return {"summary": summary_path, "html": html_path}


def render(docs: dict[str, dict | None], head: dict, out_dir: Path) -> str:
    """The whole page: environment card, headline table, then one section per stage (or its placeholder)."""
    sections = [("environment", "Environment", env_card(docs)), ("headline", "Headline", headline_table(head))]
    for stage in STAGES:
        with stage_guard(stage, out_dir):
            body = SECTIONS[stage].render_section(docs[stage], str(out_dir))
        sections.append((stage, SECTIONS[stage].TITLE, body) if body else (stage, stage, placeholder(stage, out_dir)))
    return page.document("FlashInfer report", sections, HEADER, with_plotly=figures.has_plotly())


def env_card(docs: dict[str, dict | None]) -> str:
    rows = []
    for stage, doc in docs.items():
        if not doc:
            continue
        e, c = doc.get("env") or {}, doc.get("ceilings") or {}
        rows.append([stage, doc.get("created_at"), e.get("gpu_name"), e.get("sm_count"), e.get("gpu_memory_gib"),
                     e.get("driver"), e.get("cuda_runtime"), e.get("torch"), e.get("flashinfer"), e.get("sglang"),
                     e.get("git_commit"), e.get("jit_cache_dir"),
                     figures.fmt(c.get("peak_gb_s")), figures.fmt(c.get("copy_gb_s"))])
    if not rows:
        return "<p>No results yet: run the commands in each section below.</p>"
    return figures.table(["stage", "measured", "GPU", "SMs", "GiB", "driver", "CUDA", "torch", "flashinfer",
                          "sglang", "git", "JIT cache", "peak GB/s", "copy GB/s"], rows)


def headline_table(head: dict) -> str:
    """The questions a reader brings, answered; then every summary number, folded."""
    answers = headline.rows(head)
    short = figures.table(["stage", "question", "answer"], answers) if answers else ""
    return f"{short}<details><summary>Every summary number</summary>{summary_table(head)}</details>"


def summary_table(head: dict) -> str:
    """One row per summary number, flattened (nested dicts become 'a / b' labels)."""
    rows = []
    for stage in STAGES:
        data = head.get(stage)
        if not data:
            rows.append([stage, "no data", "-"])
            continue
        for key, value in figures.flatten(data):
            if key not in ("planning", "split KV control"):
                rows.append([stage, key, figures.fmt(value)])
    return figures.table(["stage", "number", "value"], rows)


def placeholder(stage: str, out_dir: Path) -> str:
    """The body of a section with no data: what it would show and the command that produces it."""
    what = {
        "sparse": "decode attention time and bandwidth over page size, page placement, batch shape, KV dtype and "
                  "kernel path, against the GPU's peak and measured copy bandwidth.",
        "balance": "split-KV on vs off across length distributions and batch sizes, and plan() CPU cost next to "
                   "the kernel time it schedules.",
        "jit": "what first use of each attention variant costs: generate, compile (nvcc/ninja), load, and the "
               "cached start.",
        "trace": "the live server's decode batches: sizes, lengths and how scattered the KV pool really is.",
    }[stage]
    svg = {"sparse": diagrams.paged_kv, "balance": diagrams.split_kv, "jit": diagrams.jit,
           "trace": diagrams.trace}[stage]()
    return (f'{svg}<p>This section shows {escape(what)}</p>'
            f'<p class="todo">No data yet. Produce it with: <code>{escape(PRODUCE[stage].format(out=out_dir))}'
            f"</code>, then rebuild this page.</p>")

