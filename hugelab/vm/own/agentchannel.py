"""The host's end of hugelab's in-guest agent (vm/own/agent.py): JSON-lines requests over
QEMU's virtio-serial chardev unix socket. Results travel over it, never the console."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hugelab.errors import VMError


class AgentChannel:
    """JSON-lines requests to the in-guest agent over QEMU's chardev unix socket."""

    def __init__(self, path: Path, alive: Callable[[], bool]) -> None:
        self.path = path
        self._alive = alive
        self._sock: socket.socket | None = None
        self._buf = b""
        self._next_id = 1
        self._lock = threading.Lock()

    def connect(self, deadline: float) -> None:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.path))
                self._sock = s
                return
            except OSError:
                s.close()
                if time.monotonic() > deadline or not self._alive():
                    raise VMError(f"cannot connect to the agent socket {self.path}") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _read_line(self, deadline: float | None) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buf:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
            self._sock.settimeout(0.25)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                if not self._alive():
                    raise VMError("QEMU exited while waiting for the guest agent") from None
                continue
            if not chunk:
                raise VMError("the guest agent channel closed (guest powered off or crashed?)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, op: str, wait_s: float | None, **fields: Any) -> dict[str, Any]:
        """Send one request, return its reply; VMError when the agent does not answer in time."""
        if self._sock is None:
            raise VMError("the guest agent is not connected")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            msg = json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n"
            try:
                self._sock.sendall(msg)
            except OSError as exc:
                raise VMError(f"cannot send to the guest agent: {exc}") from exc
            deadline = None if wait_s is None else time.monotonic() + wait_s
            while True:
                try:
                    line = self._read_line(deadline)
                except TimeoutError:
                    raise VMError(f"the guest agent did not answer '{op}' within {wait_s:.0f}s",
                                  hint="the guest may be hung; see its serial log") from None
                reply = json.loads(line)
                if reply.get("id") == rid:
                    return reply
