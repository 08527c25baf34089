"""fi_bench.py as a user meets it: --help, usage mistakes (exit 2, one line), environment problems (exit 1)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

QWEN3_4B = {"hidden_size": 2560, "head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 36}


def run(repo, *args, env_extra=None):
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, str(repo / "fi_bench.py"), *args], capture_output=True, text=True,
                          cwd=repo, env=env, timeout=120)


def load_cli(repo):
    spec = importlib.util.spec_from_file_location("fi_bench_cli", repo / "fi_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_works_as_a_script(repo):
    got = run(repo, "--help")
    assert got.returncode == 0 and "usage: fi_bench.py" in got.stdout and "sparse" in got.stdout


@pytest.mark.parametrize("sub", ["sparse", "balance", "report"])
def test_help_works_for_every_subcommand(repo, sub, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_cli(repo).main([sub, "--help"])
    assert exit_.value.code == 0 and f"usage: fi_bench.py {sub}" in capsys.readouterr().out


@pytest.mark.parametrize("args, mentions", [
    (["sparse", "--batches", "64by4096"], "REQUESTSxTOKENS"),
    (["sparse", "--dtypes", "fp16"], "bf16,fp8"),
    (["sparse", "--page-sizes", "0"], "positive"),
    (["sparse", "--repeat", "1"], "--repeat"),
    (["balance", "--distributions", "bimodal"], "uniform"),
    (["balance", "--batches", "64", "--total-tokens", "10"], "--total-tokens"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_mistakes_exit_2_with_one_line(repo, args, mentions, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_cli(repo).main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and mentions in lines[0] and "Traceback" not in err


def test_missing_model_config_is_one_line_exit_1(repo, tmp_path):
    got = run(repo, "sparse", "--model-dir", str(tmp_path / "nowhere"), "--out-dir", str(tmp_path))
    assert got.returncode == 1
    assert got.stderr.count("\n") == 1 and "config.json" in got.stderr and "MODEL_DIR" in got.stderr


def test_gpu_subcommands_without_the_gpu_stack_name_the_python_to_use(repo, tmp_path):
    # the test Python has no flashinfer (and torch only as its CPU build, or not at all)
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_4B))
    got = run(repo, "balance", "--model-dir", str(model), "--out-dir", str(tmp_path))
    # asked of a fresh interpreter: another test of this worker may have imported torch's CPU build from its folder
    has_torch = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    missing = "flashinfer" if has_torch else "torch"
    assert got.returncode == 1 and got.stderr.count("\n") == 1
    assert f"{missing} is not importable" in got.stderr and "SGLANG_PYTHON" in got.stderr


def test_report_on_an_empty_results_dir_writes_both_files_and_a_json_line(repo, tmp_path):
    got = run(repo, "report", "--out-dir", str(tmp_path))
    assert got.returncode == 0, got.stderr
    written = json.loads(got.stdout.strip().splitlines()[-1])
    assert set(written) == {"summary", "html"}
    assert (tmp_path / "fi_report.html").stat().st_size > 1_000_000  # plotly.js inlined: opens offline
    assert json.loads((tmp_path / "fi_summary.json").read_text())["schema"] == 1
