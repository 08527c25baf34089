"""`./serve.sh tunnel`: the ssh command a laptop runs to reach the API and the dashboard on loopback here.

The address is the one the user reached this host on (the server side of $SSH_CONNECTION), else the first
address `hostname -I` lists; no outside service is asked. Prints; writes nothing.
"""
from __future__ import annotations

import getpass
import ipaddress
import os
import socket
import subprocess

from llmhost.config import Config
from llmhost.serve.console import Console

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def this_host(environ: dict[str, str]) -> tuple[str, str]:
    """(address, ssh port) the user connected to; the port is '' when unknown."""
    parts = environ.get("SSH_CONNECTION", "").split()
    if len(parts) == 4:
        return parts[2], parts[3]
    try:
        listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []
    return (listed[0] if listed else socket.gethostname()), ""


def _is_private(addr: str) -> bool:
    """RFC 1918, carrier-grade NAT (100.64/10) and link-local IPv4: unreachable from outside their network."""
    try:
        ip = ipaddress.IPv4Address(addr)
    except ValueError:
        return False
    return any(ip in ipaddress.IPv4Network(net) for net in
               ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"))


def print_tunnel(cfg: Config, console: Console, environ: dict[str, str] | None = None) -> None:
    environ = dict(os.environ if environ is None else environ)
    addr, ssh_port = this_host(environ)
    port_opt = f"-p {ssh_port} " if ssh_port and ssh_port != "22" else ""
    target = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "0.0.0.0": "127.0.0.1",
              "::1": "[::1]", "::": "[::1]"}.get(cfg.host, cfg.host)
    if cfg.host not in LOOPBACK:
        console.warn(f"HOST={cfg.host}: the API listens beyond loopback, so anyone who reaches port {cfg.port} can "
                     "use it — prefer HOST=127.0.0.1 and this tunnel")
    if _is_private(addr):
        console.warn(f"{addr} is a private address: from outside its network, put the public address or name you "
                     "ssh to instead")
    user = environ.get("USER") or getpass.getuser()
    console.info(f"laptop tunnel: ssh {port_opt}-N -L {cfg.port}:{target}:{cfg.port} -L {cfg.dashboard_port}:127.0.0.1:"
                 f"{cfg.dashboard_port} {user}@{addr}")
    console.info(f"then on the laptop: curl http://127.0.0.1:{cfg.port}/v1/models   (dashboard: "
                 f"http://127.0.0.1:{cfg.dashboard_port}/)")
