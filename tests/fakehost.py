"""Build fake /sys + /proc trees for hosts this machine is not (NUMA, no pdpe1gb)."""

from __future__ import annotations

from pathlib import Path

from hugelab.host.paths import HUGEPAGES_DIR, NODE_DIR, THP_DIR, HostPaths

MEMINFO = """MemTotal:       {total} kB
MemFree:        {free} kB
MemAvailable:   {free} kB
AnonHugePages:         0 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
"""


def make_host(root: Path, *, nodes: int = 1, pdpe1gb: bool = True, thp: str = "madvise",
              free_kb: int = 16 * 1048576, sizes: tuple[int, ...] | None = None) -> HostPaths:
    sizes = sizes if sizes is not None else ((2048, 1048576) if pdpe1gb else (2048,))
    thp_dir = root / THP_DIR
    (thp_dir / "khugepaged").mkdir(parents=True)
    modes = ["always", "madvise", "never"]
    (thp_dir / "enabled").write_text(" ".join(f"[{m}]" if m == thp else m for m in modes) + "\n")
    (thp_dir / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    (thp_dir / "khugepaged" / "defrag").write_text("1\n")
    for size in sizes:
        d = root / HUGEPAGES_DIR / f"hugepages-{size}kB"
        d.mkdir(parents=True)
        for f in ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                  "nr_overcommit_hugepages"):
            (d / f).write_text("0\n")
        for n in range(nodes):
            nd = root / NODE_DIR / f"node{n}" / "hugepages" / f"hugepages-{size}kB"
            nd.mkdir(parents=True)
            for f in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                (nd / f).write_text("0\n")
    proc = root / "proc"
    (proc / "sys" / "vm").mkdir(parents=True)
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "vm" / "compact_memory").write_text("")
    (proc / "sys" / "kernel" / "osrelease").write_text("6.1.0-fake\n")
    (proc / "meminfo").write_text(MEMINFO.format(total=free_kb + 1048576, free=free_kb))
    (proc / "vmstat").write_text("thp_fault_alloc 0\nthp_fault_fallback 0\n")
    (proc / "buddyinfo").write_text("Node 0, zone   Normal  1 1 1 1 1 1 1 1 1 1 100\n")
    flags = "fpu pse msr" + (" pdpe1gb" if pdpe1gb else "")
    (proc / "cpuinfo").write_text(f"processor : 0\nflags\t\t: {flags}\n")
    (proc / "cmdline").write_text("console=ttyS0 quiet\n")
    (proc / "mounts").write_text("proc /proc proc rw 0 0\n")
    return HostPaths(root)


def add_mthp(host: HostPaths, anon_kb: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048),
             shmem_only_kb: tuple[int, ...] = (8,)) -> HostPaths:
    """Give a fake host the per-size THP knobs of Linux 6.8+ (shmem ones of 6.11+), as this
    machine's kernel has them: every size `never` but PMD size, which is `inherit`."""
    thp_dir = host.p(THP_DIR)
    (thp_dir / "shmem_enabled").write_text("always within_size advise [never] deny force\n")
    for size in sorted((*anon_kb, *shmem_only_kb)):
        d = thp_dir / f"hugepages-{size}kB"
        (d / "stats").mkdir(parents=True)
        sel = "inherit" if size == 2048 else "never"
        if size in anon_kb:
            (d / "enabled").write_text(" ".join(f"[{m}]" if m == sel else m for m in
                                                ("always", "inherit", "madvise", "never")) + "\n")
            (d / "stats" / "anon_fault_alloc").write_text("0\n")
        (d / "shmem_enabled").write_text(" ".join(
            f"[{m}]" if m == sel else m
            for m in ("always", "inherit", "within_size", "advise", "never")) + "\n")
    (host.osrelease).write_text("6.18.0-fake\n")
    return host


class FakeKernel:
    """A writer that behaves like the kernel's sysfs files: THP files keep their choices and
    bracket the selected one; pools grow only up to `pool_cap` pages (fragmented memory),
    growing one step further on each compaction. `held` (per size, host-wide pools): pages
    other users have in use, which no write frees: nr never goes below them, and what is
    written below them is surplus, as in the kernel's set_max_huge_pages."""

    def __init__(self, pool_cap: dict[int, int] | None = None, grow_on_compact: int = 0,
                 held: dict[int, int] | None = None) -> None:
        self.pool_cap = pool_cap or {}
        self.grow_on_compact = grow_on_compact
        self.held = held or {}
        self.compactions = 0
        self.writes: list[tuple[str, str]] = []

    def __call__(self, path: Path, value: str) -> None:
        self.writes.append((str(path), value))
        if path.name in ("enabled", "defrag", "shmem_enabled") and THP_DIR in str(path):
            choices = [w.strip("[]") for w in path.read_text().split()]
            if value not in choices:
                from hugelab.errors import HostError
                raise HostError(f"invalid argument {value}")
            path.write_text(" ".join(f"[{c}]" if c == value else c for c in choices) + "\n")
        elif path.name == "compact_memory":
            self.compactions += 1
            for size in self.pool_cap:
                self.pool_cap[size] += self.grow_on_compact
        elif path.name == "nr_hugepages":
            size = int(path.parent.name.removeprefix("hugepages-").removesuffix("kB"))
            pages = int(value)
            if size in self.pool_cap:
                pages = min(pages, self.pool_cap[size])
            held = 0 if "devices/system/node" in str(path) else self.held.get(size, 0)
            path.write_text(f"{max(pages, held)}\n")
            (path.parent / "free_hugepages").write_text(f"{max(pages - held, 0)}\n")
            (path.parent / "surplus_hugepages").write_text(f"{max(held - pages, 0)}\n")
        else:
            path.write_text(value)


def hold_pages(host: HostPaths, kernel: FakeKernel, size_kb: int, pages: int, *,
               surplus: int = 0, resv: int = 0, free: int = 0) -> None:
    """Another user of the host-wide pool of `size_kb`: `pages` in use (`surplus` of them lent
    under overcommit), `resv` of the `free` pages reserved but not touched."""
    kernel.held[size_kb] = pages
    for name, value in (("nr_hugepages", pages + free), ("free_hugepages", free),
                        ("surplus_hugepages", surplus), ("resv_hugepages", resv)):
        host.pool_file(size_kb, name).write_text(f"{value}\n")
