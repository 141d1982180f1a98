"""hugelab-reqmix, the request-interleaving client: its argv and its JSON report (pure).

The client holds `clients` connections to every arm's server and alternates short windows
of operations across the servers, a random order of them and its mirror per block (ABBA),
timing each window. `reqmix_argv` builds its command line from `ReqmixSettings`; the
`*_server` helpers build the `--server` values; `parse_output` reads its JSON into a
`ReqmixResult`; `effects` gives every arm's window effect against one of them (a trial's
metrics are made from a result in hugelab.workloads.requests.arm_metrics).

A password never goes on the command line: libpq reads PGPASSWORD (or a passfile) and the
MariaDB protocol MYSQL_PWD from the client's environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from hugelab.errors import HugelabError
from hugelab.stats.windows import WindowEffect, window_effect

PG_BUILTINS = ("select-only", "simple-update", "tpcb-like")
SETTLE_NS = 1_000_000_000  # a trial's first second: its new connections' first touches


class ReqmixOutputError(HugelabError):
    """hugelab-reqmix's output could not be read."""

    cause = "workload"


@dataclass(frozen=True)
class ReqmixSettings:
    """What the client runs. Exactly one of window_ops/window_ms, one of duration_s/windows."""

    servers: tuple[str, ...]
    clients: int = 1
    window_ops: int | None = 20
    window_ms: int | None = None
    warm_ops: int = 0
    duration_s: float | None = 10.0
    windows: int | None = None
    seed: int = 1
    keyspace: int = 10000
    value_size: int = 100
    set_ratio: float = 0.0
    preload: bool = False
    pg_scale: int = 1
    pg_builtin: str | None = None
    pg_file: Path | None = None
    tables: int = 1
    table_size: int = 10000
    range_size: int = 100

    def __post_init__(self) -> None:
        if not self.servers:
            raise HugelabError("reqmix: no servers")
        if (self.window_ops is None) == (self.window_ms is None):
            raise HugelabError("reqmix: give window_ops or window_ms (one of them)")
        if (self.duration_s is None) == (self.windows is None):
            raise HugelabError("reqmix: give duration_s or windows (one of them)")
        if self.pg_builtin is not None and self.pg_builtin not in PG_BUILTINS:
            raise HugelabError(f"reqmix: unknown pgbench script {self.pg_builtin!r}; "
                               f"known: {', '.join(PG_BUILTINS)}")
        if self.pg_builtin is not None and self.pg_file is not None:
            raise HugelabError("reqmix: give pg_builtin or pg_file, not both")
        if self.clients < 1 or self.warm_ops < 0 or not 0 <= self.set_ratio <= 1:
            raise HugelabError("reqmix: clients >= 1, warm_ops >= 0, 0 <= set_ratio <= 1")


def redis_server(host: str, port: int) -> str:
    """The --server value for a Redis server."""
    return f"redis:{host}:{port}"


def memcached_server(host: str, port: int) -> str:
    """The --server value for a memcached server."""
    return f"memcached:{host}:{port}"


def http_server(host: str, port: int) -> str:
    """The --server value for an HTTP cache (Varnish): GETs of /key:N."""
    return f"http:{host}:{port}"


def _conninfo_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def pg_server(params: Mapping[str, str | int]) -> str:
    """The --server value for PostgreSQL: a libpq conninfo, every value quoted."""
    if "password" in params:
        raise HugelabError("reqmix: a password goes in PGPASSWORD, never on the command line")
    return "pg:" + " ".join(f"{k}={_conninfo_value(str(v))}" for k, v in params.items())


def mysql_server(db: str, socket: str | None = None, host: str | None = None,
                 port: int | None = None, user: str | None = None) -> str:
    """The --server value for MariaDB/MySQL (a password goes in MYSQL_PWD)."""
    parts = {"socket": socket, "db": db, "user": user, "host": host, "port": port}
    for key, value in parts.items():
        if value is not None and ("," in str(value) or "=" in str(value)):
            raise HugelabError(f"reqmix: mysql {key} {value!r} may not contain ',' or '='")
    return "mysql:" + ",".join(f"{k}={v}" for k, v in parts.items() if v is not None)


_FLAGS = (("clients", "--clients"), ("window_ops", "--window-ops"),
          ("window_ms", "--window-ms"), ("warm_ops", "--warm-ops"),
          ("duration_s", "--duration-s"), ("windows", "--windows"), ("seed", "--seed"),
          ("keyspace", "--keyspace"), ("value_size", "--value-size"),
          ("set_ratio", "--set-ratio"), ("pg_scale", "--pg-scale"),
          ("pg_builtin", "--pg-builtin"), ("pg_file", "--pg-file"), ("tables", "--tables"),
          ("table_size", "--table-size"), ("range_size", "--range-size"))


def reqmix_argv(binary: Path | str, settings: ReqmixSettings) -> list[str]:
    """The client's command line for these settings."""
    argv = [str(binary)]
    for server in settings.servers:
        argv += ["--server", server]
    for attr, flag in _FLAGS:
        value = getattr(settings, attr)
        if value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    if settings.preload:
        argv.append("--preload")
    return argv


@dataclass(frozen=True)
class Window:
    """One window: its arm, block and position in the block, timed ops, wall and CPU ns, and
    when it started after the client's windows began (-1: a report without it)."""

    arm: int
    block: int
    pos: int
    ops: int
    ns: int
    cpu_ns: int
    t_ns: int = -1


@dataclass(frozen=True)
class ArmLatency:
    """One arm's per-operation latencies (ns) over its timed ops, and its op totals."""

    arm: int
    protocol: str
    ops_total: int      # every op the client sent in windows, warm-up ops included
    preloaded: int      # items written by --preload before the windows
    timed_ops: int
    mean_ns: float
    p50_ns: float
    p90_ns: float
    p99_ns: float
    p999_ns: float
    max_ns: float


@dataclass(frozen=True)
class ReqmixResult:
    """The client's report."""

    arms: int
    clients: int
    window_ops: int
    window_ms: int
    warm_ops: int
    seed: int
    servers: tuple[str, ...]
    blocks: int
    wall_ns: int
    user_ns: int
    sys_ns: int
    latency: tuple[ArmLatency, ...]
    windows: tuple[Window, ...]
    connect_order: tuple[int, ...] = ()  # servers connected and preloaded in this order

    def columns(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """(arms, blocks, ops, ns) of the windows, for hugelab.stats.windows."""
        return _columns(self.windows)

    def settled(self, after_ns: int = SETTLE_NS) -> tuple[list[int], list[int], list[int],
                                                          list[int]]:
        """columns() of the blocks whose every window started `after_ns` or later: a trial
        without its first second, where each server's new connections first touch its memory
        (a 4 KiB server's backends fault in its shared buffers; docs/benchmarks.md). Empty
        where the report has no window times."""
        first: dict[int, int] = {}
        for x in self.windows:
            first[x.block] = min(first.get(x.block, x.t_ns), x.t_ns)
        return _columns([x for x in self.windows if first[x.block] >= after_ns])

    def client_cpu_share(self, arm: int | None = None) -> float:
        """The client's CPU time over the windows' wall time (all arms, or one): its
        share of each window (summed over its client threads, so up to `clients`)."""
        sel = [w for w in self.windows if arm is None or w.arm == arm]
        wall = sum(w.ns for w in sel)
        return sum(w.cpu_ns for w in sel) / wall if wall else float("nan")


def _columns(w: Sequence[Window]) -> tuple[list[int], list[int], list[int], list[int]]:
    return ([x.arm for x in w], [x.block for x in w], [x.ops for x in w], [x.ns for x in w])


def _build(cls: type, raw: Mapping[str, Any]) -> Any:
    names = [f.name for f in fields(cls)]
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [n for n in required if n not in raw]
    if missing:
        raise ReqmixOutputError(f"hugelab-reqmix output lacks {', '.join(missing)}")
    return cls(**{n: raw[n] for n in names if n in raw})


def parse_output(text: str) -> ReqmixResult:
    """Read the client's JSON report."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReqmixOutputError(f"hugelab-reqmix printed no JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("reqmix") != 1:
        raise ReqmixOutputError("not a hugelab-reqmix report (version 1)")
    try:
        top = dict(raw, servers=tuple(raw["servers"]), user_ns=raw["rusage"]["user_ns"],
                   sys_ns=raw["rusage"]["sys_ns"],
                   latency=tuple(_build(ArmLatency, x) for x in raw["latency"]),
                   windows=tuple(_build(Window, x) for x in raw["windows"]),
                   connect_order=tuple(raw.get("connect_order", ())))
    except (KeyError, TypeError) as exc:
        raise ReqmixOutputError(f"hugelab-reqmix output is malformed: {exc}") from exc
    result: ReqmixResult = _build(ReqmixResult, top)
    return result


def effects(result: ReqmixResult, reference: int = 0, level: float = 0.95
            ) -> dict[int, WindowEffect]:
    """Every other arm against `reference`, from this trial's windows."""
    arms, blocks, ops, ns = result.columns()
    return {a: window_effect(arms, blocks, ops, ns, a, reference, level)
            for a in range(result.arms) if a != reference}


def server_spec_protocols(servers: Sequence[str]) -> list[str]:
    """The protocol of each --server value (what precedes its first ':')."""
    return [s.split(":", 1)[0] for s in servers]
