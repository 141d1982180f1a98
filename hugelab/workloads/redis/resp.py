"""RESP over a socket, as hugelab speaks to a redis-server outside redis-benchmark: enough for
SET, GET, INFO, CONFIG SET, BGSAVE and BGREWRITEAOF (persistence's fork driver), with INFO's
`field:value` lines read as a dict."""

from __future__ import annotations

import socket

from hugelab.errors import WorkloadError
from hugelab.workloads.serverside import LOOPBACK


def encode(*args: str | bytes) -> bytes:
    """A command as a RESP array of bulk strings (pure)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%b\r\n" % (len(b), b))
    return b"".join(out)


def parse_reply(buf: bytes) -> tuple[bytes | int | None, int] | None:
    """One reply at the start of `buf` (pure): (value, bytes it took), or None while it is
    incomplete. Status lines as bytes, integers as int, a null bulk as None; an error reply
    raises WorkloadError with Redis's words."""
    head, sep, _ = buf.partition(b"\r\n")
    if not sep:
        return None
    took = len(head) + 2
    kind, body = head[:1], head[1:]
    if kind == b"-":
        raise WorkloadError(f"redis-server answered: {body.decode(errors='replace')}")
    if kind == b":":
        return int(body), took
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None, took
        if len(buf) < took + n + 2:
            return None
        return buf[took:took + n], took + n + 2
    return body, took


class Conn:
    """One connection to 127.0.0.1:port, its replies read in order."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, *args: str | bytes) -> None:
        self.sock.sendall(encode(*args))

    def reply(self) -> bytes | int | None:
        while (got := parse_reply(self.buf)) is None:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise WorkloadError("redis-server closed the connection")
            self.buf += chunk
        value, took = got
        self.buf = self.buf[took:]
        return value

    def call(self, *args: str | bytes) -> bytes | int | None:
        self.send(*args)
        return self.reply()

    def info(self, *sections: str) -> dict[str, str]:
        return parse_info(self.call("INFO", *sections))

    def close(self) -> None:
        self.sock.close()


def parse_info(text: bytes | str | int | None) -> dict[str, str]:
    """INFO's `field:value` lines as a dict (pure); section headers and blanks skipped."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    out: dict[str, str] = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and not key.startswith("#"):
            out[key] = value
    return out


def number(info: dict[str, str], key: str) -> float:
    """A numeric INFO field (pure); WorkloadError naming it when the server lacks it."""
    try:
        return float(info[key])
    except (KeyError, ValueError):
        raise WorkloadError(f"redis-server's INFO has no number {key!r}",
                            hint="Redis 6.2 or later reports fork and COW figures") from None
