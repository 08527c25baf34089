"""What /proc says about ports and processes: who listens on a TCP port, process groups and their PIDs.

No ss/lsof needed (minimal hosts and containers lack them): /proc/net/tcp{,6} maps a listening port to a socket
inode, /proc/<pid>/fd maps the inode to its PIDs, /proc/<pid>/stat gives process groups. Linux only, stdlib only.
Nothing is written.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path


def listen_inodes(port: int) -> set[int] | None:
    """Socket inodes listening on TCP `port` (IPv4 + IPv6); None when /proc/net is unreadable."""
    inodes, readable = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes if readable else None


def listeners(port: int) -> tuple[set[int], list[int]] | None:
    """(listening socket inodes, PIDs holding them) from ONE read of the tables: two reads could see the
    socket appear in between and report a listener without owner. None when /proc/net is unreadable."""
    inodes = listen_inodes(port)
    if inodes is None:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    if not targets:
        return inodes, []
    return inodes, sorted(int(proc.name) for proc in Path("/proc").iterdir()
                          if proc.name.isdigit() and not targets.isdisjoint(_fd_links(proc)))


def port_owners(port: int) -> list[int] | None:
    """PIDs whose open fds include the socket listening on `port` ([] = nobody we can see; None = no /proc)."""
    found = listeners(port)
    return None if found is None else found[1]


def _fd_links(proc: Path) -> set[str]:
    """Where the open fds of /proc/<pid> point. A fd closed between listing and readlink is skipped alone: a
    starting server opens and closes files all the time, and dropping the whole process then made our own
    listener look like a stranger's. An unreadable fd dir (exited, another user's process) gives nothing."""
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return set()
    links = set()
    for fd in fds:
        try:
            links.add(os.readlink(fd))
        except OSError:
            continue
    return links


def is_listening(host: str, port: int) -> bool:
    """A connect() probe: does anything accept connections on host:port?"""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    try:
        with socket.create_connection((target, port), timeout=1.0):
            return True
    except OSError:
        return False


def describe_pid(pid: int) -> str:
    """'pid 4121 (python3 -m sglang.launch_server ...)', command cut to 100 characters."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"pid {pid} ({cmd[:100]}{'...' if len(cmd) > 100 else ''})"


def port_holder(host: str, port: int) -> str | None:
    """Who listens on the port, one phrase, or None when it is free."""
    owners = port_owners(port)
    if owners:
        return ", ".join(describe_pid(p) for p in owners)
    if owners is None and not is_listening(host, port):
        return None
    inodes = listen_inodes(port)
    if inodes or is_listening(host, port):
        return "a process this user cannot see (another user's or another container's)"
    return None


def pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) the process has used so far, seconds; None when it is gone or unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14-15
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def group_pids(pgid: int) -> list[int]:
    """Every live PID in process group `pgid` (/proc/<pid>/stat field 5)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return sorted(pids)
