"""How hugelab talks to a redis-server outside redis-benchmark: its PING (readiness) and
SHUTDOWN through 127.0.0.1 (a guest's forward too), and its argv as its own daemon in a user's
domain or behind a guest's NIC."""

from __future__ import annotations

from hugelab.workloads.serverkind import answers, tell

_PING = b"*1\r\n$4\r\nPING\r\n"
_SHUTDOWN = b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n"


def ready(port: int) -> bool:
    """Whether a redis server answers PING through 127.0.0.1:port."""
    return answers(port, _PING, b"+PONG")


def stop(port: int) -> None:
    tell(port, _SHUTDOWN)


DOMAIN_PORT = 16379  # not 6379, where a user's guest may run its own redis-server


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """redis-server as its own daemon in a user's domain: --daemonize yes, its pid in
    `pidfile`, its log beside it (pure)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--daemonize":
            out[i + 1] = "yes"
    return [*out, "--pidfile", pidfile, "--logfile", pidfile.removesuffix(".pid") + ".log"]


def guest_argv(argv: list[str]) -> list[str]:
    """Redis 7 in protected mode answers only loopback clients, and forwarded connections come
    from slirp's 10.0.2.2: `--protected-mode no` in the guest, whose NIC is reachable from
    nothing but the host's 127.0.0.1 forward (restrict=on)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--protected-mode":
            out[i + 1] = "no"
    return out
