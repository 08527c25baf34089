"""SCHEDULER_PRELOAD's launcher (on: a fork server, standby: spawned standbys) against a fake SGLang that starts its
processes as SGLang 0.5.17 does: spawn set with force, the environment changed just before each start, a pipe back,
SIGQUIT to the parent on failure. A fake torch records where it was imported and where CUDA was initialised; a fake
numpy (one of the preloaded modules) initialises it when imported."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llmhost.serve.spec import PRELOADED_LAUNCH

TORCH = '''
import os
IMPORTED_IN = os.getpid()  # the process that ran this module's code: with the preload, the fork server
SAW_START_ENV = os.environ.get("SET_BEFORE_START")  # None: imported before the launcher started the process
from torch import cuda
'''

TORCH_CUDA = '''
import os
INITIALISED_IN = None


def _lazy_init():
    global INITIALISED_IN
    INITIALISED_IN = os.getpid()
'''

NUMPY = '''
import os, torch
torch.cuda._lazy_init()  # as SGLang's modules do, reading the GPU's properties while imported
IMPORTED_IN = os.getpid()
'''

SCHEDULER = '''
import multiprocessing, os, signal, sys
import numpy, torch
IMPORTED_IN = os.getpid()


def run_scheduler_process(writer, fail):
    if fail:  # SGLang: parent_process = psutil.Process().parent(); parent_process.send_signal(SIGQUIT)
        os.kill(os.getppid(), signal.SIGQUIT)
        return
    torch.cuda._lazy_init()
    writer.send({"pid": os.getpid(), "ppid": os.getppid(), "imported_in": IMPORTED_IN,
                 "torch_imported_in": torch.IMPORTED_IN, "numpy_imported_in": numpy.IMPORTED_IN,
                 "torch_saw_start_env": torch.SAW_START_ENV,
                 "cuda_initialised_in": torch.cuda.INITIALISED_IN,
                 "set_before_start": os.environ.get("SET_BEFORE_START"), "removed": os.environ.get("REMOVED"),
                 "nested_start_method": multiprocessing.get_start_method(),
                 "sigquit_default": signal.getsignal(signal.SIGQUIT) == signal.SIG_DFL,
                 "main": sys.modules["__main__"].__name__})
'''

UVICORN_SUBPROCESS = '''
import multiprocessing, os
import torch
spawn = multiprocessing.get_context("spawn")  # as uvicorn._subprocess, when SGLang's http_server imports it


def subprocess_started(sockets, writer):  # a tokenizer process: SGLang's app on the listening socket uvicorn passes
    writer.send({"pid": os.getpid(), "ppid": os.getppid(), "torch_saw_start_env": torch.SAW_START_ENV,
                 "main_pid": multiprocessing.current_process()._parent_pid,  # SGLang: get_main_process_id()
                 "port": sockets[0].getsockname()[1]})


def get_subprocess(sockets, writer):
    return spawn.Process(target=subprocess_started, kwargs={"sockets": sockets, "writer": writer})
'''

LAUNCH_SERVER = '''
import json, multiprocessing as mp, os, signal, socket, sys, time
from sglang.srt.managers.scheduler import run_scheduler_process
from uvicorn._subprocess import get_subprocess

if __name__ == "__main__":
    fail = sys.argv[1:] == ["--fail"]
    if sys.argv[1:] == ["--kill-standbys"]:  # each standby dies before SGLang starts its process
        for standby in sys.modules["preloaded_launch"].STANDBYS:
            os.kill(standby.pid, signal.SIGKILL)
            os.waitpid(standby.pid, 0)
    signal.signal(signal.SIGQUIT, lambda *_: (print(json.dumps({"sigquit": True}), flush=True), os._exit(3)))
    mp.set_start_method("spawn", force=True)
    os.environ["SET_BEFORE_START"] = "yes"
    os.environ.pop("REMOVED", None)
    reader, writer = mp.Pipe(duplex=False)
    proc = mp.Process(target=run_scheduler_process, args=(writer, fail))
    proc.start()
    if fail:
        time.sleep(30)
    child = reader.recv()
    proc.join()
    workers = []
    if sys.argv[1:2] == ["--workers"]:  # uvicorn.run(..., workers=N) once the scheduler is up
        listening = socket.create_server(("127.0.0.1", 0))
        for _ in range(int(sys.argv[2])):
            reader, writer = mp.Pipe(duplex=False)
            worker = get_subprocess([listening], writer)
            worker.start()
            workers.append(reader.recv())
            worker.join()
        workers = [dict(w, listening=w["port"] == listening.getsockname()[1]) for w in workers]
    standbys = [s.pid for s in sys.modules["preloaded_launch"].STANDBYS] if "preloaded_launch" in sys.modules else []
    print(json.dumps({"launcher": os.getpid(), "argv": sys.argv, "child": child, "exitcode": proc.exitcode,
                      "unused_standbys": standbys, "workers": workers}), flush=True)
'''


@pytest.fixture
def fake_sglang(tmp_path) -> Path:
    managers = tmp_path / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    for folder in (tmp_path / "sglang", tmp_path / "sglang" / "srt", managers):
        (folder / "__init__.py").write_text("")
    (managers / "scheduler.py").write_text(textwrap.dedent(SCHEDULER))
    (tmp_path / "sglang" / "launch_server.py").write_text(textwrap.dedent(LAUNCH_SERVER))
    (tmp_path / "uvicorn").mkdir()
    (tmp_path / "uvicorn" / "__init__.py").write_text("")
    (tmp_path / "uvicorn" / "_subprocess.py").write_text(textwrap.dedent(UVICORN_SUBPROCESS))
    (tmp_path / "torch" / "cuda").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text(textwrap.dedent(TORCH))
    (tmp_path / "torch" / "cuda" / "__init__.py").write_text(textwrap.dedent(TORCH_CUDA))
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(textwrap.dedent(NUMPY))
    return tmp_path


def launch(root: Path, *args: str, mode: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "REMOVED": "before"}
    return subprocess.run([sys.executable, str(PRELOADED_LAUNCH), *mode, "sglang.launch_server", *args], env=env,
                          capture_output=True, text=True, timeout=60)


FORK, STANDBY = (), ("--standby", "2")


def test_the_scheduler_is_forked_with_torch_imported_and_the_launchers_environment_of_its_start(fake_sglang):
    done = launch(fake_sglang, "--port", "1")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    child = out["child"]
    assert out["argv"][1:] == ["--port", "1"]  # launch_server reads its own argv as under -m
    assert child["ppid"] != out["launcher"]  # forked by the fork server, not spawned by the launcher
    assert child["torch_imported_in"] == child["ppid"]  # preloaded there, before the fork
    assert child["torch_saw_start_env"] is None
    assert child["imported_in"] == child["pid"]  # SGLang's own modules are imported after it
    assert child["set_before_start"] == "yes" and child["removed"] is None  # the environment at proc.start()
    assert child["nested_start_method"] == "spawn" and child["sigquit_default"]
    assert child["main"] == "__mp_main__"  # the main module re-run as spawn re-runs it


def test_a_standby_becomes_the_scheduler_with_torch_imported_before_its_start_and_the_launchers_environment(
        fake_sglang):
    done = launch(fake_sglang, "--port", "1", mode=STANDBY)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    child = out["child"]
    assert out["argv"][1:] == ["--port", "1"] and out["exitcode"] == 0  # joined as the launcher's own child
    assert child["ppid"] == out["launcher"]  # spawned by the launcher itself, not forked
    assert child["torch_imported_in"] == child["pid"] and child["torch_saw_start_env"] is None  # before the start
    assert child["imported_in"] == child["pid"]  # SGLang's own modules: after the hand-over
    assert child["set_before_start"] == "yes" and child["removed"] is None  # the environment at proc.start()
    assert child["nested_start_method"] == "spawn" and child["sigquit_default"]
    assert child["main"] == "__mp_main__"
    assert len(out["unused_standbys"]) == 1  # the fake starts one process of the two standbys


def test_uvicorns_tokenizer_processes_become_standbys_with_the_listening_socket_and_the_launcher_as_main(
        fake_sglang):
    done = launch(fake_sglang, "--workers", "3", mode=("--standby", "3"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    workers = out["workers"]
    assert len(workers) == 3 and out["unused_standbys"] == []
    assert [w["torch_saw_start_env"] for w in workers[:2]] == [None, None]  # torch imported before their start
    assert workers[2]["torch_saw_start_env"] == "yes"  # the scheduler took the 3rd standby: spawned as usual
    assert all(w["ppid"] == w["main_pid"] == out["launcher"] and w["listening"] for w in workers)


def test_a_fork_server_leaves_uvicorns_spawn_alone(fake_sglang):
    done = launch(fake_sglang, "--workers", "1", mode=FORK)
    assert done.returncode == 0, done.stderr
    (worker,) = json.loads(done.stdout.strip().splitlines()[-1])["workers"]
    assert worker["torch_saw_start_env"] == "yes" and worker["listening"]  # spawned by uvicorn, as without it


def test_a_standby_that_died_is_passed_over_and_the_process_spawned(fake_sglang):
    done = launch(fake_sglang, "--kill-standbys", mode=STANDBY)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["child"]["torch_saw_start_env"] == "yes" and out["child"]["ppid"] == out["launcher"]  # spawned
    assert done.stderr.count("is gone") == 2 and out["exitcode"] == 0


def test_an_unused_standby_ends_with_the_launcher(fake_sglang):
    done = launch(fake_sglang, mode=STANDBY)
    (pid,) = json.loads(done.stdout.strip().splitlines()[-1])["unused_standbys"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.1)
    assert not _running(pid)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("mode", [FORK, STANDBY], ids=["fork", "standby"])
def test_a_module_that_initialises_cuda_is_imported_after_the_start_where_cuda_works(fake_sglang, mode):
    done = launch(fake_sglang, mode=mode)
    child = json.loads(done.stdout.strip().splitlines()[-1])["child"]
    assert "[preload] numpy initialises CUDA when imported: left to SGLang's process" in done.stderr
    assert child["numpy_imported_in"] == child["pid"] == child["cuda_initialised_in"]


def test_without_the_launcher_the_fake_spawns_as_sglang_does(fake_sglang):
    env = {**os.environ, "PYTHONPATH": str(fake_sglang)}
    done = subprocess.run([sys.executable, "-m", "sglang.launch_server"], env=env, capture_output=True, text=True,
                          timeout=60)
    child = json.loads(done.stdout.strip().splitlines()[-1])["child"]
    assert child["imported_in"] == child["pid"]  # spawn: the scheduler imported its own module


@pytest.mark.parametrize("mode", [FORK, STANDBY], ids=["fork", "standby"])
def test_a_failing_schedulers_sigquit_reaches_the_launcher(fake_sglang, mode):
    done = launch(fake_sglang, "--fail", mode=mode)
    assert done.returncode == 3 and json.loads(done.stdout.strip().splitlines()[-1]) == {"sigquit": True}


def test_no_module_is_a_usage_line_not_a_traceback():
    done = subprocess.run([sys.executable, str(PRELOADED_LAUNCH)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stderr.startswith("usage:") and "Traceback" not in done.stderr
