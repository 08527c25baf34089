"""The environment card every report page opens with: what ran where (GPU, driver, versions, commit, date), read
from a run's manifest, plus whatever facts the page adds (the dashboard its SLO and points, a start-up page its
restarts)."""
from __future__ import annotations

from typing import Any, Sequence

from llmhost.bench.records import Manifest
from llmhost.report import page
from llmhost.report.page import esc, num


def provenance_facts(manifest: Manifest) -> list[tuple[str, Any]]:
    """(label, value) rows: GPU, driver, versions, git commit (+ uncommitted changes), run date."""
    prov = manifest.provenance
    gpu, ver = prov.gpu, prov.versions
    gpu_text = f"{gpu.count} × {gpu.name} ({num(gpu.memory_gb)} GB)" if gpu.name else \
        "not recorded (no NVIDIA GPU visible to run_bench.py)"
    commit = prov.git_commit and prov.git_commit + (" + uncommitted changes" if prov.git_dirty else "")
    return [("GPU", gpu_text), ("Driver", gpu.driver), ("SGLang", ver.get("sglang")),
            ("FlashInfer", ver.get("flashinfer")), ("torch", ver.get("torch")), ("llmhost", ver.get("llmhost")),
            ("git commit", commit), ("Run date", prov.created_at)]


def card(facts: Sequence[tuple[str, Any]], warnings: Sequence[str] = ()) -> str:
    """The card (None reads 'not recorded'), then one notice per warning (lines skipped on reading)."""
    items = "".join(f"<tr><th class=l>{esc(k)}</th><td class=l>{esc('not recorded' if v is None else v)}</td></tr>"
                    for k, v in facts)
    warn = "".join(page.missing(w) for w in warnings)
    return f"<div class=card><h3>Environment</h3><table>{items}</table></div>{warn}"


def subtitle(manifest: Manifest) -> str:
    """One line under a page's title: GPU, SGLang version and commit, for a page shared without its card."""
    facts = dict(provenance_facts(manifest))
    commit = (facts["git commit"] or "commit not recorded")[:12]
    return f"{facts['GPU']} · SGLang {facts['SGLang'] or 'not recorded'} · {commit}"
