"""make_dashboard.py on runs without load points, made by run_bench.py against the SGLang stand-in (real tmux):
a --startup run's page and a --single-stream run's page render in headless Chromium and their tables hold the
numbers the run recorded and printed."""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from benchrun import QWEN3_4B, bench
from benchrun import rows as _rows
from test_dashboard import dashboard, render

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")


def page_of(run: Path, profile: Path) -> str:
    """make_dashboard.py RUN_DIR, then the page's source after checking every chart drew without a script error."""
    proc = dashboard(str(run))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(doc["html"]) == run / "dashboard.html"
    source = Path(doc["html"]).read_text()
    dom, console = render(Path(doc["html"]), profile)
    charts = source.count('class="plotly-graph-div"')
    assert 'data-js-errors="0"' in dom, re.findall(r'id="js-errors"[^<]*<', dom)
    assert charts >= 1 and len(re.findall(r'<div[^>]+class="[^"]*js-plotly-plot', dom)) == charts
    assert dom.count('class="main-svg"') >= charts and not [c for c in console if "Uncaught" in c], console
    return source


def table(source: str, section: str) -> tuple[list[str], list[list[str]]]:
    """The header and the cells (as text) of the first table in a section of the page."""
    part = source[source.index(f"<section id={section}>"):]
    part = part[:part.index("</table>")]
    head = [html.unescape(h) for h in re.findall(r"<th\b[^>]*>(.*?)</th>", part)]
    body = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", part.split("<tbody>")[1])]
    return head, body


def test_a_startup_run_gets_a_page_of_its_phases_with_the_recorded_seconds(bench_env, tmp_path):
    proc = bench(bench_env, "--startup", "1", "--arm", "tok1=--tokenizer-worker-num 1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    source = page_of(run, tmp_path / "profile")
    assert source.count('class="plotly-graph-div"') == 2 and "Server start-up — " + run.name in source
    head, body = table(source, "table")
    starts = _rows(run / "startups.jsonl")
    labels = [a["label"] for a in json.loads((run / "manifest.json").read_text())["arms"]]
    assert [row[0] for row in body] == labels and labels[1] == "tok1"  # a user arm is labelled by its name
    for row, rec in zip(body, starts):  # one restart per arm: its median is its own number
        cells = dict(zip(head, row))
        ready = f"{rec['ready_s']:.1f}"
        assert cells["Starts ok / failed"] == "1 / 0" and cells["Ready s, median (min–max)"] == \
            f"{ready} ({ready}–{ready})" and cells["Restart s, median"] == f"{rec['restart_s']:.1f}"
        assert {name: cells[f"{name} s"] for name in rec["phases"]} == \
            {name: f"{s:.1f}" for name, s in rec["phases"].items()}
    assert dict(zip(head, body[1]))["Flags"] == "--tokenizer-worker-num 1" and "Every restart reached ready" in source


def test_a_single_stream_run_gets_a_page_of_its_time_per_token_with_the_terminal_table(bench_env, tmp_path):
    (Path(bench_env["MODEL_DIR"]) / "config.json").write_text(json.dumps(QWEN3_4B))
    proc = bench(bench_env, "--single-stream", "1", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    source = page_of(run, tmp_path / "profile")
    head, (row,) = table(source, "table")
    printed = [line.removeprefix("[bench] ") for line in proc.stdout.splitlines() if line.startswith("[bench] ")]
    columns = next(line for line in printed if "server step" in line)
    terminal = next(line for line in printed if line.split()[:1] == ["baseline"])
    at = 0
    for name, cell in zip(head, row):  # every terminal column, its cell as printed, in the same order
        if name in columns:
            at = terminal.index(cell, at) + len(cell)
    assert len([h for h in head if h in columns]) == 11 and "GPU fwd" in head
    stored = _rows(run / "stream_arms.jsonl")[0]
    assert dict(zip(head, row))["Decode lines"] == str(stored["decode_lines"])
    if stored["peak_gb_s"] is None:  # no GPU here: no floor, said so, never guessed
        assert dict(zip(head, row))["floor"] == "-" and "floor not stated: " in source
    # the kernel profile: its parts per forward pass as stream_kernels.jsonl holds them, idle included
    kern = _rows(run / "stream_kernels.jsonl")[0]
    head, body = table(source, "kernels")
    parts = {cells[0]: cells[1] for cells in body}
    assert head == ["part", "ms per pass", "of the span"]
    assert parts == {**{cat: f"{ms:.3f}" for cat, ms in kern["by_category"].items()},
                     "idle between kernels": f"{kern['span_ms'] - kern['kernel_ms']:.3f}"}
