"""Redis with persistence: forks for BGSAVE or an AOF rewrite during the load, and their price.

This module holds the settings (checked, refused where they cannot run), the server's switches
and its private directory; `forkdriver` sends the saves and runs the probe, `forks` prices them.

Redis's latency guide (redis-doc topics/latency.md) tells users to turn THP off: a fork for
BGSAVE or an AOF rewrite costs 9-13 ms per GB on bare metal (the page tables are copied), and
each copy-on-write fault of a 2 MiB page under THP is said to cost about 0.25 ms. On kernels
since 5.8 a write to a shared anonymous THP splits the PMD and copies 4 KiB (commit 3917c80280c9,
"thp: change CoW semantics for anon-THP"), so on a given host the claim is worth measuring.

`persistence = "rdb"`: the server runs with `--save ""` (no save points) in a private directory
(0700 under /var/tmp, removed after the trial, `hugelab recover` removes a killed run's), and
hugelab sends BGSAVE itself, first after `fork_every_s` seconds of load, then `fork_every_s`
after the previous save ended, for as long as the load lasts. `persistence = "aof"`: after any
preload `CONFIG SET appendonly yes` (its initial rewrite is waited for before the load, and not
counted), `--auto-aof-rewrite-percentage 0`, and BGREWRITEAOF at the same moments.

A save ends when the server says so (`rdb_bgsave_in_progress:0`, or `aof_rewrite_in_progress:0`
and `aof_rewrite_scheduled:0`, polled every 10 ms; the server itself notices its child's exit
in serverCron, 10 times a second at the default hz). Then hugelab reads INFO: per fork
`latest_fork_usec`, `rdb_last_cow_size` / `aof_last_cow_size` (the child's own private dirty
memory as it ended, Redis's COW figure), `mem_fragmentation_ratio` and `total_forks`:
evidence["forks"], and their medians and maxima in evidence["app_costs"].

A latency probe, a thread of hugelab (no process) with its own connection, sends one GET every
millisecond during the load and times it; BGSAVE is sent on a second connection without
waiting for its reply, so the probe's next GET queues behind the fork itself. Samples sent
between a save's start and its end are its window's (`forkwin_*_ms`), the others steady
(`steady_*_ms`): p50, p99, p99.9 and max, in ms. One request at a time, so a stall delays the
next sample (no coordinated-omission correction): the max is the stall, the percentiles count
it once.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hugelab import owned
from hugelab.errors import ExperimentError
from hugelab.workloads.interleave import server_problem

MODES = ("off", "rdb", "aof")
PRIVATE_WORK = Path("/var/tmp/hugelab-redis")  # the servers' private directories (owned.py)


def check(persistence: str, fork_every_s: float, preload: bool, keyspace: int | None) -> None:
    """The persistence keys of a redis workload; ExperimentError naming the key."""
    if persistence not in MODES:
        raise ExperimentError(f"redis: persistence must be one of {', '.join(MODES)}, "
                              f"got {persistence!r}",
                              hint='"rdb": BGSAVE during the load; "aof": appendonly yes and '
                                   'BGREWRITEAOF during the load')
    if not fork_every_s > 0:
        raise ExperimentError(f"redis: fork_every_s is seconds between saves, above 0, "
                              f"got {fork_every_s!r}")
    if preload and not keyspace:
        raise ExperimentError("redis: preload writes every key of keyspace; set keyspace")


def refuse_guest(persistence: str, rdb: object, arm: Any) -> None:
    """Persistence and a user's RDB run natively only (their files and the fork probe are this
    host's): an arm in a guest is refused when the file is read, not once per trial."""
    if getattr(arm, "vm", None) is None:
        return
    if persistence != "off":
        raise ExperimentError(f"arm '{arm.name}': redis persistence runs on the host only for "
                              "now (its private directory, fork driver and latency probe are "
                              "this host's)", hint='persistence = "off" for guest arms')
    if rdb:
        raise ExperimentError(f"arm '{arm.name}': redis rdb (your data set) is loaded on the "
                              "host only for now (the file is this host's; it is not copied "
                              "into guests)", hint="leave rdb out for guest arms: keyspace and "
                              "data_size write a data set of that size there")


def interleave_problem(arms: tuple[Any, ...], table: dict[str, Any]) -> tuple[str, str] | None:
    """Design "interleaved" with persistence: refused (every arm's server up at once, so one
    arm's fork would fall in another's windows)."""
    if table.get("persistence", "off") != "off":
        return ("redis persistence forks during one arm's load, and interleaved servers share "
                "the host at once", 'design = "paired" for persistence')
    return server_problem(arms, table)


def private_dir(work: Path = PRIVATE_WORK) -> Path:
    """A fresh private directory (0700) under `work`, with its owner record (hugelab.owned), so
    that `hugelab recover` removes a killed run's and never a live run's."""
    return owned.new_owned_dir(work, "redis")


def server_args(persistence: str, work: Path | None) -> list[str]:
    """Persistence switches of redis-server (pure): never a save point (hugelab sends every
    BGSAVE); a private `--dir` where persistence or a user's RDB needs one; AOF switched on
    at run time (CONFIG SET, after any preload) and never rewritten on its own."""
    args = ["--dir", str(work)] if work is not None else []
    args += ["--save", "", "--appendonly", "no"]
    if persistence == "aof":
        args += ["--auto-aof-rewrite-percentage", "0"]
    return args


def remove(work: Path | None) -> None:
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
