"""A running server's own THP picture, read from /proc just before a workload stops it: its
THP_enabled (0 under PR_SET_THP_DISABLE: Redis's disable-thp, hugelab-thp never), its
anonymous memory and THP (smaps_rollup), and what it madvised for THP (MADV_HUGEPAGE: `hg`
in VmFlags; memcached -L). The app evidence rules (hugelab.trial.appevidence) judge it."""

from __future__ import annotations

import time
from collections.abc import Callable


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _kb(text: str, name: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == f"{name}:" and len(parts) > 1 and parts[1].isdigit():
            return int(parts[1])
    return 0


def thp_enabled(status_text: str) -> int | None:
    """THP_enabled of a /proc/PID/status text; None before Linux 6.0 (not reported)."""
    for line in status_text.splitlines():
        if line.startswith("THP_enabled:"):
            value = line.split()[1:]
            return int(value[0]) if value and value[0].isdigit() else None
    return None


def madvised(smaps_text: str) -> dict[str, int]:
    """KiB in mappings madvised MADV_HUGEPAGE (`hg` in VmFlags), and of it in THP, from a full
    /proc/PID/smaps text."""
    out = {"madvised_kb": 0, "madvised_thp_kb": 0}
    size = huge = 0
    for line in smaps_text.splitlines():
        parts = line.split()
        if line.startswith("Size:") and len(parts) > 1:
            size = int(parts[1])
        elif line.startswith("AnonHugePages:") and len(parts) > 1:
            huge = int(parts[1])
        elif line.startswith("VmFlags:"):
            if "hg" in parts[1:]:
                out["madvised_kb"] += size
                out["madvised_thp_kb"] += huge
            size = huge = 0
    return out


def process_memory(pid: int, proc: str = "/proc",
                   read: Callable[[str], str | None] = _read,
                   walked: list[float] | None = None) -> dict[str, object]:
    """One live process's THP picture; {} when it is gone. `read`: how to read a file (a
    guest's, through hugelab's way into it). `walked`: gets the CPU seconds its two smaps reads
    took (the kernel's walks of the page tables, whose cost is the page size's)."""
    t0 = time.thread_time()
    rollup = read(f"{proc}/{pid}/smaps_rollup")
    spent = time.thread_time() - t0
    if not rollup:
        return {}
    status = read(f"{proc}/{pid}/status") or ""
    t0 = time.thread_time()
    smaps = read(f"{proc}/{pid}/smaps") or ""
    if walked is not None:
        walked.append(spent + time.thread_time() - t0)
    return {"pid": pid, "thp_enabled": thp_enabled(status), "anon_kb": _kb(rollup, "Anonymous"),
            "anon_huge_kb": _kb(rollup, "AnonHugePages"), "rss_kb": _kb(rollup, "Rss"),
            **madvised(smaps)}


def process_rss_kb(pid: int, proc: str = "/proc") -> int | None:
    """A live process's resident memory from its status (VmRSS: a counter, as cheap at any
    page size); None when it is gone."""
    status = _read(f"{proc}/{pid}/status")
    return None if status is None or "VmRSS:" not in status else _kb(status, "VmRSS")


def server_tree(comm: str, memory: dict[str, object],
                where: str = "host") -> dict[str, object]:
    """One server's process_memory() in the shape of a trial's tree summary (one process, one
    sample), for evidence rules that judge a tree, where the trial's tree holds other servers
    too (interleaved servers) (pure)."""
    def kb(key: str) -> int:
        value = memory.get(key, 0)
        return value if isinstance(value, int) else 0
    enabled = memory.get("thp_enabled")
    unadvised = max(kb("anon_huge_kb") - kb("madvised_thp_kb"), 0)
    return {"samples": 1, "processes": 1, "rss_kb": kb("rss_kb"), "anon_kb": kb("anon_kb"),
            "anon_huge_kb": kb("anon_huge_kb"), "shmem_pmd_kb": 0, "hugetlb_by_page_kb": {},
            "thp_enabled_by_comm": {comm: 1} if enabled == 1 else {},
            "thp_disabled_by_comm": {comm: 1} if enabled == 0 else {},
            "unadvised_thp_kb_by_comm": {comm: unadvised} if unadvised else {},
            "where": f"{where} ({comm} of this arm alone, read after its last window)"}

