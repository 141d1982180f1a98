"""When a reader of /proc may walk a process's page tables. Standard library only: hugelab's own
guests run it beside procscan (the initramfs copies both next to the agent).

A read of /proc/PID/smaps or smaps_rollup makes the kernel walk the process's page tables: for
a GiB in 4 KiB pages, 512 times the entries of the same GiB in 2 MiB pages, 17-30 times the CPU
here. A reader that walks at a fixed rate takes more CPU from a 4 KiB arm's workload than from
the huge-page arm it is compared with. `Walks` keeps a reader's walks within FREE_S of CPU plus
SHARE of one CPU since its start, and allows one beyond that when the memory (RSS, a counter
that costs the same to read at any page size) moved by more than MOVED since the last walk, so
the walks still follow memory that grows (docs/benchmarks.md, "What hugelab's own reads cost").
The tree sampler (hugelab.trial.procscan) and the server keeper's picture
(hugelab.workloads.serverkeep) both walk by it.
"""

from __future__ import annotations

import time

FREE_S = 0.025  # the first walks' CPU, free: a short command gets its walks
SHARE = 0.005   # then the walks' CPU at most this share of one CPU since the start
MOVED = 0.05    # or a walk when the RSS moved by more than this share since the last one


class Walks:
    """One reader's walks: their count, their CPU and the RSS (KiB) at the last one."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.count = 0
        self.cpu_s = 0.0
        self.rss_kb: int | None = None

    def within(self) -> bool:
        """Whether the walks' CPU so far leaves room for another."""
        return self.cpu_s <= FREE_S + SHARE * (time.monotonic() - self.t0)

    def moved(self, rss_kb: int | None) -> bool:
        """Whether the RSS moved by more than MOVED since the last walk (before the first walk,
        yes; an RSS that could not be read, no)."""
        if rss_kb is None:
            return False
        was = self.rss_kb
        return was is None or abs(rss_kb - was) > MOVED * max(was, 1)

    def due(self, rss_kb: int | None) -> bool:
        """Whether a look that has just read this RSS should walk."""
        return self.within() or self.moved(rss_kb)

    def walked(self, cpu_s: float, rss_kb: int | None) -> None:
        """Count a walk that took `cpu_s` of CPU and saw `rss_kb`."""
        self.count += 1
        self.cpu_s += cpu_s
        self.rss_kb = rss_kb
