"""More bad input, refused before any work with ONE line on stderr and exit != 0, never a traceback, a hang or
a server restart: repeated load levels, a --repeat too big to plan, non-finite seconds, a negative bootstrap seed,
fi_bench.py report over damaged or unwritable results, and a log member that does not exist.

Same table style as test_bad_input.py: (script + arguments, environment, the words the line must hold, exit code).
`{tmp}` in a row is the test's own folder.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fixtures_bench import make_run

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
STANDIN = REPO / "tests" / "standin"


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    needles: tuple[str, ...]
    code: int = 2
    env: dict[str, str] = field(default_factory=dict)


def case(script: str, *args: str, needles: tuple[str, ...], code: int = 2, env: dict[str, str] | None = None) -> Case:
    argv = (PY, script, *args) if script.endswith(".py") else (f"./{script}", *args)
    return Case(argv, needles, code, env or {})


RUN = "{tmp}/bench/20261129-120000"
NO_SERVER = {"SGLANG_PYTHON": "/bin/false"}  # capture rows: a regression fails to start, it never serves
CASES = {
    "bench --concurrency with a level twice": case("run_bench.py", "--dry-run", "--concurrency", "1,16,1",
                                                   needles=("--concurrency '1,16,1': 1 is given twice",)),
    "bench --rates with a rate twice": case("run_bench.py", "--dry-run", "--rates", "2,2.0",
                                            needles=("--rates '2,2.0': 2 is given twice",)),
    "bench --repeat too big to plan": case("run_bench.py", "--dry-run", "--repeat", "1000000000",
                                           needles=("--repeat must be <= 100 (got 1000000000)",)),
    "dashboard negative --seed": case("make_dashboard.py", RUN, "--seed", "-1", needles=("--seed must be >= 0",)),
    "trace --duration-s nan": case("fi_trace.py", "capture", "--duration-s", "nan", env=NO_SERVER,
                                   needles=("--duration-s must be a finite number of seconds > 0 (got nan)",)),
    "trace --duration-s inf": case("fi_trace.py", "capture", "--duration-s", "inf", env=NO_SERVER,
                                   needles=("--duration-s",)),
    "trace --hook-timeout-s nan": case("fi_trace.py", "capture", "--hook-timeout-s", "nan", env=NO_SERVER,
                                       needles=("--hook-timeout-s must be a finite number",)),
    "fi report --out-dir is a file": case("fi_bench.py", "report", "--out-dir", "{tmp}/a-file", code=1,
                                          needles=("fi_bench.py report: cannot write", "a-file/fi_summary.json")),
    "fi report sparse.json is a list": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-list", code=1,
                                            needles=("sparse.json is not what its stage writes", "re-run")),
    "fi report jit.json with a bad env": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-env", code=1,
                                              needles=("jit.json is not what its stage writes",)),
    "fi report balance.json with bad fields": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-fields", code=1,
                                                   needles=("balance.json is not what its stage writes",)),
    "serve logs -m of no member": case("serve.sh", "logs", "-m", "nosuch",
                                       needles=("logs -m nosuch: no such member",)),
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    """A plain file, a good run, damaged fi_bench.py results, and a state folder where a server has logged."""
    root = tmp_path_factory.mktemp("bad-more")
    (root / "a-file").write_text("not a directory\n")
    make_run(root, n=8, repeats=1)
    for name, stage, text in (("fi-list", "sparse", "[1]"), ("fi-env", "jit", '{"env": "y"}'),
                              ("fi-fields", "balance", '{"cases": "x"}')):
        (root / name).mkdir()
        (root / name / f"{stage}.json").write_text(text)
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    (root / "work" / "server").mkdir(parents=True)
    (root / "work" / "server" / "server.log").write_text("a server ran\n")
    return root


@pytest.mark.parametrize("name", list(CASES))
def test_more_bad_input_is_one_line(name: str, tmp: Path) -> None:
    row = CASES[name]
    env = {**os.environ, "WORK_DIR": str(tmp / "work"), "RESULTS_DIR": str(tmp / "results"), "LLMHOST_CONFIG": "",
           "SGLANG_PYTHON": PY, "API_KEY_FILE": "", "OPENAI_API_KEY": "", "TMUX_TMPDIR": str(tmp),
           "MODEL_DIR": str(tmp / "model"), "LOAD_FORMAT": "dummy", "BENCH_USER_ARMS": "", "SERVER_EXTRA_ARGS": "",
           "PYTHONPATH": os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p),
           **row.env}
    env.pop("TMUX", None)
    argv = [a.replace("{tmp}", str(tmp)) for a in row.argv]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == row.code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    for needle in row.needles:
        assert needle.replace("{tmp}", str(tmp)) in proc.stderr, proc.stderr
