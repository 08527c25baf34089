"""Start SGLang with its scheduler's imports done beside the launcher's, not after them (SCHEDULER_PRELOAD=on or
standby).

    SGLANG_PYTHON llmhost/serve/launcher/preloaded_launch.py [--standby N] sglang.launch_server LAUNCH_SERVER_ARGS...

does what `python -m sglang.launch_server LAUNCH_SERVER_ARGS...` does, sooner. That command first imports SGLang
(torch, transformers, SGLang's own modules: 13 s on the H200 host); SGLang 0.5.17 then starts its scheduler and
detokenizer with multiprocessing's "spawn", and each new interpreter imports SGLang again (the scheduler 15 s) before
it touches the GPU. Here the third-party modules the scheduler needs (PRELOAD: torch, transformers, ...: most of its
import time) are imported while the launcher imports itself, and SGLang's `mp.set_start_method("spawn")` is pointed
at the processes that hold them:
- on (no --standby): a fork server, which forks each of SGLang's processes with them imported;
- --standby N: N interpreters spawned at once by the launcher, each of which becomes one of SGLang's processes when
  SGLang starts it (pickled as spawn pickles it, its pipes sent as the fork server sends them); no fork, and a
  process beyond N is spawned as usual. With several tokenizer processes, uvicorn's workers (which it starts through
  `multiprocessing.get_context("spawn")`, the listening socket among their arguments) become standbys as well.
SGLang's own modules are imported only then: they read the GPU's properties while imported.

What spawn gave those processes, they keep:
- the launcher's environment as it is when SGLang starts each one (SGLang sets NCCL, CUDA and Prometheus variables
  just before; CUDA_VISIBLE_DEVICES per rank), applied before SGLang's code runs in it;
- an interpreter that had not initialised CUDA: while PRELOAD is imported torch's lazy CUDA initialisation raises, so
  an import that would touch the GPU is left to SGLang's process (server.log says which: "[preload] ...");
- "spawn" for the processes they start themselves (the data-parallel controller's ranks);
- SIGQUIT, which a failing scheduler sends its parent, reaches the launcher: the fork server passes it on (a standby
  is the launcher's child), so SGLang's own clean-up runs.
What needs spawn itself (--enable-memory-saver's LD_PRELOAD, SGLANG_NUMA_BIND_V2's numactl) is launched without this
file (llmhost/serve/spec.py).

Run by path with the Python that has SGLang; stdlib only. Its folder holds only this file, because that folder becomes
the first entry of sys.path in every SGLang process.
"""
from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing
import os
import runpy
import signal
import socket
import struct
import sys
from multiprocessing import context, forkserver, popen_fork, popen_forkserver, popen_spawn_posix, process, reduction
from multiprocessing import resource_tracker, spawn, util

MODULE = "preloaded_launch"  # this file's name on sys.path: the fork server's preload, and what run_in pickles as
HERE = os.path.dirname(os.path.abspath(__file__))
# The outermost modules outside SGLang that SGLang 0.5.17's scheduler imports (python -X importtime on the H200 host:
# 23 of its 27 s of imports), torch first so that CUDA is guarded before the rest. Not SGLang's own, nor sgl_kernel,
# flashinfer or triton: they read the GPU's properties while imported, and CUDA initialised in the fork server cannot
# be used by a process forked from it (torch refuses: "Cannot re-initialize CUDA in forked subprocess"), and a standby
# has not yet got the environment of the process it becomes. Those are imported after the fork or the hand-over.
PRELOAD = ("torch", "torchvision.io", "torch._inductor.compile_fx", "transformers.generation.candidate_generator",
           "transformers", "torch._dynamo.repro.after_dynamo", "transformers.models.llama", "openai.types.responses",
           "transformers.modeling_layers", "compressed_tensors.config", "torch.utils.cpp_extension", "fastapi",
           "numpy", "requests", "aiohttp")
LAUNCHER_PID = "LLMHOST_PRELOAD_LAUNCHER"  # only in the fork server's start-up environment: whom SIGQUIT goes on to
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # torch.cuda.is_available() through NVML, without initialising CUDA


class CudaTouched(ImportError):
    """Raised while PRELOAD is imported when an import initialises CUDA: SGLang's process imports that module."""

    raised = 0  # how many times, so that an import which caught it is told


class LauncherEnviron(dict):
    """The launcher's environment when SGLang starts a process. It is applied where it is unpickled: in the forked
    process, before SGLang's target function and arguments are (unpickling them imports SGLang's modules)."""

    def __reduce__(self):
        return apply_environ, (dict(self),)


def apply_environ(environ: dict[str, str]) -> dict[str, str]:
    os.environ.clear()
    os.environ.update(environ)
    return environ


def run_in(environ: LauncherEnviron, target, *args, **kwargs):
    """In a forked process, SGLang's target with what spawn gives it: the launcher's environment (`environ`, applied
    when it was unpickled), "spawn" for the processes it starts, Prometheus set up from that environment."""
    multiprocessing.set_start_method("spawn", force=True)
    values = sys.modules.get("prometheus_client.values")
    if values is not None:  # it picks multiprocess mode from PROMETHEUS_MULTIPROC_DIR when imported: pick again
        values.ValueClass = values.get_value_class()
    return target(*args, **kwargs)


class PreloadedProcess(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        if process_obj._target is not None:
            process_obj._target = functools.partial(run_in, LauncherEnviron(os.environ), process_obj._target)
        return context.ForkServerProcess._Popen(process_obj)


class PreloadedContext(context.ForkServerContext):
    Process = PreloadedProcess


def point_spawn_at(ctx: PreloadedContext | StandbyContext) -> None:
    """SGLang's `mp.set_start_method("spawn", force=True)` makes `mp.Process` start in `ctx` instead. A standby
    context also answers `multiprocessing.get_context("spawn")`, which uvicorn asks for when it starts SGLang's
    tokenizer processes (--tokenizer-worker-num > 1): they become standbys too."""
    if isinstance(ctx, StandbyContext):
        context._concrete_contexts["spawn"] = ctx
    default = context._default_context
    original = default.set_start_method

    def set_start_method(method, force=False):
        if method == "spawn":
            original(method, force)  # spawn's own checks (an already-set method without force raises)
            default._actual_context = ctx
        else:
            original(method, force)

    default.set_start_method = set_start_method
    multiprocessing.set_start_method = set_start_method


def start_fork_server(ctx: PreloadedContext) -> None:
    """The fork server, importing PRELOAD from now on; returns at once. It finds this file through PYTHONPATH:
    Python 3.11's fork server imports its preload before it takes the launcher's sys.path."""
    ctx.set_forkserver_preload([MODULE])
    with finding_this_file({LAUNCHER_PID: str(os.getpid())}):
        forkserver.ensure_running()


@contextlib.contextmanager
def finding_this_file(extra: dict[str, str] | None = None):
    """The launcher's environment with this file's folder first on PYTHONPATH (and `extra`), for a process started
    inside the block; restored after it."""
    changes = {"PYTHONPATH": os.pathsep.join(filter(None, (HERE, os.environ.get("PYTHONPATH")))), **(extra or {})}
    saved = {key: os.environ.get(key) for key in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _when_fork_server() -> None:
    """Run on import: in the fork server (started by start_fork_server), pass SIGQUIT on to the launcher and import
    PRELOAD with CUDA kept uninitialised."""
    launcher = os.environ.pop(LAUNCHER_PID, None)
    if not (launcher and launcher.isdigit() and int(launcher) == os.getppid()):
        return
    signal.signal(signal.SIGQUIT, lambda *_: os.kill(int(launcher), signal.SIGQUIT))
    preload_modules()
    os.register_at_fork(after_in_child=after_fork)


def preload_modules() -> None:
    """Import PRELOAD with torch's lazy CUDA initialisation refused (undo_cuda_guard lifts it)."""
    os.environ[NVML_CHECK] = "1"
    for name in PRELOAD:
        before = CudaTouched.raised
        try:
            __import__(name)
        except CudaTouched:
            print(f"[preload] {name} initialises CUDA when imported: left to SGLang's process", file=sys.stderr)
        except Exception:  # not installed, or broken: SGLang's own import after the fork says so
            pass
        else:
            if CudaTouched.raised > before:
                print(f"[preload] warning: {name} tried to initialise CUDA when imported and went on without it "
                      "(set SCHEDULER_PRELOAD=off if SGLang misbehaves)", file=sys.stderr)
        guard_cuda()


def after_fork() -> None:
    """In each process the fork server forks, first: CUDA may be initialised, SIGQUIT is its own again."""
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    undo_cuda_guard()


def undo_cuda_guard() -> None:
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and hasattr(cuda._lazy_init, "__wrapped__"):
        cuda._lazy_init = cuda._lazy_init.__wrapped__


def guard_cuda() -> None:
    """Once torch is imported: its lazy CUDA initialisation raises CudaTouched (after_fork undoes this)."""
    cuda = sys.modules.get("torch.cuda")
    if cuda is None or hasattr(cuda._lazy_init, "__wrapped__"):
        return
    original = cuda._lazy_init

    @functools.wraps(original)
    def refuse():
        CudaTouched.raised += 1
        raise CudaTouched("torch.cuda._lazy_init in the fork server")

    cuda._lazy_init = refuse


# --- standby: spawned interpreters that import PRELOAD before SGLang asks for a process ----------------------------

MAX_FDS = 256  # file descriptors one hand-over may carry (SGLang passes a few pipes), as the fork server's limit


class Standby:
    """A spawned interpreter, a child of the launcher, that imported PRELOAD and waits on `sock` for a process to
    become: what spawn would have started later, with the same Python, minus the wait for its imports."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        tracker_fd = resource_tracker.getfd()  # the launcher's resource tracker, as spawn passes it on
        code = f"import {MODULE}; {MODULE}.standby_main({theirs.fileno()}, {tracker_fd})"
        python = spawn.get_executable()
        with finding_this_file():
            self.pid = util.spawnv_passfds(python, [python, *util._args_from_interpreter_flags(), "-c", code],
                                           [theirs.fileno(), tracker_fd])
        theirs.close()
        self.sock = ours

    def hand_over(self, fds: list[int], payload: bytes) -> int:
        """Send the process to become (`fds` first, then `payload`); the read end of a pipe that the process holds
        open until it exits: its sentinel."""
        sentinel, held = os.pipe()
        try:
            reduction.sendfds(self.sock, [held, *fds])
            self.sock.sendall(struct.pack("!Q", len(payload)) + payload)
        finally:
            os.close(held)
        return sentinel


STANDBYS: list[Standby] = []


class StandbyPopen(popen_fork.Popen):
    """multiprocessing's Popen for a process started in a standby: pickled as spawn pickles it (the launcher's
    environment first), its file descriptors sent as the fork server sends them; waited on as the launcher's child."""

    method = "spawn"
    DupFd = popen_forkserver._DupFd  # in the standby: forkserver.get_inherited_fds()[i], set from what it received

    def __init__(self, process_obj, standby: Standby):
        self._fds: list[int] = []
        self._standby = standby
        super().__init__(process_obj)

    def duplicate_for_child(self, fd: int) -> int:
        self._fds.append(fd)
        return len(self._fds) - 1

    def _launch(self, process_obj) -> None:
        payload = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(dict(os.environ), payload)  # the launcher's environment at this start
            reduction.dump(spawn.get_preparation_data(process_obj._name), payload)
            reduction.dump(process_obj, payload)
        finally:
            context.set_spawning_popen(None)
        self.sentinel = self._standby.hand_over(self._fds, payload.getvalue())
        self.pid = self._standby.pid
        self.finalizer = util.Finalize(self, util.close_fds, (self.sentinel, self._standby.sock.detach()))


class StandbyProcess(context.SpawnProcess):
    @staticmethod
    def _Popen(process_obj):
        while STANDBYS:
            standby = STANDBYS.pop(0)
            try:
                return StandbyPopen(process_obj, standby)
            except OSError as exc:  # it died before the hand-over: the next one, or spawn
                print(f"[preload] standby {standby.pid} is gone ({exc.strerror or exc}): not used", file=sys.stderr)
                standby.sock.close()
                try:
                    os.waitpid(standby.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        return popen_spawn_posix.Popen(process_obj)  # none left: spawn itself


class StandbyContext(context.SpawnContext):
    Process = StandbyProcess


def start_standbys(count: int) -> None:
    STANDBYS.extend(Standby() for _ in range(count))


def standby_main(sock_fd: int, tracker_fd: int) -> None:
    """In a standby: import PRELOAD, then wait for the process to become and run it as spawn's child does; exit
    quietly when the launcher ends without one."""
    try:
        preload_modules()
        undo_cuda_guard()
        sock = socket.socket(fileno=sock_fd)
        fds = reduction.recvfds(sock, MAX_FDS + 1)
        size = struct.unpack("!Q", _receive(sock, 8))[0]
        payload = io.BytesIO(_receive(sock, size))
    except (EOFError, OSError, RuntimeError, KeyboardInterrupt):
        os._exit(0)
    resource_tracker._resource_tracker._fd = tracker_fd
    forkserver._forkserver._inherited_fds = fds[1:]  # what popen_forkserver._DupFd.detach() hands back
    os.environ.clear()
    os.environ.update(reduction.pickle.load(payload))
    process.current_process()._inheriting = True
    try:
        spawn.prepare(reduction.pickle.load(payload))
        process_obj = reduction.pickle.load(payload)
    finally:
        del process.current_process()._inheriting
    sys.exit(process_obj._bootstrap(parent_sentinel=sock.detach()))


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def main(argv: list[str]) -> None:
    standbys = None
    if argv[:1] == ["--standby"] and len(argv) > 1 and argv[1].isdigit():
        standbys, argv = int(argv[1]), argv[2:]
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: preloaded_launch.py [--standby N] MODULE [ARGS...]   (e.g. sglang.launch_server "
                 "--model-path ...)")
    if standbys is None:
        ctx = PreloadedContext()
        start_fork_server(ctx)
    else:
        ctx = StandbyContext()
        start_standbys(standbys)
    point_spawn_at(ctx)
    sys.argv = list(argv)  # run_module puts the module's file first, as -m does
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


_when_fork_server()

if __name__ == "__main__":
    # this file again under its own name, so that run_in pickles by a name SGLang's processes can import
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import preloaded_launch

    preloaded_launch.main(sys.argv[1:])
