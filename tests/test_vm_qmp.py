"""QMP connect past events that precede the greeting (vm/own/qmp.py), against a QMP server
played on a unix socket by a thread: QEMU can send VSERPORT_CHANGE before its greeting, which
made qemu.qmp fail a guest's boot with "Did not understand Greeting". And QEMU binds its monitor
socket before it listens: a client that sees the file can be refused (a CI boot failed so), so
`connect` asks again while QEMU runs."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qemu.qmp.protocol import ConnectError

from hugelab.vm.own.qmp import MAX_EARLY_EVENTS, QMP, connect

GREETING = {"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 8},
                                "package": ""}, "capabilities": []}}


def event(name: str) -> dict[str, object]:
    return {"event": name, "data": {"id": "agent0", "open": True},
            "timestamp": {"seconds": 1, "microseconds": 2}}


def messages(conn: socket.socket) -> Iterator[dict[str, object]]:
    """The JSON objects a client sends, until it hangs up."""
    buf, dec = "", json.JSONDecoder()
    while data := conn.recv(65536):
        buf += data.decode()
        while buf.strip():
            try:
                msg, end = dec.raw_decode(buf.lstrip())
            except ValueError:
                break
            buf = buf.lstrip()[end:]
            yield msg


class FakeQemu:
    """One QMP session on `path`: sends `before` (then the greeting unless `greet` is False),
    answers qmp_capabilities, then answers each command with its name and arguments; records
    what it received."""

    def __init__(self, path: Path, before: list[dict[str, object]], greet: bool = True,
                 listen_after_s: float = 0.0) -> None:
        self.before, self.greet, self.got = before, greet, []  # type: list[dict[str, object]]
        self.listen_after_s = listen_after_s
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))  # the file exists from here; connects are refused until listen
        if not listen_after_s:
            self.sock.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        if self.listen_after_s:
            time.sleep(self.listen_after_s)
            self.sock.listen(1)
        conn, _ = self.sock.accept()
        with conn:
            for m in self.before + ([GREETING] if self.greet else []):
                conn.sendall(json.dumps(m).encode() + b"\n")
            for msg in messages(conn):  # a JSON stream, as QEMU reads it: no newlines needed
                self.got.append(msg)
                ret = {} if msg["execute"] == "qmp_capabilities" else \
                    [{"asked": msg["execute"], "arguments": msg.get("arguments")}]
                conn.sendall(json.dumps({"return": ret, "id": msg.get("id")}).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "qmp.sock"


def test_connect_tolerates_an_event_before_the_greeting(sock):
    fake = FakeQemu(sock, [event("VSERPORT_CHANGE"), event("NIC_RX_FILTER_CHANGED")])
    qmp = QMP(str(sock))
    try:
        qmp.connect()
        qmp.settimeout(5.0)
        assert qmp.cmd("query-memdev") == [{"asked": "query-memdev", "arguments": {}}]
        assert [e["event"] for e in qmp.early_events] == ["VSERPORT_CHANGE",
                                                          "NIC_RX_FILTER_CHANGED"]
        assert [m["execute"] for m in fake.got] == ["qmp_capabilities", "query-memdev"]
    finally:
        qmp.close()
        fake.close()


def test_a_greeting_first_still_works_and_no_greeting_is_still_an_error(sock, tmp_path):
    fake = FakeQemu(sock, [])
    qmp = QMP(str(sock))
    try:
        qmp.connect()
        qmp.settimeout(5.0)
        assert qmp.early_events == []
        assert qmp.cmd("query-status") == [{"asked": "query-status", "arguments": {}}]
    finally:
        qmp.close()
        fake.close()
    other = tmp_path / "other.sock"
    fake = FakeQemu(other, [{"return": {}}])  # a reply is not a greeting
    qmp = QMP(str(other))
    try:
        with pytest.raises(ConnectError, match="Did not understand Greeting"):
            qmp.connect()
    finally:
        qmp.close()
        fake.close()


def test_only_events_without_a_greeting_is_an_error(sock):
    fake = FakeQemu(sock, [event("X")] * (MAX_EARLY_EVENTS + 1), greet=False)
    qmp = QMP(str(sock))
    try:
        with pytest.raises(ConnectError, match=f"no greeting after {MAX_EARLY_EVENTS} events"):
            qmp.connect()
    finally:
        qmp.close()
        fake.close()


def test_a_socket_bound_but_not_yet_listening_is_asked_again(sock):
    fake = FakeQemu(sock, [event("VSERPORT_CHANGE")], listen_after_s=0.5)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(ConnectionRefusedError):  # the state QEMU is in between bind and listen
        probe.connect(str(sock))
    probe.close()
    qmp = connect(str(sock), time.monotonic() + 10.0, alive=lambda: True)
    try:
        qmp.settimeout(5.0)
        assert qmp.cmd("query-status") == [{"asked": "query-status", "arguments": {}}]
        assert [m["execute"] for m in fake.got] == ["qmp_capabilities", "query-status"]
    finally:
        qmp.close()
        fake.close()


def test_refused_past_the_deadline_or_once_qemu_is_gone_is_an_error(sock):
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(sock))  # and never listens
    try:
        t0 = time.monotonic()
        with pytest.raises(ConnectError, match="Connection refused"):
            connect(str(sock), t0 + 0.3, alive=lambda: True)
        assert time.monotonic() - t0 >= 0.3
        calls = []
        with pytest.raises(ConnectError, match="Connection refused"):
            connect(str(sock), time.monotonic() + 30.0, alive=lambda: calls.append(1) or False)
        assert calls == [1]  # QEMU gone: not asked again
    finally:
        bound.close()
