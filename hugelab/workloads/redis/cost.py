"""A Redis trial's load sized from its experiment table, for the cost model (`run --dry-run`,
`plan`), before any workload is built: the keys preloaded, every test's requests and the
pipeline depth (load_size), their seconds at the host's assumed rates (load_seconds, the kind's
Kind.seconds) and, in a user's domain, what the guest does beyond that (guest_build, over
guestcost's measured rates). `workload` is the kind's class, whose fields' defaults stand for
the keys a table leaves out."""

from __future__ import annotations

from typing import Any

from hugelab.workloads.preview import GuestBuild
from hugelab.workloads.redis import guestcost, snapshot
from hugelab.workloads.serverkind import ServerKind

ASSUMED_RPS = 50_000         # requests a second per test, unpipelined, on loopback
ASSUMED_PRELOAD_PER_S = 300_000  # pipelined SETs a second
# keys a second a server loads from the snapshot's RDB: 1,000,000 keys of 1 KiB, three servers
# at once on 2 cores, blocks of 11.6 s for 5 s of load (written: 17.0 s; docs/benchmarks.md,
# "Redis at 1.1 GB: loaded or written")
ASSUMED_SNAPSHOT_PER_S = 500_000


def load_size(workload: type[ServerKind], table: dict[str, Any]) -> tuple[int, int, int]:
    """A trial's load from the table: (keys preloaded, requests of every test, pipeline)."""
    def get(key: str) -> Any:
        return workload.setting(table, key)
    keys = get("keyspace") or 0
    preload = get("preload")
    fill = keys if (preload if preload is not None else not get("rdb")) else 0
    tests = len(get("tests") or ()) or 1
    return int(fill), int(get("requests")) * tests, max(1, int(get("pipeline")))


def load_seconds(workload: type[ServerKind], table: dict[str, Any]) -> float:
    """About how long a trial's load takes, for the cost estimate: the preload, then every
    test's requests at ASSUMED_RPS (times the pipeline depth)."""
    fill, requests, pipeline = load_size(workload, table)
    return fill / ASSUMED_PRELOAD_PER_S + requests / (ASSUMED_RPS * pipeline)


def fill_seconds(workload: type[ServerKind], table: dict[str, Any],
                 app: dict[str, Any] | None = None) -> float:
    """About how long one request-level server takes to get its keys before the load (the
    kind's Kind.fill_seconds; `app` changes nothing): the preload written, or the snapshot's
    RDB loaded."""
    fill, _, _ = load_size(workload, table)
    loads = snapshot.applies(workload.setting(table, "snapshot"), fill > 0,
                             workload.setting(table, "rdb"), workload.setting(table, "persistence"))
    return fill / (ASSUMED_SNAPSHOT_PER_S if loads else ASSUMED_PRELOAD_PER_S)


def guest_build(workload: type[ServerKind], table: dict[str, Any]) -> GuestBuild:
    """What a trial in a user's domain does in the guest beyond its load at the host's rate
    (hugelab.workloads.redis.guestcost)."""
    return guestcost.guest_build(*load_size(workload, table), load_seconds(workload, table))
