"""Free memory by block size, from the kernel's own /proc/buddyinfo (pure; standard library).

/proc/buddyinfo has one line per zone: how many free blocks of each order (a block of order n
is 2**n contiguous pages) the buddy allocator holds now:

    Node 0, zone   Normal   1758    829   7055   3212   1528    578    423    183    105      0    457

A 2 MiB huge page (THP or hugetlb) needs one free block of order 9 or more (on 4 KiB pages;
`huge_order()` says it for other page sizes). The figure hugelab states a host's fragmentation
by is the kernel's own *unusable free space index* for that order, which debugfs shows as
extfrag/unusable_index where it is mounted (it is not on most hosts):

    unusable(order) = (free pages - free pages in blocks of `order` and above) / free pages

0 is a fresh host (all free memory in 2 MiB blocks or larger), 1 a host where no 2 MiB page
can be served without compaction. It is given per zone and for the host as a whole (all zones
summed: a THP fault falls back from Normal to DMA32 before it falls back to small pages).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HUGE_KB = 2048  # the PMD size on x86-64 and 4 KiB-page arm64


def page_kb() -> int:
    return os.sysconf("SC_PAGE_SIZE") // 1024


def huge_order(pkb: int | None = None, huge_kb: int = HUGE_KB) -> int:
    """The buddy order of one huge page: 9 for 2 MiB on 4 KiB pages."""
    return (huge_kb // (pkb or page_kb())).bit_length() - 1


@dataclass(frozen=True)
class Zone:
    """One line of /proc/buddyinfo: free blocks per order, lowest order first."""

    node: int
    name: str
    counts: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.node}/{self.name}"

    def free_pages(self, min_order: int = 0) -> int:
        return sum(c << o for o, c in enumerate(self.counts) if o >= min_order)


def parse(text: str) -> tuple[Zone, ...]:
    """The zones of a /proc/buddyinfo text; lines that are not zone lines are skipped."""
    zones = []
    for line in text.splitlines():
        head, sep, tail = line.partition("zone")
        if not sep or not head.startswith("Node"):
            continue
        try:
            node = int(head.split()[1].rstrip(","))
            name, *counts = tail.split()
            zones.append(Zone(node, name, tuple(int(c) for c in counts)))
        except (IndexError, ValueError):
            continue
    return tuple(zones)


def unusable(free: int, high: int) -> float | None:
    return round((free - high) / free, 4) if free > 0 else None


@dataclass(frozen=True)
class Snapshot:
    """The free lists of every zone at one moment, with the page size they count in."""

    zones: tuple[Zone, ...]
    page_kb: int = 4

    @property
    def order(self) -> int:
        return huge_order(self.page_kb)

    def free_kb(self, min_order: int = 0) -> int:
        return sum(z.free_pages(min_order) for z in self.zones) * self.page_kb

    def unusable(self, order: int | None = None) -> float | None:
        """The host's unusable free space index for `order` (default: a 2 MiB page's)."""
        o = self.order if order is None else order
        return unusable(self.free_kb(), self.free_kb(o))

    def to_json(self) -> dict[str, Any]:
        o = self.order
        zones = {z.key: {"free_kb": z.free_pages() * self.page_kb,
                         "free_huge_kb": z.free_pages(o) * self.page_kb,
                         "unusable": unusable(z.free_pages(), z.free_pages(o)),
                         "counts": list(z.counts)} for z in self.zones}
        return {"free_kb": self.free_kb(), "free_huge_kb": self.free_kb(o),
                "unusable": self.unusable(), "order": o, "zones": zones}


@dataclass(frozen=True)
class PoolReach:
    """How far a hugetlb pool of `size_kb` pages could grow from the free lists now (one node's
    zones, or every zone). `ready`: the pages free memory holds as whole blocks of the page's
    order or above, which the pool takes without compaction; for a page above the top order
    buddyinfo shows (1 GiB: order 18, shown up to 10) only an upper bound, from the free
    memory in top-order blocks, since whether they lie together buddyinfo cannot say.
    `most`: the pages all free memory would make, were compaction to bring it together."""

    size_kb: int
    order: int
    top_order: int
    ready: int
    free_kb: int
    top_kb: int

    @property
    def seen(self) -> bool:
        """Whether buddyinfo shows blocks of the page's own order (2 MiB: yes, 1 GiB: no)."""
        return self.order <= self.top_order

    @property
    def most(self) -> int:
        return self.free_kb // self.size_kb

    def to_json(self) -> dict[str, Any]:
        return {"size_kb": self.size_kb, "order": self.order, "top_order": self.top_order,
                "ready": self.ready, "ready_is_upper_bound": not self.seen,
                "most_with_compaction": self.most, "free_kb": self.free_kb,
                "free_in_top_order_kb": self.top_kb}


def pool_reach(snap: Snapshot, size_kb: int, node: int | None = None) -> PoolReach:
    """What the free lists of `snap` (node `node`'s zones, or all) hold for pages of `size_kb`."""
    zones = [z for z in snap.zones if node is None or z.node == node]
    top = max((len(z.counts) for z in zones), default=1) - 1
    order = huge_order(snap.page_kb, size_kb)
    top_kb = sum(z.counts[top] << top for z in zones if len(z.counts) > top) * snap.page_kb
    high_kb = sum(z.free_pages(min(order, top)) for z in zones) * snap.page_kb
    return PoolReach(size_kb, order, top, high_kb // size_kb,
                     sum(z.free_pages() for z in zones) * snap.page_kb, top_kb)


def snapshot(text: str, pkb: int | None = None) -> Snapshot:
    return Snapshot(parse(text), pkb or page_kb())


def read(path: str | os.PathLike[str] = "/proc/buddyinfo") -> Snapshot:
    with open(path) as f:
        return snapshot(f.read())


def from_json(d: Mapping[str, Any]) -> dict[str, Any]:
    """The headline figures of a stored snapshot (`to_json`): free, free in huge blocks, index."""
    return {k: d.get(k) for k in ("free_kb", "free_huge_kb", "unusable")}
