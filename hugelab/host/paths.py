"""The sysfs/procfs seam: every path hugelab reads or writes under /sys and /proc.

`HostPaths(root)` with root="/" is the real host; tests point root at a temporary tree to
simulate hosts we do not have (NUMA nodes, a CPU without pdpe1gb).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hugelab import kernel

THP_DIR = "sys/kernel/mm/transparent_hugepage"
HUGEPAGES_DIR = "sys/kernel/mm/hugepages"
NODE_DIR = "sys/devices/system/node"


def size_dir_name(size_kb: int) -> str:
    return f"hugepages-{size_kb}kB"


class _File:
    """A fixed file under the host's root, read as an attribute of HostPaths:
    `paths.meminfo` is `paths.p("proc/meminfo")`."""

    def __init__(self, rel: str) -> None:
        self.rel = rel

    def __get__(self, paths: HostPaths, owner: type | None = None) -> Path:
        return paths.p(self.rel)


@dataclass(frozen=True)
class HostPaths:
    root: Path = Path("/")

    def p(self, rel: str) -> Path:
        return self.root / rel

    # --- THP -----------------------------------------------------------------
    thp_enabled = _File(f"{THP_DIR}/enabled")
    thp_defrag = _File(f"{THP_DIR}/defrag")
    # the THP shrinker for underused huge pages on/off (Linux 6.12+)
    shrink_underused = _File(f"{THP_DIR}/shrink_underused")
    hpage_pmd_size = _File(f"{THP_DIR}/hpage_pmd_size")
    shmem_enabled = _File(f"{THP_DIR}/shmem_enabled")

    def khugepaged(self, name: str) -> Path:
        return self.p(f"{THP_DIR}/khugepaged/{name}")

    @property
    def max_ptes_none(self) -> Path:
        """How many empty 4 KiB slots of a 2 MiB region khugepaged fills to collapse it, and
        (6.12+) the most zero-filled subpages a THP may have before the shrinker splits it."""
        return self.khugepaged("max_ptes_none")

    # --- multi-size THP (Linux 6.8+): one directory per folio size ---------------------
    def mthp_sizes_kb(self) -> list[int]:
        """Folio sizes with a hugepages-<N>kB directory (anon and/or shmem); [] before 6.8."""
        return _size_dirs(self.p(THP_DIR))

    def mthp_anon_sizes_kb(self) -> list[int]:
        """Sizes anonymous memory can get (an `enabled` file; 8 KiB has only shmem_enabled)."""
        return [s for s in self.mthp_sizes_kb() if self.mthp_enabled(s).exists()]

    def mthp(self, size_kb: int, name: str) -> Path:
        """File or directory `name` of the folio size's hugepages-<N>kB directory."""
        return self.p(f"{THP_DIR}/{size_dir_name(size_kb)}/{name}")

    def mthp_enabled(self, size_kb: int) -> Path:
        return self.mthp(size_kb, "enabled")

    def mthp_shmem_enabled(self, size_kb: int) -> Path:
        return self.mthp(size_kb, "shmem_enabled")

    def mthp_stats_dir(self, size_kb: int) -> Path:
        return self.mthp(size_kb, "stats")

    # --- hugetlb pools -------------------------------------------------------
    def pool_sizes_kb(self) -> list[int]:
        return _size_dirs(self.p(HUGEPAGES_DIR))

    def pool_file(self, size_kb: int, name: str = "nr_hugepages", node: int | None = None) -> Path:
        if node is None:
            return self.p(f"{HUGEPAGES_DIR}/{size_dir_name(size_kb)}/{name}")
        return self.p(f"{NODE_DIR}/node{node}/hugepages/{size_dir_name(size_kb)}/{name}")

    def numa_nodes(self) -> list[int]:
        d = self.p(NODE_DIR)
        if not d.is_dir():
            return []
        nodes = [int(e.name[4:]) for e in d.iterdir() if re.fullmatch(r"node\d+", e.name)]
        return sorted(nodes)

    # --- proc ----------------------------------------------------------------
    meminfo = _File("proc/meminfo")
    vmstat = _File("proc/vmstat")
    buddyinfo = _File("proc/buddyinfo")
    cpuinfo = _File("proc/cpuinfo")
    cmdline = _File("proc/cmdline")
    mounts = _File("proc/mounts")
    compact_memory = _File("proc/sys/vm/compact_memory")
    drop_caches = _File("proc/sys/vm/drop_caches")
    osrelease = _File("proc/sys/kernel/osrelease")

    # --- cgroups ---------------------------------------------------------------
    def host_path(self, absolute: str) -> Path:
        """An absolute path as the kernel names it (a mount point in /proc/mounts) under this
        root: itself on the real host, inside the tree on a fake one."""
        return self.p(absolute.lstrip("/"))


REAL = HostPaths()


def _size_dirs(d: Path) -> list[int]:
    """The N of every hugepages-<N>kB directory in d, sorted; [] when d is missing."""
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for e in d.iterdir()
                  if (m := re.fullmatch(r"hugepages-(\d+)kB", e.name)))


def read_text(path: Path, default: str | None = None) -> str | None:
    """The file's text, or `default` when it is not there to read: missing, not ours, or a
    /proc file of a process that exited between its open and its read (ESRCH)."""
    try:
        return path.read_text()
    except (FileNotFoundError, PermissionError, NotADirectoryError, ProcessLookupError):
        return default


parse_selected = kernel.selected  # 'always [madvise] never' -> 'madvise'
parse_choices = kernel.choices


def parse_kv_kb(text: str) -> dict[str, int]:
    """Parse /proc/meminfo-style 'Key:   123 kB' lines into {key: int} (kB or counts)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        k, v = line.split(":", 1)
        parts = v.split()
        if parts and parts[0].lstrip("-").isdigit():
            out[k.strip()] = int(parts[0])
    return out


def parse_vmstat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out
