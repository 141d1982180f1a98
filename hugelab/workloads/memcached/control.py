"""How hugelab talks to a memcached outside memcslap: its `version` (readiness) and
`shutdown` through 127.0.0.1 (a guest's forward too), and its argv as its own daemon in a user's
domain or behind a guest's NIC."""

from __future__ import annotations

from hugelab.workloads.serverkind import answers, tell


def ready(port: int) -> bool:
    """Whether a memcached answers `version` through 127.0.0.1:port."""
    return answers(port, b"version\r\n", b"VERSION")


def stop(port: int) -> None:
    """`shutdown`, which the guest's memcached accepts (started with -A there)."""
    tell(port, b"shutdown\r\n")


def guest_argv(argv: list[str]) -> list[str]:
    """In a guest memcached is stopped through the forward: -A enables its `shutdown`."""
    return [*argv, "-A"]


DOMAIN_PORT = 21211  # not 11211, where a user's guest may run its own memcached


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """memcached as its own daemon in a user's domain: -d, its pid in `pidfile` (pure)."""
    return [*argv, "-d", "-P", pidfile]
