"""Every bad input a new user could give the entry points: refused before any work with ONE line on stderr that
names the setting or flag and, for a setting, where its value came from (environment, or config file and line);
exit != 0; never a traceback.

One table, each row: (script + arguments, environment, a config file's text, the words the line must hold, and the
exit code where it is pinned).
serve.sh is exercised only through settings it refuses today and will refuse as Python (config.load() is the one
check either way). `{tmp}` in a row is the test's own folder; `{local}` is the config file the row writes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fixtures_bench import make_run, manifest_of

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    needles: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    local: str | bytes | None = None  # text of a config file passed as LLMHOST_CONFIG
    code: int | None = None  # the exit code, where the row pins it (else any non-zero)


def case(script: str, *args: str, needles: tuple[str, ...], env: dict[str, str] | None = None,
         local: str | bytes | None = None, code: int | None = None) -> Case:
    argv = (PY, script, *args) if script.endswith(".py") else (f"./{script}", *args)
    return Case(argv, needles, env or {}, local, code)


RUN = "{tmp}/bench/20261129-120000"  # the good run the fixture makes
# fi_trace.py capture rows: a regression fails to start a server instead of serving one
NO_SERVER = {"SGLANG_PYTHON": "/bin/false", "MODEL_DIR": "{tmp}/model", "LOAD_FORMAT": "dummy"}


ENV = "environment"
CASES = {
    # --- settings from the environment, refused by whichever script loads them first ---
    "serve PORT=abc": case("serve.sh", "print-command", env={"PORT": "abc"},
                           needles=(f"{ENV}: PORT=abc is not a port (1-65535)",)),
    "bench PORT=70000": case("run_bench.py", "--dry-run", env={"PORT": "70000"}, needles=(f"{ENV}: PORT=70000",)),
    "smoke PORT=0": case("smoke_test.py", env={"PORT": "0"}, needles=(f"{ENV}: PORT=0 is not a port",)),
    "serve DASHBOARD_PORT=-1": case("serve.sh", "tunnel", env={"DASHBOARD_PORT": "-1"},
                                    needles=(f"{ENV}: DASHBOARD_PORT=-1",)),
    "serve HOST with a space": case("serve.sh", "print-command", env={"HOST": "my host"},
                                    needles=(f"{ENV}: HOST='my host' is not a host name",)),
    "bench HOST with a space": case("run_bench.py", "--dry-run", env={"HOST": "127.0.0.1 "},
                                    needles=(f"{ENV}: HOST=", "is not a host name")),
    "serve READY_TIMEOUT_S=-5": case("serve.sh", "print-command", env={"READY_TIMEOUT_S": "-5"},
                                     needles=(f"{ENV}: READY_TIMEOUT_S=-5 must be >= 1 seconds",)),
    "bench READY_TIMEOUT_S=soon": case("run_bench.py", "--dry-run", env={"READY_TIMEOUT_S": "soon"},
                                       needles=(f"{ENV}: READY_TIMEOUT_S=soon is not an integer",)),
    "serve LOAD_FORMAT typo": case("serve.sh", "print-command", env={"LOAD_FORMAT": "dumy"},
                                   needles=(f"{ENV}: LOAD_FORMAT=dumy is not one of SGLang's load formats",)),
    "setup LOAD_FORMAT typo": case("setup_host.sh", "--dry-run", env={"LOAD_FORMAT": "random"},
                                   needles=(f"{ENV}: LOAD_FORMAT=random",)),
    "serve TMUX_SESSION with ':'": case("serve.sh", "status", env={"TMUX_SESSION": "a:b"},
                                        needles=(f"{ENV}: TMUX_SESSION=a:b must be a name without ':' or '.'",)),
    "bench TMUX_SESSION with '.'": case("run_bench.py", "--dry-run", env={"TMUX_SESSION": "v1.2"},
                                       needles=(f"{ENV}: TMUX_SESSION=v1.2",)),
    "setup relative WORK_DIR": case("setup_host.sh", "--dry-run", env={"WORK_DIR": "llmhost"},
                                    needles=(f"{ENV}: WORK_DIR=llmhost must be an absolute path",)),
    "serve empty WORK_DIR": case("serve.sh", "print-command", env={"WORK_DIR": ""},
                                 needles=(f"{ENV}: WORK_DIR='' must be",)),
    "setup WORK_DIR is a file": case("setup_host.sh", "--dry-run", env={"WORK_DIR": "{tmp}/a-file"},
                                     needles=(f"{ENV}: WORK_DIR=", "a-file is a file, not a directory")),
    "bench RESULTS_DIR is a file": case("run_bench.py", "--dry-run", env={"RESULTS_DIR": "{tmp}/a-file"},
                                        needles=(f"{ENV}: RESULTS_DIR=", "is a file, not a directory")),
    "bench RESULTS_DIR/bench is a file": case("run_bench.py", "--dry-run", env={"RESULTS_DIR": "{tmp}/res"},
                                              needles=(f"{ENV}: RESULTS_DIR=", "res/bench is a file")),
    "serve MEM_FRACTION_STATIC=1.5": case("serve.sh", "print-command", env={"MEM_FRACTION_STATIC": "1.5"},
                                          needles=(f"{ENV}: MEM_FRACTION_STATIC=1.5 must be auto or a fraction",)),
    "serve TOKENIZER_WORKER_NUM=0": case("serve.sh", "print-command", env={"TOKENIZER_WORKER_NUM": "0"},
                                         needles=(f"{ENV}: TOKENIZER_WORKER_NUM=0 must be auto or a number",)),
    "bench CHUNKED_PREFILL_SIZE=big": case("run_bench.py", "--dry-run", env={"CHUNKED_PREFILL_SIZE": "big"},
                                           needles=(f"{ENV}: CHUNKED_PREFILL_SIZE=big",)),
    "serve TOOL_CALL_PARSER typo": case("serve.sh", "print-command", env={"TOOL_CALL_PARSER": "qwen4"},
                                        needles=(f"{ENV}: TOOL_CALL_PARSER=qwen4 is not one of SGLang's tool-call",)),
    "serve REASONING_PARSER typo": case("serve.sh", "print-command", env={"REASONING_PARSER": "none"},
                                        needles=(f"{ENV}: REASONING_PARSER=none",)),
    "serve SERVER_EXTRA_ARGS unclosed quote": case("serve.sh", "print-command",
                                                   env={"SERVER_EXTRA_ARGS": "--x 'unclosed"},
                                                   needles=(f"{ENV}: SERVER_EXTRA_ARGS=", "cannot be split")),
    "serve SERVER_ENV without '='": case("serve.sh", "print-command", env={"SERVER_ENV": "JUSTANAME"},
                                         needles=(f"{ENV}: SERVER_ENV=JUSTANAME has 'JUSTANAME'",)),
    "bench BENCH_USER_ARMS without '='": case("run_bench.py", "--dry-run", env={"BENCH_USER_ARMS": "chunk4k"},
                                              needles=(f"{ENV}: BENCH_USER_ARMS=chunk4k",)),
    "setup SGLANG_VERSION word": case("setup_host.sh", "--dry-run", env={"SGLANG_VERSION": "latest"},
                                      needles=(f"{ENV}: SGLANG_VERSION=latest is not a release number",)),
    "setup MODEL_ID with a space": case("setup_host.sh", "--dry-run", env={"MODEL_ID": "Qwen/Qwen3 4B"},
                                        needles=(f"{ENV}: MODEL_ID='Qwen/Qwen3 4B'",)),
    "smoke SERVED_MODEL_NAME with a space": case("smoke_test.py", env={"SERVED_MODEL_NAME": "my model"},
                                                 needles=(f"{ENV}: SERVED_MODEL_NAME='my model'",)),
    "serve empty SGLANG_PYTHON": case("serve.sh", "print-command", env={"SGLANG_PYTHON": ""},
                                      needles=(f"{ENV}: SGLANG_PYTHON='' must name a program",)),
    "smoke LLMHOST_CONFIG missing": case("smoke_test.py", env={"LLMHOST_CONFIG": "{tmp}/nope.env"},
                                         needles=(f"{ENV}: LLMHOST_CONFIG=", "nope.env is not a file")),
    "smoke API key file others can read": case("smoke_test.py", "--base-url", "http://127.0.0.1:9/v1",
                                               env={"API_KEY_FILE": "{tmp}/loose-key"},
                                               needles=(f"{ENV}: API_KEY_FILE=", "chmod 600")),
    "bench API key file others can read": case("run_bench.py", "--dry-run", env={"API_KEY_FILE": "{tmp}/loose-key"},
                                               needles=(f"{ENV}: API_KEY_FILE=", "(mode 0644)", "chmod 600")),
    "bench API key file missing": case("run_bench.py", "--dry-run", env={"API_KEY_FILE": "{tmp}/no-key"},
                                       needles=(f"{ENV}: API_KEY_FILE=", "no-key cannot be read")),
    "bench dry run with SGLANG_PYTHON=/bin/false": case("run_bench.py", "--dry-run", env={"SGLANG_PYTHON": "/bin/false"},
                                                        needles=("SGLANG_PYTHON=/bin/false", f"from {ENV}")),
    # --- settings from a config file: named with its path and line ---
    "bench non-UTF-8 config file": case("run_bench.py", "--dry-run", local=b"PORT=30001\nHOST=caf\xe9\n",
                                        needles=("{local}:2: byte 0xe9 is not UTF-8",)),
    "serve non-UTF-8 config file": case("serve.sh", "status", local=b"\xff\n", needles=("{local}:1: byte 0xff",)),
    "smoke config line without '='": case("smoke_test.py", local="PORT=1\nport 30000\n",
                                          needles=("{local}:2: expected KEY=value",)),
    "setup unknown setting": case("setup_host.sh", "--dry-run", local="# mine\nPROT=30001\n",
                                  needles=("{local}:2: unknown setting PROT",)),
    "serve PORT=70000 in a file": case("serve.sh", "print-command", local="\n\nPORT=70000\n",
                                       needles=("{local}:3: PORT=70000 is not a port (1-65535)",)),
    "bench undefined ${KEY}": case("run_bench.py", "--dry-run", local="MODEL_DIR=${NOPE}/m\n",
                                   needles=("{local}:1: ${NOPE} is not defined above MODEL_DIR",)),
    "serve lower-case key": case("serve.sh", "print-command", local="port=1\n", needles=("{local}:1: bad key 'port'",)),
    "smoke HOST with a space in a file": case("smoke_test.py", local="HOST=a b\n",
                                              needles=("{local}:1: HOST='a b'",)),
    "bench negative READY_TIMEOUT_S in a file": case("run_bench.py", "--dry-run", local="READY_TIMEOUT_S=-5\n",
                                                     needles=("{local}:1: READY_TIMEOUT_S=-5 must be >= 1",)),
    # --- run_bench.py arguments ---
    "bench over-long --tag": case("run_bench.py", "--tag", "x" * 300, needles=("--tag", "at most 64")),
    "bench unsafe --tag": case("run_bench.py", "--tag", "../../etc", needles=("--tag '../../etc'",)),
    "bench --slo-pct above 100": case("run_bench.py", "--slo-pct", "150", needles=("--slo-pct must be in (0, 100]",)),
    "bench negative --slo-ttft-ms": case("run_bench.py", "--slo-ttft-ms", "-1", needles=("--slo-ttft-ms must be",)),
    "bench --slo-itl-ms nan": case("run_bench.py", "--slo-itl-ms", "nan", needles=("--slo-itl-ms must be",)),
    "bench negative --seed": case("run_bench.py", "--seed", "-1", needles=("--seed must be >= 0",)),
    "bench --repeat 0": case("run_bench.py", "--repeat", "0", needles=("--repeat must be >= 1",)),
    "bench --repeat word": case("run_bench.py", "--repeat", "two", needles=("--repeat: invalid int value",)),
    "bench unknown arm": case("run_bench.py", "--dry-run", "--arms", "nope", needles=("unknown arm nope",)),
    "bench --arms naming none": case("run_bench.py", "--arms", ",", needles=("--arms ',' names no arm",)),
    "bench bad --arm": case("run_bench.py", "--dry-run", "--arm", "broken", needles=("bad arm",)),
    "bench unknown workload": case("run_bench.py", "--workloads", "video", needles=("unknown workload video",)),
    "bench --resume of a file": case("run_bench.py", "--resume", "{tmp}/a-file", needles=("no manifest.json there",)),
    "bench --resume of a damaged manifest": case("run_bench.py", "--resume", "{tmp}/damaged",
                                                 needles=("--resume:", "manifest.json is not readable JSON")),
    "bench --resume with --arms": case("run_bench.py", "--resume", "{tmp}/damaged", "--arms", "baseline",
                                       needles=("--resume continues the run's own plan: drop --arms",)),
    # --- make_dashboard.py arguments ---
    "dashboard RUN_DIR is a file": case("make_dashboard.py", "{tmp}/a-file", needles=("a-file is not a directory",)),
    "dashboard RUN_DIR missing": case("make_dashboard.py", "{tmp}/nowhere", needles=("nowhere is not a directory",)),
    "dashboard no RUN_DIR": case("make_dashboard.py", needles=("required: RUN_DIR",)),
    "dashboard damaged manifest": case("make_dashboard.py", "{tmp}/damaged", needles=("is not readable JSON",)),
    "dashboard run without readable points": case("make_dashboard.py", "{tmp}/empty-run",
                                                  needles=("has no readable points", "--resume")),
    "dashboard of a start-up run without restarts": case(
        "make_dashboard.py", "{tmp}/startup-run", needles=("is a start-up run with no readable restarts",
                                                           "startups.jsonl is missing or empty", "--startup N")),
    "dashboard --compare with a start-up run": case(
        "make_dashboard.py", "{tmp}/bench/20261129-120000", "--compare", "{tmp}/startup-run",
        needles=("--compare {tmp}/startup-run is a start-up run (./run_bench.py --startup)",
                 "needs two runs with load points")),
    "dashboard --compare without readable points": case("make_dashboard.py", "{tmp}/bench/20261129-120000",
                                                        "--compare", "{tmp}/empty-run",
                                                        needles=("--compare", "empty-run has no readable points")),
    "dashboard --slo-pct 0": case("make_dashboard.py", "{tmp}/empty-run", "--slo-pct", "0",
                                  needles=("--slo-pct must be in (0, 100]",)),
    "dashboard --slo-pct above 100": case("make_dashboard.py", "{tmp}/empty-run", "--slo-pct", "101",
                                          needles=("--slo-pct must be in (0, 100]",)),
    "dashboard negative --slo-itl-ms": case("make_dashboard.py", "{tmp}/empty-run", "--slo-itl-ms", "-3",
                                            needles=("--slo-itl-ms must be",)),
    "dashboard --out under a file": case("make_dashboard.py", "{tmp}/empty-run", "--out", "{tmp}/a-file/d.html",
                                         needles=("--out", "a-file is a file, not a directory")),
    "dashboard --seed word": case("make_dashboard.py", "{tmp}/empty-run", "--seed", "x",
                                  needles=("--seed: invalid int value",)),
    # --- smoke_test.py arguments ---
    "smoke --api-key-file others can read": case("smoke_test.py", "--base-url", "http://127.0.0.1:9/v1", "--model",
                                                 "m", "--api-key-file", "{tmp}/loose-key",
                                                 needles=("--api-key-file", "loose-key may be read by other users",
                                                          "chmod 600")),
    "smoke --api-key-file missing": case("smoke_test.py", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                                         "--api-key-file", "{tmp}/no-key", needles=("--api-key-file", "cannot be read")),
    "smoke --timeout 0": case("smoke_test.py", "--timeout", "0", needles=("--timeout and --max-tokens must be",)),
    "smoke --max-tokens -1": case("smoke_test.py", "chat", "--max-tokens", "-1", needles=("--max-tokens",)),
    "smoke --base-url without a scheme": case("smoke_test.py", "--base-url", "localhost:30000",
                                              needles=("--base-url localhost:30000 needs a scheme",)),
    "smoke --base-url port out of range": case("smoke_test.py", "--base-url", "http://h:99999/v1",
                                               needles=("--base-url", "Port out of range")),
    "smoke unknown --only": case("smoke_test.py", "--only", "nonsense", needles=("--only: invalid choice",)),
    # --- setup_host.sh arguments ---
    "setup unknown flag": case("setup_host.sh", "--frobnicate", needles=("unknown argument '--frobnicate'",)),
    "setup --only unknown phase": case("setup_host.sh", "--only", "everything", needles=("--only everything",)),
    "setup --only without a phase": case("setup_host.sh", "--only", needles=("--only needs a phase name",)),
    "setup --python /bin/false": case("setup_host.sh", "--dry-run", "--python", "/bin/false",
                                      needles=("--python /bin/false: does not run Python >= 3.10",)),
    "setup --python missing": case("setup_host.sh", "--python", "/nonexistent/python3", needles=("no such executable",)),
    "setup --wheelhouse missing": case("setup_host.sh", "--wheelhouse", "{tmp}/nowhere", needles=("is not a directory",)),
    "bench --concurrency with a level twice": case("run_bench.py", "--dry-run", "--concurrency", "1,16,1",
                                                   code=2, needles=("--concurrency '1,16,1': 1 is given twice",)),
    "bench --rates with a rate twice": case("run_bench.py", "--dry-run", "--rates", "2,2.0",
                                            code=2, needles=("--rates '2,2.0': 2 is given twice",)),
    "bench --repeat too big to plan": case("run_bench.py", "--dry-run", "--repeat", "1000000000",
                                           code=2, needles=("--repeat must be <= 100 (got 1000000000)",)),
    "dashboard negative --seed": case("make_dashboard.py", RUN, "--seed", "-1", code=2,
                                      needles=("--seed must be >= 0",)),
    "trace --duration-s nan": case("fi_trace.py", "capture", "--duration-s", "nan", env=NO_SERVER,
                                   code=2, needles=("--duration-s must be a finite number of seconds > 0 (got nan)",)),
    "trace --duration-s inf": case("fi_trace.py", "capture", "--duration-s", "inf", env=NO_SERVER,
                                   code=2, needles=("--duration-s",)),
    "trace --hook-timeout-s nan": case("fi_trace.py", "capture", "--hook-timeout-s", "nan", env=NO_SERVER,
                                       code=2, needles=("--hook-timeout-s must be a finite number",)),
    "fi report --out-dir is a file": case("fi_bench.py", "report", "--out-dir", "{tmp}/a-file", code=1,
                                          needles=("fi_bench.py report: cannot write", "a-file/fi_summary.json")),
    "fi report sparse.json is a list": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-list", code=1,
                                            needles=("sparse.json is not what its stage writes", "re-run")),
    "fi report jit.json with a bad env": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-env", code=1,
                                              needles=("jit.json is not what its stage writes",)),
    "fi report balance.json with bad fields": case("fi_bench.py", "report", "--out-dir", "{tmp}/fi-fields", code=1,
                                                   needles=("balance.json is not what its stage writes",)),
    "serve logs -m of no member": case("serve.sh", "logs", "-m", "nosuch",
                                       code=2, needles=("logs -m nosuch: no such member",)),
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    """The files rows point at: a plain file, a results folder whose bench/ is a file, API key files, runs."""
    root = tmp_path_factory.mktemp("bad")
    (root / "a-file").write_text("not a directory\n")
    (root / "res").mkdir()
    (root / "res" / "bench").write_text("")
    (root / "loose-key").write_text("k3y\n")
    (root / "loose-key").chmod(0o644)
    empty = manifest_of("20261129-130000", [], [], 0)  # a valid manifest, no points recorded
    startup = {**empty, "startup_restarts": 3}  # what run_bench.py --startup writes
    for name, manifest in (("damaged", b"\xff{"), ("empty-run", json.dumps(empty)),
                           ("startup-run", json.dumps(startup))):
        (root / name).mkdir()
        (root / name / "manifest.json").write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())
    (root / "startup-run" / "startups.jsonl").write_text("")  # killed before its first restart was recorded
    make_run(root, n=8, repeats=1)  # a good run, for --compare
    for name, stage, text in (("fi-list", "sparse", "[1]"), ("fi-env", "jit", '{"env": "y"}'),
                              ("fi-fields", "balance", '{"cases": "x"}')):  # fi_bench.py results of the wrong shape
        (root / name).mkdir()
        (root / name / f"{stage}.json").write_text(text)
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    (root / "work" / "server").mkdir(parents=True)
    (root / "work" / "server" / "server.log").write_text("a server ran\n")
    return root


def test_there_are_enough_cases_and_every_script_in_scope_has_some():
    scripts = {Path(c.argv[1] if c.argv[0] == PY else c.argv[0]).name for c in CASES.values()}
    assert len(CASES) >= 45
    assert scripts == {"setup_host.sh", "serve.sh", "smoke_test.py", "run_bench.py", "make_dashboard.py",
                       "fi_trace.py", "fi_bench.py"}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_naming_the_setting_and_its_source(name: str, tmp: Path) -> None:
    row = CASES[name]
    env = {**os.environ, "WORK_DIR": str(tmp / "work"), "RESULTS_DIR": str(tmp / "results"), "LLMHOST_CONFIG": "",
           "SGLANG_PYTHON": PY, "API_KEY_FILE": "", "OPENAI_API_KEY": "", "TMUX_TMPDIR": str(tmp)}
    env.pop("TMUX", None)
    local = tmp / f"{len(name)}-{sum(map(ord, name))}.env"

    def fill(text: str) -> str:
        return text.replace("{tmp}", str(tmp)).replace("{local}", str(local))

    if row.local is not None:
        local.write_bytes(row.local if isinstance(row.local, bytes) else row.local.encode())
        env["LLMHOST_CONFIG"] = str(local)
    env.update({k: fill(v) for k, v in row.env.items()})
    proc = subprocess.run(list(map(fill, row.argv)), cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == row.code if row.code is not None else proc.returncode != 0, (proc.returncode,
                                                                                         proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    for needle in map(fill, row.needles):
        assert needle in proc.stderr, proc.stderr


@pytest.mark.parametrize("script", ["setup_host.sh", "serve.sh", "smoke_test.py", "run_bench.py", "make_dashboard.py"])
def test_help_is_usage_on_stdout_and_exit_0_even_with_a_bad_setting(script: str) -> None:
    """--help must work for the user who is trying to find out which setting is wrong."""
    argv = [PY, script, "--help"] if script.endswith(".py") else [f"./{script}", "--help"]
    proc = subprocess.run(argv, cwd=REPO, env={**os.environ, "PORT": "abc"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == "" and len(proc.stdout.splitlines()) > 5, proc.stderr
