"""Hugetlb pools shared with other users: a pool's counters, the size that leaves a run's pages
free on top of what others hold, and the value that puts a pool back.

A pool is the kernel's, not hugelab's: a database with `huge_pages = on`, DPDK, a JVM or a
SysV segment may hold some of its pages. The counters (per size under
/sys/kernel/mm/hugepages/hugepages-<N>kB, per node under /sys/devices/system/node/…):

  nr        nr_hugepages, HugePages_Total: every page of the pool, surplus ones included
  free      pages no one has faulted in
  resv      free pages promised to a mapping that has not touched them yet (global only)
  surplus   pages beyond the persistent pool, lent under nr_overcommit_hugepages

Others hold `nr - free + resv` pages; `free - resv` are free for a newcomer. A run that needs N
pages sets nr to `held + N` (never less than it is). Writing nr = X makes X pages persistent
(the kernel first turns surplus pages into persistent ones), so restoring writes the
*persistent* count found, `nr - surplus`: pages still in use beyond it go back to being
surplus, and the kernel never frees a page that is in use or reserved, whatever is written.
hugelab never writes nr_overcommit_hugepages.

The counters are separate files, read one after the other, while others change them: a holder's
mmap under overcommit raises nr, then surplus; its munmap lowers them. A pair read across such a
change is no state the pool was ever in (nr before, surplus after: a persistent size short by the
holder's pages, which a restore would then write), so every reading is repeated until two in a
row agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hugelab.host.paths import HostPaths, read_text


@dataclass(frozen=True)
class PoolCounts:
    nr: int
    free: int
    resv: int
    surplus: int

    @property
    def held(self) -> int:
        """Pages others use or have reserved (hugelab holds none between its trials)."""
        return max(self.nr - self.free + self.resv, 0)

    @property
    def available(self) -> int:
        """Free pages no mapping has a claim on: what a new trial can take."""
        return max(self.free - self.resv, 0)

    @property
    def persistent(self) -> int:
        """The pool's persistent size: what writing nr_hugepages sets."""
        return max(self.nr - self.surplus, 0)

    def to_dict(self) -> dict[str, int]:
        return {"nr": self.nr, "free": self.free, "resv": self.resv, "surplus": self.surplus,
                "held": self.held, "available": self.available}


T = TypeVar("T")
STABLE_TRIES = 50  # readings before the last one is taken as it is


def stable(read: Callable[[], T], tries: int = STABLE_TRIES) -> T:
    """`read()` again until two readings in a row agree (at most `tries` times)."""
    last = read()
    for _ in range(tries):
        now = read()
        if now == last:
            return now
        last = now
    return last


def _int(path: Path, default: int = 0) -> int:
    text = (read_text(path, "") or "").strip()
    return int(text) if text.isdigit() else default


def read_counts(paths: HostPaths, size_kb: int, node: int | None = None) -> PoolCounts:
    """A pool's counters, host-wide or on one NUMA node. A node has no resv counter of its
    own: the host-wide one is taken (a reservation may be on any node), capped by the node's
    free pages. Read until two readings agree (others change the counters meanwhile)."""
    def once() -> PoolCounts:
        nr = _int(paths.pool_file(size_kb, "nr_hugepages", node))
        free = _int(paths.pool_file(size_kb, "free_hugepages", node))
        surplus = _int(paths.pool_file(size_kb, "surplus_hugepages", node))
        resv = _int(paths.pool_file(size_kb, "resv_hugepages"))
        return PoolCounts(nr, free, min(resv, free), surplus)
    return stable(once)


def grow_target(counts: PoolCounts, need: int) -> int | None:
    """nr_hugepages that leaves `need` pages free on top of what others hold, or None when
    enough are free already (a pool is never shrunk under a run)."""
    if counts.available >= need:
        return None
    return counts.held + need


def restore_value(nr: int, surplus: int) -> int:
    """What to write to put back a pool found with `nr` pages of which `surplus` were surplus."""
    return max(nr - surplus, 0)


def surplus_file(nr_file: Path) -> Path:
    return nr_file.with_name("surplus_hugepages")


def current_persistent(nr_file: Path) -> int:
    """The persistent size of the pool whose nr_hugepages file is `nr_file`, now (read until
    two readings agree)."""
    nr, surplus = stable(lambda: (_int(nr_file), _int(surplus_file(nr_file))))
    return restore_value(nr, surplus)
