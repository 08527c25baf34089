"""run_bench.py --tune end to end against the SGLang stand-in: a decode step slows with every request running beside
it (STANDIN_ITL_MS_PER_RUNNING, as a GPU's batched decode does), so at 4 concurrent requests the defaults (all 4
running) miss an ITL SLO that a cap of 2 running requests meets. The coarse grid (2, 8) finds the cap; the refine
stage tries the geometric midpoint (4, which runs all 4 again and misses); the winner must be the cap of 2, with
its paired CI above the defaults, and --apply must write it to the configuration file, keeping the user's lines."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchrun import bench, isolated_env

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="serve.sh needs tmux")
# ITL = 1 ms + 3 ms per other running request: 4 running -> 10 ms, 2 -> 4 ms, each 3 ms from the 7 ms SLO (the HTTP
# stream's own overhead per token, ~0.5-1.5 ms on a busy 2-core host, stays below that). The queue of a cap of 2
# adds ~1 s of TTFT (one 256-token answer), far inside the TTFT SLO.
SERVER_ENV = "STANDIN_ITL_MS=1 STANDIN_ITL_MS_PER_RUNNING=3"
SLO = ("--slo-ttft-ms", "10000", "--slo-itl-ms", "7")


@pytest.fixture
def env(tmp_path):
    for env in isolated_env(tmp_path, SERVER_ENV):
        local = tmp_path / "config.local.env"
        local.write_text("# my settings\nREADY_TIMEOUT_S=60\n")
        yield {**env, "LLMHOST_CONFIG": str(local), "LLMHOST_TUNE_SPACE": "--max-running-requests=2,8"}


def test_the_tuner_finds_the_batch_cap_the_server_rewards_and_applies_it(env):
    proc = bench(env, "--tune", "--concurrency", "4", "--duration-s", "5", "--repeat", "2", "--budget-min", "20",
                 *SLO, "--apply", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    final = json.loads(proc.stdout.strip().splitlines()[-1])
    tune = final["tune"]
    assert tune["winner"] == "maxrun2", proc.stdout[-3000:]
    run = Path(final["run_dir"])
    assert run.name.endswith("-tune")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tune"]["stage"] == "refine"
    assert [t["name"] for t in manifest["tune"]["trials"]] == ["baseline", "maxrun2", "maxrun8", "maxrun4"]
    assert manifest["tune"]["space"][0]["flag"] == "--max-running-requests"
    ranking = json.loads((run / "tune.json").read_text())["ranking"]["rows"]
    assert ranking[0]["trial"] == "maxrun2" and ranking[0]["vs_defaults"]["lo"] > 0
    assert {r["trial"] for r in ranking} == {"baseline", "maxrun2", "maxrun4", "maxrun8"}
    local = Path(env["LLMHOST_CONFIG"]).read_text()
    assert local.startswith("# my settings\nREADY_TIMEOUT_S=60\n")
    assert local.splitlines()[-1] == "SERVER_EXTRA_ARGS=--max-running-requests 2" and run.name in local
