"""The server side of client/server workloads, natively or through a guest's port forward:
`ServerSide` starts a server from an argv built for its port and returns a `ServerHandle`;
`LocalServer` runs it as a subprocess here; ports found free (`free_port`) and listening
(`listening`, `listens`, read from /proc/net/tcp), a probe's or stopper's `exchange`, and the
server's own THP picture (`server_memory`). Every hugelab network workload uses `LOOPBACK`."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from hugelab.errors import ToolMissingError, WorkloadError
from hugelab.proc import end, package_of, spawn, wait_for
from hugelab.workloads.base import Place, Target, place_of
from hugelab.workloads.toolrun import tail

LOOPBACK = "127.0.0.1"  # the only address any hugelab network workload uses


class ServerHandle(Protocol):
    """A started server. `client_port` is where a client on the client's host connects to
    127.0.0.1 (for a guest server reached through a port forward: the forwarded host port)."""

    client_port: int

    def stop(self) -> str:
        """Stop the server (if still running) and return the tail of its output."""
        ...


class ServerSide(Protocol):
    """Starts a server from an argv built for the port it must listen on.

    `argv_for_port(port)` returns the server's argv for listening on 127.0.0.1:port. A guest
    implementation runs it in the guest and returns the host end of the port forward."""

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> ServerHandle: ...


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def listening(port: int, proc_net: Path = Path("/proc/net/tcp")) -> bool:
    """Whether something LISTENs on 127.0.0.1:port (or 0.0.0.0:port), read from /proc/net/tcp.

    Read instead of probing with connect(): a probe connection would count as the one client
    of `iperf3 -s -1`."""
    try:
        return listens(proc_net.read_text(), port)
    except OSError:
        return False


def listens(proc_net_tcp: str, port: int) -> bool:
    """Whether a /proc/net/tcp text shows a LISTEN socket on 127.0.0.1 or 0.0.0.0:port
    (pure; a guest's text too)."""
    want = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    for line in proc_net_tcp.splitlines()[1:]:
        cols = line.split()
        if len(cols) > 3 and cols[1] in want and cols[3] == "0A":
            return True
    return False


@dataclass
class _LocalHandle:
    client_port: int
    proc: subprocess.Popen[str]
    log: IO[str]
    tool: str
    grace_s: float = 5.0

    def output(self) -> str:
        """Its output so far, read while it runs (without moving the offset it writes at)."""
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stop(self) -> str:
        try:
            end(self.proc, self.grace_s)
        finally:
            self.log.seek(0)
            text = self.log.read()
            self.log.close()
        return tail(text, 50)


@dataclass
class LocalServer:
    """Runs the server as a subprocess of this process on 127.0.0.1 (the native case).

    `port=None` picks a free port. Output goes to a temporary file, so a chatty server never
    blocks on a full pipe. `ready(port, pid)` says when a server that does not listen on
    127.0.0.1:port is up (PostgreSQL, on its private socket: its postmaster.pid); the stop
    is TERM, then KILL after `stop_grace_s`."""

    port: int | None = None
    ready_timeout_s: float = 10.0
    ready: Callable[[int, int], bool] | None = None
    stop_grace_s: float = 5.0

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> ServerHandle:
        port = self.port if self.port is not None else free_port()
        argv = argv_for_port(port)
        log = tempfile.TemporaryFile("w+", prefix=f"hugelab-{tool}-")
        try:
            proc = spawn(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         text=True)  # contained in the trial's scope, so its tree is evidence
        except (FileNotFoundError, ToolMissingError) as exc:
            log.close()
            name = Path(argv[0]).name
            raise ToolMissingError(name, package_of(name)) from exc
        handle = _LocalHandle(port, proc, log, tool, self.stop_grace_s)
        up = self.ready or (lambda p, _pid: listening(p))
        if not wait_for(lambda: up(port, proc.pid), self.ready_timeout_s, interval_s=0.02,
                        unless=lambda: proc.poll() is not None):
            why = (f"exited with {proc.returncode}" if proc.poll() is not None
                   else f"was not ready within {self.ready_timeout_s}s" if self.ready
                   else f"did not listen on {LOOPBACK}:{port} within {self.ready_timeout_s}s")
            out = handle.stop()
            raise WorkloadError(f"{tool} server {why}: {' '.join(argv)}\n  "
                                + (out or "(no output)").replace("\n", "\n  "))
        return handle


def output_so_far(handle: ServerHandle) -> str:
    """A running server's output so far ("" where this process does not hold it)."""
    own = getattr(handle, "output", None)
    return str(own()) if callable(own) else ""


def server_memory(handle: ServerHandle) -> dict[str, object]:
    """The running server's own THP picture (hugelab.workloads.servermem), read just
    before it stops; {} for a server this process cannot see (one in a guest). A handle
    with its own `memory()` (a server in a user's domain) reads it through the way in."""
    from hugelab.workloads.servermem import process_memory
    own = getattr(handle, "memory", None)
    if callable(own):
        return dict(own())
    proc = getattr(handle, "proc", None)
    pid = getattr(proc, "pid", None)
    return process_memory(pid) if isinstance(pid, int) else {}


def default_server(server: ServerSide | None, target: Target, tool: str,
                   port: int | None = None) -> ServerSide:
    """The server side to use: the given one, or a LocalServer (on `port` if the workload
    names one) when the client runs natively."""
    if server is not None:
        return server
    if place_of(target) is not Place.NATIVE:
        raise WorkloadError(
            f"{tool}: the client runs in target {getattr(target, 'name', '?')!r} but no server "
            "side was given; pass server=... (a ServerSide reachable from that target on "
            f"{LOOPBACK})")
    return LocalServer(port=port)


def exchange(port: int, data: bytes | None, timeout: float = 2.0) -> bytes:
    """Connect to 127.0.0.1:port, send `data`, return what comes back first (b"" on EOF): a
    server's readiness probe or stopper, through a guest's port forward or on the host."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        if data:
            s.sendall(data)
        return s.recv(256)
