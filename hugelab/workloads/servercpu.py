"""A running server's CPU time and CPUs, read from /proc: the CPU seconds of its whole process
tree (live processes, and the children they reaped: a PostgreSQL backend's time lands in its
postmaster's cutime when it exits), every task of the tree pinned to a set of CPUs, and the CPU
seconds of the kernel threads that do huge-page work for everyone (khugepaged, kcompactd)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hugelab.workloads.base import ExecResult, Target

TICK = os.sysconf("SC_CLK_TCK")
DAEMONS = ("khugepaged", "kcompactd")


def _stat(pid: int | str, proc: Path) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 is index 0); None if gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def children(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    """ppid -> its live children's pids, from one pass over /proc."""
    out: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (f := _stat(entry.name, proc)) is not None:
            out.setdefault(int(f[1]), []).append(int(entry.name))
    return out


def tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    kids, out, todo = children(proc), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def tree_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """User + system seconds of `pid` and its live descendants, and of the children each of
    them reaped (utime, stime, cutime, cstime)."""
    total = 0
    for p in tree(pid, proc):
        if (f := _stat(p, proc)) is not None:
            total += sum(int(x) for x in f[11:15])
    return total / TICK


PIN_PASSES = 5


def pin_tree(pid: int, cpus: list[int], proc: Path = Path("/proc")) -> None:
    """Every task (thread) of `pid`'s tree to `cpus`; later children inherit it. Passes until
    one changes nothing: a child forked after a pass read the tree but before its parent was
    pinned kept the old CPUs (a PostgreSQL backend on both CPUs of a `client_apart` trial,
    seen once in a suite run); the next pass finds it."""
    want = set(cpus)
    for _ in range(PIN_PASSES):
        changed = False
        for p in tree(pid, proc):
            with contextlib.suppress(OSError):
                for task in (proc / str(p) / "task").iterdir():
                    with contextlib.suppress(OSError):
                        if os.sched_getaffinity(int(task.name)) != want:
                            os.sched_setaffinity(int(task.name), cpus)
                            changed = True
        if not changed:
            return


def pinning(cpus: Sequence[int], servers: int = 1,
            core_of: Mapping[int, tuple[int, int]] | None = None) -> dict[str, Any]:
    """The client on the last CPU, the servers on the others (pure); on one CPU, all share.

    `servers` > 1 with at least as many of those CPUs: each server gets CPUs of its own
    (`each`, by the server's index, its start slot, which the block's order draws): whole
    cores where there are enough (`core_of`: CPU -> (package, core), hyperthreads of one core
    together; a core the client's CPU is part of is not whole), else single CPUs, the same
    number for every server; CPUs left over stay idle.
    Servers sharing CPUs take turns on them, and then, with large memory, read a larger
    effect of huge pages than one server alone (docs/applications.md, "Servers taking
    turns")."""
    cpus = sorted(cpus)
    if len(cpus) < 2:
        return {"client": list(cpus), "servers": list(cpus)}
    pins: dict[str, Any] = {"client": cpus[-1:], "servers": cpus[:-1]}
    pool = pins["servers"]
    if servers < 2 or len(pool) < servers:
        return pins
    cores: dict[tuple[int, int], list[int]] = {}
    for c in pool:
        cores.setdefault((core_of or {}).get(c, (-1, c)), []).append(c)
    most = max(len(u) for u in cores.values())
    whole = sorted(u for u in cores.values() if len(u) == most)  # not the client's sibling
    units = whole if len(whole) >= servers else [[c] for c in pool]
    per = len(units) // servers
    pins["each"] = [sorted(c for u in units[i * per:(i + 1) * per] for c in u)
                    for i in range(servers)]
    return pins


def core_map(cpus: Sequence[int], sysfs: Path = Path("/sys/devices/system/cpu")
             ) -> dict[int, tuple[int, int]]:
    """CPU -> (package, core) from sysfs topology; a CPU whose topology cannot be read is its
    own core."""
    out = {}
    for c in cpus:
        top = sysfs / f"cpu{c}" / "topology"
        try:
            out[c] = (int((top / "physical_package_id").read_text()),
                      int((top / "core_id").read_text()))
        except (OSError, ValueError):
            out[c] = (-1, c)
    return out


class PinnedTarget:
    """A Target whose every process runs on `cpus` (under taskset); results carry the argv as
    given. A server kind's load generator, apart from its server (ServerKind.client_apart)."""

    def __init__(self, inner: Target, cpus: Sequence[int]) -> None:
        self.inner = inner
        self.name = inner.name
        self.cpus = list(cpus)

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        pinned = ["taskset", "-c", ",".join(map(str, self.cpus)), *argv]
        r = self.inner.exec(pinned, timeout=timeout)
        return ExecResult(argv, r.returncode, r.stdout, r.stderr, r.wall_s, r.rusage)


def daemons_cpu_s(proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds so far of khugepaged and the kcompactd threads (summed per name)."""
    out = dict.fromkeys(DAEMONS, 0.0)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            comm = (entry / "comm").read_text().strip()
            name = next((d for d in DAEMONS if comm.startswith(d)), None)
            if name and (f := _stat(entry.name, proc)) is not None:
                out[name] += (int(f[11]) + int(f[12])) / TICK
    return out
