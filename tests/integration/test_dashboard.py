"""make_dashboard.py as a subprocess on synthetic runs: outputs, --compare, missing data, bad input, and the page
opened in headless Chromium (no script errors, every chart drawn). ./tests/run_cpu.sh installs Chromium."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_bench import make_run

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "make_dashboard.py"


def dashboard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """make_dashboard.py ARGS; `env` adds to this process's environment (e.g. a GPU_HOURLY_USD override)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two runs of the same plan (the second one faster) and the first one's dashboard with --compare and a GPU
    price."""
    root = tmp_path_factory.mktemp("bench")
    other = make_run(root, run_id="20261128-090000", seed=3, n=16, repeats=1, speed=1.25)
    current = make_run(root, run_id="20261129-120000", seed=0, n=16, repeats=2)
    proc = dashboard(str(current), "--compare", str(other), "--gpu-hourly-usd", "3.50")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"run": current, "other": other, "html": Path(doc["html"]), "csv": Path(doc["summary_csv"]),
            "json": Path(doc["summary_json"]), "doc": doc, "stderr": proc.stderr}  # type: ignore[dict-item]


def test_lines_skipped_as_torn_are_named_on_stderr_and_on_the_page(built: dict) -> None:
    """Both fixture runs end points.jsonl and telemetry.jsonl with a torn line (a kill mid-write)."""
    warned = [line for line in built["stderr"].splitlines() if line.startswith("[dashboard] warning: ")]
    assert sum("points.jsonl: a torn last line" in line for line in warned) == 2  # this run and the compared one
    assert "telemetry.jsonl: a torn last line (a crash mid-write) was skipped" in built["html"].read_text()


def test_dashboard_and_summaries_are_written_beside_each_other(built: dict) -> None:
    assert built["html"] == built["run"] / "dashboard.html"
    assert built["csv"].parent == built["json"].parent == built["run"]
    summary = json.loads(built["json"].read_text())  # strict JSON: nan became null
    rows = list(csv.DictReader(built["csv"].open()))
    assert len(rows) == len(summary["points"]) == built["doc"]["points"] > 40
    assert summary["compared_with"] == "20261128-090000" and summary["slo"]["ttft_ms"] == 500.0
    first = summary["points"][0]
    assert {"arm", "workload", "pattern", "load", "output_throughput", "ttft_p99_ms", "ttft_p99_lo_ms",
            "goodput_pct", "meets_slo"} <= set(first)


def test_page_is_self_contained_with_plotly_inlined_once(built: dict) -> None:
    html = built["html"].read_text()
    assert html.count("plotly.js v") == 1  # the bundle's banner
    # each arm's decode as its server said it (Methods), or that an older run did not record it
    assert "attention backend flashinfer; decode: shared-prefix decode: on (SGLang 0.5.17" in html
    assert "decode: not recorded" in html
    assert not re.search(r"<script[^>]+src=", html)  # nothing fetched from the network
    for section in ("Environment", "Max concurrency within SLO", "Settings vs baseline", "Tool calls",
                    "Regression: 20261129-120000 vs 20261128-090000", "Methods", "sglang.launch_server"):
        assert section in html, section


def test_compare_view_finds_the_faster_run_faster(built: dict) -> None:
    summary = json.loads(built["json"].read_text())
    assert summary["points"]
    html = built["html"].read_text()
    regression = html[html.index("id=compare"):html.index("id=points")]
    assert regression.count("<tr>") > 40  # every shared point
    assert "worse" in regression  # the other run was 25% faster, so this run's latencies read worse


def test_a_gpu_price_adds_what_a_million_output_tokens_cost_with_the_ci_inverted(built: dict) -> None:
    summary = json.loads(built["json"].read_text())
    assert summary["cost"]["usd_per_hour"] == 3.5 and summary["cost"]["source"] == "--gpu-hourly-usd"
    priced = [p for p in summary["cost"]["points"] if p["usd_per_m_output_tokens"] is not None]
    assert priced and {p["arm"] for p in summary["cost"]["points"]} == {"baseline", "no-prefix-cache", "fp8-kv",
                                                                         "triton"}
    for p in priced:  # $3.50/h over the tokens an hour at that throughput makes; its upper bound gives the lower cost
        assert p["usd_per_m_output_tokens"] == pytest.approx(3.5e6 / (p["output_throughput"] * 3600))
        if p["output_throughput_hi"] is None:  # one steady repeat at that load: no CI, on either
            assert p["usd_per_m_output_tokens_lo"] is None and p["basis"] == "steady window"
        else:
            assert p["usd_per_m_output_tokens_lo"] == pytest.approx(3.5e6 / (p["output_throughput_hi"] * 3600))
    html = built["html"].read_text()
    assert "<h3>Cost per million output tokens</h3>" in html and "$3.50 per GPU-hour (--gpu-hourly-usd" in html
    assert re.search(r"\$[0-9.]+ \[\$[0-9.]+, \$[0-9.,]+\] at c=", html)  # value [CI] at the capacity load


def test_the_price_defaults_to_the_current_config_and_an_empty_one_hides_the_card(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=16, quick=True)
    loose = ("--slo-ttft-ms", "100000", "--slo-itl-ms", "1000")  # the quick run's one load meets it
    proc = dashboard(str(run), *loose, env={"GPU_HOURLY_USD": "2.5"})  # set after the run: the manifest has no price
    assert proc.returncode == 0, proc.stderr
    html = (run / "dashboard.html").read_text()
    assert "$2.50 per GPU-hour (GPU_HOURLY_USD, environment" in html and "no CI: one repeat" in html
    proc = dashboard(str(run), "--gpu-hourly-usd", "", env={"GPU_HOURLY_USD": "2.5"})
    assert proc.returncode == 0, proc.stderr
    assert "<h3>Cost per million" not in (run / "dashboard.html").read_text()
    assert json.loads((run / "summary.json").read_text())["cost"] is None
    bad = dashboard(str(run), env={"GPU_HOURLY_USD": "-1"})
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert "environment: GPU_HOURLY_USD=-1 must be empty (costs not shown) or a positive price" in bad.stderr


def test_slo_options_change_the_verdicts_without_a_rerun(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=16, quick=True)
    assert dashboard(str(run)).returncode == 0
    assert any(p["meets_slo"] for p in json.loads((run / "summary.json").read_text())["points"])
    out = tmp_path / "strict.html"
    proc = dashboard(str(run), "--out", str(out), "--slo-ttft-ms", "1", "--slo-itl-ms", "1")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "strict.summary.json").read_text())  # named after strict.html
    assert not any(p["meets_slo"] for p in summary["points"])
    assert "overridden at build time" in out.read_text()
    assert any(p["meets_slo"] for p in json.loads((run / "summary.json").read_text())["points"])  # untouched


def test_out_may_name_a_directory_and_a_damaged_manifest_is_one_line(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=16, quick=True)
    target = tmp_path / "site"
    proc = dashboard(str(run), "--out", f"{target}/")
    assert proc.returncode == 0, proc.stderr
    assert (target / "dashboard.html").is_file() and (target / "summary.json").is_file()
    (run / "manifest.json").write_bytes(b"\xff\xfe not utf-8")
    bad = dashboard(str(run))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "is not readable JSON" in bad.stderr


def test_missing_data_is_explained_not_fatal(tmp_path: Path) -> None:
    run = make_run(tmp_path, run_id="bare", n=8, quick=True, telemetry=False, toolcalls=False)
    (run / "servers" / "triton.json").unlink()
    proc = dashboard(str(run))
    assert proc.returncode == 0, proc.stderr
    html = (run / "dashboard.html").read_text()
    assert "No toolcalls.jsonl in this run" in html
    assert html.count("Not available: no ") >= 2 and "samples in telemetry.jsonl" in html
    assert "not recorded: servers/&lt;arm&gt;.json missing" in html


def test_a_run_with_no_readable_points_is_refused_and_points_at_resume(tmp_path: Path) -> None:
    full = make_run(tmp_path / "src", n=8, repeats=1)
    run = tmp_path / "empty"
    run.mkdir()
    shutil.copy(full / "manifest.json", run / "manifest.json")
    (run / "points.jsonl").write_text("not json\n{torn")
    proc = dashboard(str(run))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "has no readable points (" in proc.stderr and "1 unreadable line(s) skipped (line 1 first)" in proc.stderr
    assert "torn last line" in proc.stderr
    assert f"--resume {run}" in proc.stderr and not (run / "dashboard.html").exists()


def test_a_quick_run_with_one_point_per_arm_still_compares_every_arm(tmp_path: Path) -> None:
    run = make_run(tmp_path, run_id="quick", n=24, quick=True)
    proc = dashboard(str(run))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert len(summary["points"]) == 6
    assert {r["arm"] for r in summary["baseline"]} == {"no-prefix-cache", "fp8-kv", "triton"}
    html = (run / "dashboard.html").read_text()
    assert html.count('class="plotly-graph-div"') >= 6  # capacity, qps, latency, survival, head-to-head, telemetry


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["/nonexistent-run"], 1, "is not a directory"),
    (["RUN"], 1, "manifest.json is missing — pass a run directory of run_bench.py"),
    (["RUN", "--slo-pct", "0"], 2, "--slo-pct must be in (0, 100]"),
    (["RUN", "--slo-ttft-ms", "-5"], 2, "--slo-ttft-ms must be a number of milliseconds > 0"),
    (["RUN", "--gpu-hourly-usd", "abc"], 2, "--gpu-hourly-usd abc must be empty (costs not shown) or a positive"),
    (["RUN", "--gpu-hourly-usd", "0"], 2, "--gpu-hourly-usd 0 must be empty"),
])
def test_bad_input_ends_in_one_line_and_an_exit_code(tmp_path: Path, args: list[str], code: int,
                                                     needle: str) -> None:
    args = [str(tmp_path) if a == "RUN" else a for a in args]
    proc = dashboard(*args)
    assert proc.returncode == code
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    if code == 1:
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_host_python3_without_plotly_builds_through_the_checkouts_venv(tmp_path: Path, built: dict) -> None:
    """The newcomer path (llmhost/deps.py): a python3 without site-packages re-runs the script under .venv."""
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("no .venv in this checkout (./tests/run_cpu.sh creates it)")
    host_python = tmp_path / "python3"
    base = os.path.realpath(sys.executable)  # the interpreter the venv was made from, without its site-packages
    host_python.write_text(f"#!/bin/sh\nexec {base} -S \"$@\"\n")
    host_python.chmod(0o755)
    proc = subprocess.run([str(host_python), str(SCRIPT), str(built["run"]), "--out", str(tmp_path / "d.html")],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert f"'numpy' is not in {base}: running with {venv_python}" in proc.stderr
    assert (tmp_path / "d.html").is_file()


def test_help_describes_the_outputs() -> None:
    proc = dashboard("--help")
    assert proc.returncode == 0 and "summary.csv" in proc.stdout and "--compare" in proc.stdout


# --- headless browser ---------------------------------------------------------------------------------------

def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("chromium not installed — ./tests/run_cpu.sh installs it (apt-get install chromium)")


def render(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM after scripts ran, and the page's console lines, from headless Chromium."""
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage",  # containers often mount a tiny /dev/shm
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def test_every_chart_renders_in_a_headless_browser_without_script_errors(built: dict, tmp_path: Path) -> None:
    source = built["html"].read_text()
    dom, console = render(built["html"], tmp_path / "profile")
    expected = source.count('class="plotly-graph-div"')
    assert expected >= 7
    assert 'data-js-errors="0"' in dom, re.findall(r'id="js-errors"[^<]*<', dom)
    assert len(re.findall(r'<div[^>]+class="[^"]*js-plotly-plot', dom)) == expected
    assert dom.count('class="main-svg"') >= expected  # plotly drew each chart
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console


def test_the_browser_check_catches_a_broken_chart(built: dict, tmp_path: Path) -> None:
    broken = tmp_path / "broken.html"
    html = built["html"].read_text()
    at = html.index("Plotly.newPlot(", html.index('id="chart-capacity"'))  # the chart's call, not the bundle's
    broken.write_text(html[:at] + "Plotly.noSuchFunction(" + html[at + len("Plotly.newPlot("):])
    dom, console = render(broken, tmp_path / "profile")
    assert 'data-js-errors="1"' in dom and "Some charts failed to draw" in dom
    assert any("Uncaught" in line for line in console)
