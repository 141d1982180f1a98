"""The postmaster's main shared memory segment, read from /proc/PID/smaps: the evidence that
shared buffers really are in the pages the arm asked for.

PostgreSQL maps it MAP_SHARED|MAP_ANONYMOUS (shared_memory_type = mmap, the default): smaps
names it `/dev/zero (deleted)` (shmem: 4 KiB pages, or shmem THP under shmem_enabled) or, with
MAP_HUGETLB, `/anon_hugepage (deleted)` with KernelPageSize the huge page size. Its hugetlb
pages are counted in Shared_Hugetlb/Private_Hugetlb, never in Rss. The largest such mapping is
the segment (the System V one beside it is a few bytes, `/SYSV<key> (deleted)`)."""

from __future__ import annotations

from typing import Any

from hugelab.errors import WorkloadError

SEGMENT_NAMES = ("/dev/zero (deleted)", "/anon_hugepage (deleted)")
FIELDS = {"Size": "Size_kB", "KernelPageSize": "KernelPageSize_kB", "Rss": "Rss_kB",
          "AnonHugePages": "AnonHugePages_kB", "ShmemPmdMapped": "ShmemPmdMapped_kB",
          "Shared_Hugetlb": "Shared_Hugetlb_kB", "Private_Hugetlb": "Private_Hugetlb_kB"}


def mappings(smaps: str) -> list[dict[str, Any]]:
    """Each mapping of an smaps text: its name and its fields in KiB (pure)."""
    out: list[dict[str, Any]] = []
    for line in smaps.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            out.append({"range": head[0], "name": head[5].strip() if len(head) > 5 else ""})
        elif out and ":" in line:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                out[-1][FIELDS[key]] = int(rest.split()[0])
    return out


def check_segment(smaps: str) -> dict[str, Any]:
    """The segment's evidence: KernelPageSize_kB, Size_kB, Rss_kB, AnonHugePages_kB,
    ShmemPmdMapped_kB, Hugetlb_kB (shared + private), its name and range (pure); `error`
    when the postmaster maps no such segment."""
    found = [m for m in mappings(smaps) if m["name"] in SEGMENT_NAMES]
    if not found:
        return {"error": "the postmaster maps no shared memory segment (/dev/zero or "
                         "/anon_hugepage)"}
    seg = max(found, key=lambda m: m.get("Size_kB", 0))
    ev = {k: seg.get(k, 0) for k in ("KernelPageSize_kB", "Size_kB", "Rss_kB",
                                     "AnonHugePages_kB", "ShmemPmdMapped_kB")}
    ev["Hugetlb_kB"] = seg.get("Shared_Hugetlb_kB", 0) + seg.get("Private_Hugetlb_kB", 0)
    ev["mapping"] = seg["name"]
    ev["mapping_role"] = "the postmaster's shared memory segment"
    ev["range"] = seg["range"]
    return ev


def read_segment(pid: int) -> dict[str, Any]:
    try:
        with open(f"/proc/{pid}/smaps") as f:
            text = f.read()
    except OSError as exc:
        return {"error": f"cannot read the postmaster's smaps: {exc}"}
    ev = check_segment(text)
    ev["postmaster_pid"] = pid
    return ev


def read_required(pid: int) -> dict[str, Any]:
    """The postmaster's segment evidence (read_segment); WorkloadError naming why there is
    none."""
    evidence = read_segment(pid)
    if "error" in evidence:
        raise WorkloadError(f"postgres: {evidence['error']}")
    return evidence
