"""QMP for hugelab's own guests: qemu.qmp's synchronous client, tolerant of events that arrive
before the greeting.

QEMU can emit an event on the monitor (VSERPORT_CHANGE when the guest opens its agent port,
for one) before the `{"QMP": ...}` greeting reaches a client that connects while the guest
boots; qemu.qmp then fails the whole boot with "Did not understand Greeting". Here the greeting
is awaited past such events (kept in `early_events`), up to `MAX_EARLY_EVENTS`; anything else
before the greeting is still an error."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from typing import Any

from qemu.qmp.error import ProtocolError
from qemu.qmp.legacy import QEMUMonitorProtocol
from qemu.qmp.message import Message
from qemu.qmp.models import Greeting
from qemu.qmp.protocol import ConnectError
from qemu.qmp.qmp_client import GreetingError, QMPClient

from hugelab.proc import end

MAX_EARLY_EVENTS = 64  # events skipped before the greeting before giving up


class EarlyEventClient(QMPClient):
    """A QMPClient whose greeting may follow events."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.early_events: list[dict[str, Any]] = []

    async def _get_greeting(self) -> Greeting:
        msg: Message | None = None
        for _ in range(MAX_EARLY_EVENTS + 1):
            msg = await self._recv()
            if "event" not in msg or "QMP" in msg:
                break
            self.early_events.append(dict(msg))
            self.logger.debug("event before the greeting: %s", msg.get("event"))
        else:
            raise GreetingError(f"no greeting after {MAX_EARLY_EVENTS} events",
                                ProtocolError("only events"))
        try:
            return Greeting(msg)
        except (ProtocolError, KeyError, TypeError) as err:
            raise GreetingError("Did not understand Greeting", err) from err


class QMP(QEMUMonitorProtocol):
    """The legacy synchronous client (connect, cmd, settimeout, close) over
    `EarlyEventClient`."""

    def __init__(self, address: str, nickname: str | None = None) -> None:
        super().__init__(address, nickname=nickname)
        self._qmp: EarlyEventClient = EarlyEventClient(nickname)

    @property
    def early_events(self) -> list[dict[str, Any]]:
        """The events QEMU sent before its greeting on the last connect."""
        return self._qmp.early_events


def connect(address: str, deadline: float, alive: Callable[[], bool]) -> QMP:
    """A negotiated QMP connection to QEMU's monitor socket at `address`, asked again while
    QEMU runs and `deadline` (monotonic) is ahead: QEMU binds the socket before it listens, so
    a client that sees the file can be refused for a moment."""
    while True:
        qmp = QMP(address)
        try:
            qmp.connect()
            return qmp
        except ConnectError as exc:
            refused = isinstance(exc.exc, (ConnectionRefusedError, FileNotFoundError))
            if not refused or not alive() or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)


def stop_qemu(proc: subprocess.Popen[bytes] | None, qmp: QMP | None) -> None:
    """End a guest's QEMU: QMP `quit` (5 s to exit), then hugelab's one TERM-then-KILL."""
    if proc is None:
        return
    if proc.poll() is None and qmp is not None:
        with contextlib.suppress(Exception):
            qmp.settimeout(3.0)
            qmp.cmd("quit")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5.0)
    end(proc, grace_s=5.0)
