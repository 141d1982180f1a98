"""Exact evidence of the folio sizes a mapping got: /proc/PID/pagemap + /proc/kpageflags.

smaps' AnonHugePages counts only PMD-size THP, so multi-size THP (16 KiB .. 1 MiB folios) needs
another proof. For each present page of a range, pagemap gives its PFN (bits 0-54; root only:
without CAP_SYS_ADMIN the PFN reads 0) and kpageflags the page's flags: COMPOUND_HEAD (15),
COMPOUND_TAIL (16), HUGE (17, hugetlb) and THP (22, any large anonymous or page-cache folio,
not only PMD-size ones). A folio is a head page followed by tail pages with contiguous PFNs; a
folio of order n is naturally aligned in PFN space (its head's PFN is a multiple of 2^n), so a
run of L pages from a head is a folio of 2^ceil(log2 L) pages. Runs that begin with a tail
(a range that starts inside a folio) are counted as `partial`.

The parsing is pure (functions over bytes); the reading is thin. `FolioSampler` samples the
largest anonymous or shmem mappings of a trial's process tree while it runs, within a budget
of pages per sample. Standard library only, like procscan, so it can also run inside guests.

The per-size counters /sys/kernel/mm/transparent_hugepage/hugepages-<N>kB/stats/* (fault
allocations and fallbacks) are host-wide: they explain, never prove.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hugelab.units import page_kb, page_label

PAGE = 4096
PM_PRESENT = 1 << 63
PM_PFN_MASK = (1 << 55) - 1
KPF_COMPOUND_HEAD = 1 << 15
KPF_COMPOUND_TAIL = 1 << 16
KPF_HUGE = 1 << 17
KPF_THP = 1 << 22
WINDOW_PAGES = 512  # 2 MiB: no folio up to PMD size crosses an aligned window
DEFAULT_BUDGET_PAGES = 16384  # 64 MiB of each sample's mappings, in evenly spread windows
MERGE_GAP = 512  # kpageflags entries read in one pread when PFNs are this close
THP_DIR = "/sys/kernel/mm/transparent_hugepage"


# --- pure parsing --------------------------------------------------------------------------

def parse_pagemap(data: bytes) -> list[int | None]:
    """One PFN per page (None when not present; 0 when present but the PFN is hidden)."""
    n = len(data) // 8
    out: list[int | None] = []
    for entry in struct.unpack(f"<{n}Q", data[: n * 8]):
        out.append(entry & PM_PFN_MASK if entry & PM_PRESENT else None)
    return out


def parse_kpageflags(data: bytes) -> list[int]:
    n = len(data) // 8
    return list(struct.unpack(f"<{n}Q", data[: n * 8]))


@dataclass
class FolioCounts:
    """Bytes of a sampled range by what backs them."""

    by_size: dict[int, int] = field(default_factory=dict)  # folio size (KiB) -> bytes mapped
    hugetlb: int = 0   # bytes in hugetlb pages (their size: the mapping's KernelPageSize)
    partial: int = 0   # bytes of folios whose head lies before the range
    other: int = 0     # compound pages that are neither THP nor hugetlb
    absent: int = 0    # pages not present (never touched, or swapped out)

    def add(self, other: FolioCounts) -> None:
        for k, v in other.by_size.items():
            self.by_size[k] = self.by_size.get(k, 0) + v
        self.hugetlb += other.hugetlb
        self.partial += other.partial
        self.other += other.other
        self.absent += other.absent

    @property
    def present(self) -> int:
        return sum(self.by_size.values()) + self.hugetlb + self.partial + self.other

    def to_dict(self) -> dict[str, Any]:
        return {"folios_kb": {page_label(k): v // 1024 for k, v in sorted(self.by_size.items())},
                "hugetlb_kb": self.hugetlb // 1024, "partial_kb": self.partial // 1024,
                "other_kb": self.other // 1024, "present_kb": self.present // 1024,
                "absent_kb": self.absent // 1024}


def _order_pages(run: int) -> int:
    """Pages of the smallest power-of-two folio that holds `run` pages."""
    return 1 << (run - 1).bit_length()


def classify(pfns: Sequence[int | None], flags: Mapping[int, int]) -> FolioCounts:
    """Folio sizes of consecutive virtual pages (`pfns` from pagemap, `flags` by PFN)."""
    out = FolioCounts()
    i, n = 0, len(pfns)
    while i < n:
        pfn = pfns[i]
        if pfn is None:
            out.absent += PAGE
            i += 1
            continue
        f = flags.get(pfn, 0)
        if not f & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL):
            out.by_size[4] = out.by_size.get(4, 0) + PAGE
            i += 1
            continue
        j = i + 1  # the run: following tails at the following PFNs
        while j < n:
            nxt = pfns[j]
            if nxt is None or nxt != pfn + (j - i) or not flags.get(nxt, 0) & KPF_COMPOUND_TAIL \
                    or flags.get(nxt, 0) & KPF_COMPOUND_HEAD:
                break
            j += 1
        nbytes = (j - i) * PAGE
        if f & KPF_HUGE:
            out.hugetlb += nbytes
        elif not f & KPF_THP:
            out.other += nbytes
        elif not f & KPF_COMPOUND_HEAD:
            out.partial += nbytes
        else:
            kb = _order_pages(j - i) * PAGE // 1024
            out.by_size[kb] = out.by_size.get(kb, 0) + nbytes
        i = j
    return out


def pfn_ranges(pfns: Iterable[int | None], gap: int = MERGE_GAP) -> list[tuple[int, int]]:
    """(first PFN, count) reads that cover every PFN, merging PFNs less than `gap` apart."""
    out: list[tuple[int, int]] = []
    for pfn in sorted({p for p in pfns if p}):
        if out and pfn - (out[-1][0] + out[-1][1]) < gap:
            out[-1] = (out[-1][0], pfn - out[-1][0] + 1)
        else:
            out.append((pfn, 1))
    return out


MAPS_RE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$")


def anon_mappings(maps_text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of the readable, writable anonymous or shmem mappings of a
    /proc/PID/maps text: the memory THP and mTHP can back (files are page cache, left out)."""
    out = []
    for line in maps_text.splitlines():
        m = MAPS_RE.match(line)
        if not m or not m.group(3).startswith("rw"):
            continue
        name = m.group(4).strip()
        if name in ("", "[heap]") or name.startswith(("[anon:", "/memfd:", "/dev/zero",
                                                      "/SYSV", "/dev/shm/")):
            out.append((int(m.group(1), 16), int(m.group(2), 16), name))
    return out


def windows(start: int, end: int, budget_pages: int) -> list[tuple[int, int]]:
    """(first page, pages) windows of [start, end) within the budget: the whole range when it
    fits, else evenly spread 2 MiB-aligned windows."""
    first, last = start // PAGE, end // PAGE
    if last - first <= budget_pages:
        return [(first, last - first)]
    count = max(1, budget_pages // WINDOW_PAGES)
    aligned0 = -(-first // WINDOW_PAGES) * WINDOW_PAGES
    slots = (last - aligned0) // WINDOW_PAGES
    if slots <= 0:
        return [(first, min(budget_pages, last - first))]
    step = max(1, slots // count)
    return [(aligned0 + k * step * WINDOW_PAGES, WINDOW_PAGES)
            for k in range(min(count, slots))]


# --- reading -------------------------------------------------------------------------------

class PfnHidden(Exception):
    """pagemap gave PFN 0 for present pages: reading it needs CAP_SYS_ADMIN (root)."""


def read_pagemap(pid: int, first_page: int, pages: int, proc: str = "/proc") -> list[int | None]:
    fd = os.open(f"{proc}/{pid}/pagemap", os.O_RDONLY)
    try:
        data = os.pread(fd, pages * 8, first_page * 8)
    finally:
        os.close(fd)
    return parse_pagemap(data)


def read_kpageflags(pfns: Iterable[int | None], proc: str = "/proc") -> dict[int, int]:
    out: dict[int, int] = {}
    fd = os.open(f"{proc}/kpageflags", os.O_RDONLY)
    try:
        for first, count in pfn_ranges(pfns):
            for k, f in enumerate(parse_kpageflags(os.pread(fd, count * 8, first * 8))):
                out[first + k] = f
    finally:
        os.close(fd)
    return out


def scan_range(pid: int, start: int, end: int, budget_pages: int = DEFAULT_BUDGET_PAGES,
               proc: str = "/proc") -> tuple[FolioCounts, int]:
    """Folio counts of [start, end) of `pid` (sampled within the budget); and pages read."""
    total = FolioCounts()
    read = 0
    for first, pages in windows(start, end, budget_pages):
        pfns = read_pagemap(pid, first, pages, proc)
        if any(p == 0 for p in pfns):
            raise PfnHidden(f"pagemap of pid {pid} hides PFNs: reading them needs root")
        total.add(classify(pfns, read_kpageflags(pfns, proc)))
        read += pages
    return total, read


def largest_mappings(pids: Iterable[int], largest: int = 4,
                     proc: str = "/proc") -> list[tuple[int, int, int, str]]:
    """(pid, start, end, name) of the `largest` anonymous/shmem mappings of these processes."""
    found = []
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/maps") as f:
                found += [(pid, s, e, name) for s, e, name in anon_mappings(f.read())]
        except OSError:
            continue  # the process ended meanwhile
    return sorted(found, key=lambda m: m[1] - m[2])[:largest]


def scan_mappings(maps: Sequence[tuple[int, int, int, str]],
                  budget_pages: int = DEFAULT_BUDGET_PAGES,
                  proc: str = "/proc") -> list[dict[str, Any]]:
    """The folio counts of each mapping, the budget shared among them by size."""
    total = sum(e - s for _p, s, e, _n in maps) // PAGE or 1
    out = []
    for pid, s, e, name in maps:
        share = max(WINDOW_PAGES, budget_pages * ((e - s) // PAGE) // total)
        try:
            counts, read = scan_range(pid, s, e, share, proc)
        except (FileNotFoundError, ProcessLookupError):
            continue
        out.append({"pid": pid, "start": hex(s), "size_kb": (e - s) // 1024, "name": name,
                    "sampled_kb": read * PAGE // 1024, **counts.to_dict()})
    return out


def summarize(mappings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The distribution over several mappings' results: KiB per folio size and shares."""
    sizes: dict[str, int] = {}
    for m in mappings:
        for k, v in m["folios_kb"].items():
            sizes[k] = sizes.get(k, 0) + v
    keys = ("hugetlb_kb", "partial_kb", "other_kb", "present_kb", "absent_kb", "sampled_kb")
    out: dict[str, Any] = {k: sum(int(m[k]) for m in mappings) for k in keys}
    order = sorted(sizes, key=page_kb)
    out["folios_kb"] = {k: sizes[k] for k in order}
    present = out["present_kb"]
    out["share"] = {k: round(sizes[k] / present, 4) for k in order} if present else {}
    return out


class FolioSampler:
    """Samples the folio sizes of a tree's largest mappings while a trial runs: first after
    `first_s`, then at doubling intervals up to `interval_s` (a short trial gets its samples,
    a long one is not slowed: a 64 MiB sample costs ~60 ms of one CPU in 4 KiB pages, ~15 ms
    in large folios). Keeps the last sample that held at least 90% of the most memory any
    sample saw (the buffer fully populated, not yet unmapped)."""

    def __init__(self, members: Callable[[], list[int]], interval_s: float = 2.0,
                 first_s: float = 0.2, budget_pages: int = DEFAULT_BUDGET_PAGES,
                 proc: str = "/proc") -> None:
        self.members = members
        self.interval_s = interval_s
        self.first_s = first_s
        self.budget_pages = budget_pages
        self.proc = proc
        self.samples = 0
        self.best: dict[str, Any] | None = None
        self.peak_kb = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="folio-sampler")

    def start(self) -> FolioSampler:
        if not os.access(f"{self.proc}/kpageflags", os.R_OK):
            self.error = f"{self.proc}/kpageflags is not readable (needs root)"
            return self
        self._thread.start()
        return self

    def sample(self) -> None:
        try:
            maps = scan_mappings(largest_mappings(self.members(), proc=self.proc),
                                 self.budget_pages, self.proc)
        except PfnHidden as exc:
            self.error = str(exc)
            return
        except OSError:
            return  # a process ended mid-read: the next sample will do
        if not maps:
            return
        self.samples += 1
        summary = {**summarize(maps), "mappings": maps}
        present = int(summary["present_kb"])
        self.peak_kb = max(self.peak_kb, present)
        if present >= 0.9 * self.peak_kb:
            self.best = summary

    def _loop(self) -> None:
        wait = self.first_s
        while not self._stop.wait(wait):
            self.sample()
            wait = min(self.interval_s, wait * 2)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.best is None:
            why = self.error or "no sample caught the workload's memory"
            return {"available": False, "reason": why, "samples": self.samples}
        return {"available": True, "samples": self.samples, **self.best}


# --- host-wide per-size counters -------------------------------------------------------------

def mthp_stats(thp_dir: Path = Path(THP_DIR)) -> dict[str, dict[str, int]]:
    """{'64K': {'anon_fault_alloc': n, ...}} for every hugepages-<N>kB/stats directory."""
    out: dict[str, dict[str, int]] = {}
    if not thp_dir.is_dir():
        return out
    for d in thp_dir.iterdir():
        m = re.fullmatch(r"hugepages-(\d+)kB", d.name)
        if not m or not (d / "stats").is_dir():
            continue
        counters = {}
        for f in (d / "stats").iterdir():
            try:
                counters[f.name] = int(f.read_text().strip())
            except (OSError, ValueError):
                continue
        out[page_label(int(m.group(1)))] = counters
    return out


def stats_delta(before: Mapping[str, Mapping[str, int]],
                after: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Counters that moved, per size (sizes with none moved are left out)."""
    out = {}
    for size, old in before.items():
        new = after.get(size, {})
        moved = {k: new[k] - v for k, v in old.items() if k in new and new[k] != v}
        if moved:
            out[size] = moved
    return out
