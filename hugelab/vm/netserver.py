"""The server side of a client/server workload, run inside a guest and reached from the host.

The guest has one NIC on QEMU user networking with `restrict=on` and a port forward
127.0.0.1:HOST_PORT (host) -> 10.0.2.15:GUEST_PORT (guest) (see own.qemu_args.netdev). `GuestServer`
starts the server there and returns a handle whose `client_port` is HOST_PORT, so the client runs
on the host against 127.0.0.1 as it does natively:

    side = GuestServer(guest.target, host_port=41234, guest_port=port, how=KIND.server)
    workload_with(server=side).run(NativeTarget(), "thp")    # the server in the guest

How it works, and why:

- The server argv is built for 127.0.0.1:GUEST_PORT like the native one; every `127.0.0.1` in it
  becomes the guest's NIC address, because slirp delivers forwarded connections there (a socket
  bound to the guest's loopback would never see them).
- The agent runs one request at a time and its `exec` blocks until the process ends, so the
  server runs in a host thread calling `target.exec(argv, timeout=max_run_s)`. While it runs the
  agent answers nothing else; the timeout bounds that in every case.
- Readiness is judged by a real protocol answer through the forward, never by a bare connect:
  slirp accepts host-side connections even when nothing listens in the guest (it resets them a
  moment later). Each kind declares its probe (hugelab.workloads.kind.ServerInGuest); a server
  that cannot be probed (a one-off server that counts any connection as its test) has none,
  and the handle's `retry_until` tells its client to retry while it never got a connection.
- Stopping also goes through the forward, since the agent is busy: each kind declares its
  stopper, in its own protocol. Servers that ended on their own are just joined. A server that still runs after that makes `stuck()` true: the caller should
  close the guest (which ends the agent's exec) rather than wait for `max_run_s`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from hugelab.errors import HugelabError, ToolMissingError, WorkloadError
from hugelab.vm.own.initramfs import GUEST_NET_ADDR
from hugelab.workloads.base import ExecResult, Place, Target
from hugelab.workloads.kind import ServerInGuest
from hugelab.workloads.serverside import LOOPBACK, ServerHandle
from hugelab.workloads.toolrun import tail


def guest_argv(argv: list[str], how: ServerInGuest | None = None) -> list[str]:
    """The server argv for the guest (pure): the loopback address becomes the guest NIC's, and
    the kind's own changes for a server reached through the forward (`how.guest_argv`)."""
    out = [GUEST_NET_ADDR if a == LOOPBACK else a for a in argv]
    if how is not None and how.guest_argv is not None:
        out = how.guest_argv(out)
    return out


@dataclass
class GuestServerHandle:
    """A server running in a guest; `client_port` is the host end of its port forward."""

    client_port: int
    tool: str
    argv: list[str]
    target_name: str
    stop_wait_s: float
    stopper: Callable[[int], None] | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)
    _result: ExecResult | None = field(default=None, repr=False)
    _error: BaseException | None = field(default=None, repr=False)
    _retry_until: float = 0.0

    def _serve(self, target: Target, timeout: float) -> None:
        try:
            self._result = target.exec(self.argv, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of start()/stop()
            self._error = exc

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def retry_until(self) -> float:
        """time.monotonic() until which a client may retry 'never connected' failures."""
        return self._retry_until if self.running() else 0.0

    def output(self) -> str:
        if self._result is not None:
            r = self._result
            text = (r.stdout + "\n" + r.stderr).strip()
            if r.returncode:
                text += f"\n[{self.tool} exited with {r.returncode} in guest {self.target_name}]"
            return tail(text, 50)
        if self._error is not None:
            msg = self._error.message if isinstance(self._error, HugelabError) else str(self._error)
            return f"[{self.tool} in guest {self.target_name}: {msg}]"
        return ""

    def stop(self) -> str:
        if self.running():
            if self.stopper is not None:
                self.stopper(self.client_port)
            assert self._thread is not None
            self._thread.join(self.stop_wait_s)
        if self.running():
            return (f"[{self.tool} still running in guest {self.target_name}; it ends at its "
                    "timeout]")
        if isinstance(self._error, ToolMissingError):
            raise self._error  # the root cause, rather than the client's "cannot connect"
        return self.output()


@dataclass
class GuestServer:
    """A ServerSide that runs the server in a guest behind a 127.0.0.1 port forward.

    `target` is the guest's Target (its `exec` runs argv in the guest and blocks until it ends),
    `host_port`/`guest_port` the two ends of a forward the guest was booted with.
    `max_run_s` bounds the server's whole life in the guest; `ready_timeout_s` how long it may
    take to start answering."""

    target: Target
    host_port: int
    guest_port: int
    ready_timeout_s: float = 60.0
    max_run_s: float = 600.0
    stop_wait_s: float = 30.0
    how: ServerInGuest | None = None  # the kind's probe, stopper and argv changes
    handles: list[GuestServerHandle] = field(default_factory=list, repr=False)
    # its servers' /proc is the guest's: a server kind watches its own from inside
    # (hugelab.workloads.serverkind)
    place: ClassVar[Place] = Place.GUEST

    def stuck(self) -> bool:
        """Whether a server it started could not be stopped (the agent is still busy with it)."""
        return any(h.running() for h in self.handles)

    def start(self, argv_for_port: Callable[[int], list[str]], tool: str) -> ServerHandle:
        argv = guest_argv(argv_for_port(self.guest_port), self.how)
        name = str(getattr(self.target, "name", "guest"))
        handle = GuestServerHandle(self.host_port, tool, argv, name, self.stop_wait_s,
                                   self.how.stop if self.how else None)
        thread = threading.Thread(target=handle._serve, args=(self.target, self.max_run_s),
                                  name=f"hugelab-{tool}-{name}", daemon=True)
        handle._thread = thread
        self.handles.append(handle)
        deadline = time.monotonic() + self.ready_timeout_s
        handle._retry_until = deadline
        thread.start()
        probe = self.how.ready if self.how else None
        if probe is None:
            return handle  # the client retries until `retry_until`
        while not probe(self.host_port):
            if not handle.running() or time.monotonic() > deadline:
                self._fail(handle, argv, tool)
            time.sleep(0.2)
        return handle

    def _fail(self, handle: GuestServerHandle, argv: list[str], tool: str) -> None:
        exited = not handle.running()
        out = handle.stop()
        if exited and isinstance(handle._error, HugelabError) and handle._result is None:
            raise handle._error
        why = ("exited" if exited else
               f"did not answer through 127.0.0.1:{self.host_port} within "
               f"{self.ready_timeout_s:.0f}s")
        raise WorkloadError(f"{tool} server in guest {handle.target_name} {why}: "
                            f"{' '.join(argv)}\n  " + (out or "(no output)").replace("\n", "\n  "))
