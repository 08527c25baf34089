"""Port ownership from /proc (no ss/lsof) and process groups: find our own listening socket and our own group."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from llmhost.serve import procfs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")


@pytest.mark.parametrize("family, addr", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_listening_socket_is_traced_to_this_process(family, addr):
    try:
        sock = socket.socket(family)
        sock.bind((addr, 0))
    except OSError:
        pytest.skip(f"{addr} unavailable here")
    with sock:
        sock.listen()
        port = sock.getsockname()[1]
        assert os.getpid() in procfs.port_owners(port)
        assert f"pid {os.getpid()} (" in procfs.port_holder(addr, port)


def test_a_free_port_has_no_owner_and_no_holder(free_port):
    assert procfs.port_owners(free_port) == []
    assert procfs.port_holder("127.0.0.1", free_port) is None
    assert not procfs.is_listening("127.0.0.1", free_port)


def test_a_bound_but_not_listening_socket_is_not_a_holder():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert procfs.port_owners(sock.getsockname()[1]) == []


def test_a_child_listener_is_named_with_its_command_line(free_port):
    code = f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{free_port})); s.listen(); print('up', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        holder = procfs.port_holder("127.0.0.1", free_port)
        assert holder.startswith(f"pid {child.pid} (") and "import socket" in holder
        assert procfs.is_listening("127.0.0.1", free_port)
    finally:
        child.kill()
        child.wait()


def test_process_groups_list_their_members_and_end_with_them():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert procfs.pgid_of(child.pid) == child.pid
        assert procfs.group_alive(child.pid)
        assert procfs.group_pids(child.pid) == [child.pid]
        assert os.getpid() in procfs.group_pids(os.getpgid(0))
    finally:
        child.kill()
        child.wait()
    assert not procfs.group_alive(child.pid)
    assert procfs.pgid_of(child.pid) is None


def test_a_fd_closing_during_the_scan_does_not_hide_the_listener(monkeypatch):
    """A starting server opens and closes files constantly; one fd vanishing between listing and readlink
    made the whole process invisible, and serve.sh then took our own server for a stranger (seen in CI)."""
    real_readlink = os.readlink
    vanished = []

    def flaky_readlink(path, *args, **kwargs):
        target = real_readlink(path, *args, **kwargs)
        if not vanished and str(path).startswith(f"/proc/{os.getpid()}/fd/") and not target.startswith("socket:"):
            vanished.append(path)
            raise FileNotFoundError(path)
        return target

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        monkeypatch.setattr(procfs.os, "readlink", flaky_readlink)
        inodes, owners = procfs.listeners(sock.getsockname()[1])
    assert vanished, "the scan never met a vanishing fd: the test did not test anything"
    assert inodes and os.getpid() in owners
