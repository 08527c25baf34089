"""Which processes and GPUs served each arm, in words, from the layout in servers/<arm>.json
(llmhost.serve.service.layout: per member its name, port, gpus = CUDA_VISIBLE_DEVICES ('' = all visible; None for
the router), tp_size, dp_size).

Arms that differ in layout (TP=2, DP=2 behind the router, one GPU) are compared at the same load by the same tables
as any other arms; with_layout_labels puts each arm's layout after its name, so every table and legend says what
was compared. A run whose arms all ran one server on one GPU keeps its labels as they were.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from llmhost.report.load import Run

PLAIN = "1 GPU"


def _gpus(gpus: str | None) -> str:
    return f"GPU {gpus}" if gpus and "," not in gpus else f"GPUs {gpus}" if gpus else ""


def _sizes(member: Mapping) -> str:
    sizes = [f"{kind} {member.get(key) or 1}" for kind, key in (("TP", "tp_size"), ("DP", "dp_size"))
             if (member.get(key) or 1) > 1]
    return " × ".join(sizes)


def describe(layout: Sequence[Mapping]) -> str:
    """One server: '1 GPU', 'GPU 3', 'TP 2 on GPUs 0,1', 'TP 2 × DP 2'; behind the router: 'router → 2 workers,
    GPUs 0 | 1', 'router → 2 workers × TP 2, GPUs 0,1 | 2,3', 'router → workers elsewhere'; '' when not recorded."""
    workers = [m for m in layout if m.get("name") != "router"]
    if len(workers) == len(layout):  # no router
        if len(workers) != 1:
            return ""
        sizes, where = _sizes(workers[0]), _gpus(workers[0].get("gpus"))
        return f"{sizes} on {where}" if sizes and where else sizes or where or PLAIN
    if not workers:
        return "router → workers elsewhere"
    sizes = {_sizes(m) for m in workers}
    each = f" × {sizes.pop()}" if len(sizes) == 1 and "" not in sizes else ""
    gpus = [m.get("gpus") for m in workers]
    where = f", GPUs {' | '.join(gpus)}" if all(gpus) else ""
    return f"router → {len(workers)} worker{'s' * (len(workers) > 1)}{each}{where}"


def arm_layouts(run: Run) -> dict[str, str]:
    """Arm name -> its layout in words, for the arms whose server record has one."""
    out = {}
    for arm in run.arms:
        server = run.servers.get(arm.name)
        text = describe(server.layout) if server else ""
        if text:
            out[arm.name] = text
    return out


def with_layout_labels(run: Run) -> Run:
    """The run with each arm labelled 'label [layout]' when any arm ran other than one server on one GPU, so arms
    that differ in layout read right wherever they are named; else the run unchanged."""
    texts = arm_layouts(run)
    if all(text == PLAIN or text.startswith("GPU ") for text in texts.values()):
        return run
    arms = tuple(dataclasses.replace(a, label=f"{a.label} [{texts[a.name]}]") if a.name in texts else a
                 for a in run.arms)
    return dataclasses.replace(run, manifest=dataclasses.replace(run.manifest, arms=arms))


def layout_gpus(run: Run) -> set[str] | None:
    """The GPU indices (as telemetry labels them) that served any arm; None when some arm's are not known (no
    layout recorded, or a server that saw every visible GPU: GPUS empty)."""
    gpus: set[str] = set()
    for arm in run.arms:
        server = run.servers.get(arm.name)
        members = [m for m in (server.layout if server else ()) if m.get("name") != "router"]
        if not members or not all(m.get("gpus") for m in members):
            return None
        gpus.update(g for m in members for g in m["gpus"].split(","))
    return gpus
