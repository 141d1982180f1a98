"""The kernel's own words for huge pages, read and checked in one place: the values of the THP
switches under /sys/kernel/mm/transparent_hugepage/ and the hugetlbfs lines of /proc/mounts.

Pure: this module reads no file; its callers hand it the text they read (on the host, in a
guest, or from a fake host).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THP_ENABLED = ("always", "madvise", "never")  # transparent_hugepage/enabled
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")  # .../defrag
MTHP_ENABLED = ("always", "inherit", "madvise", "never")  # hugepages-<size>kB/enabled
SHMEM_ENABLED = ("always", "within_size", "advise", "never", "deny", "force")
MTHP_SHMEM_ENABLED = ("always", "inherit", "within_size", "advise", "never")
HUGETLBFS = "hugetlbfs"


def selected(text: str) -> str:
    """The chosen value of a sysfs switch: 'always [madvise] never' -> 'madvise' (the text
    itself, stripped, when it marks none)."""
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


def choices(text: str) -> list[str]:
    """Every value a sysfs switch offers: 'always [madvise] never' -> all three."""
    return [w.strip("[]") for w in text.split()]


@dataclass(frozen=True)
class HugetlbfsMount:
    """One hugetlbfs mount: where, and its `pagesize=` option as the kernel writes it ('2M',
    '1024M'), None where it has none (the default huge page size)."""

    target: str
    pagesize: str | None


def hugetlbfs_mounts(mounts_text: str) -> list[HugetlbfsMount]:
    """The hugetlbfs mounts in the text of /proc/mounts, in its order (the last on a path is
    the one that is seen there)."""
    out = []
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == HUGETLBFS:
            opts = dict(o.partition("=")[::2] for o in parts[3].split(","))
            out.append(HugetlbfsMount(parts[1], opts.get("pagesize") or None))
    return out


def meminfo_kb(key: str, path: str = "/proc/meminfo") -> int:
    """One /proc/meminfo figure in KiB ("MemTotal"); 0 when the file does not have it."""
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
