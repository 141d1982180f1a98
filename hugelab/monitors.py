"""Counters read before and after each trial; the deltas explain why an arm was faster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hugelab.host.paths import REAL, HostPaths, parse_kv_kb, parse_vmstat, read_text

VMSTAT_PREFIXES = ("thp_", "compact_", "numa_", "pswp", "pgfault", "pgmajfault", "htlb_")
MEMINFO_KEYS = ("MemFree", "AnonHugePages", "HugePages_Total", "HugePages_Free",
                "HugePages_Rsvd", "HugePages_Surp", "Hugetlb")


@dataclass(frozen=True)
class Snapshot:
    vmstat: dict[str, int]
    meminfo: dict[str, int]


def snapshot(paths: HostPaths = REAL) -> Snapshot:
    vm = parse_vmstat(read_text(paths.vmstat, "") or "")
    mi = parse_kv_kb(read_text(paths.meminfo, "") or "")
    return Snapshot({k: v for k, v in vm.items() if k.startswith(VMSTAT_PREFIXES)},
                    {k: mi[k] for k in MEMINFO_KEYS if k in mi})


def delta(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """vmstat counter deltas (only those that moved), meminfo before/after and min seen."""
    vm = {k: after.vmstat[k] - v for k, v in before.vmstat.items()
          if k in after.vmstat and after.vmstat[k] != v}
    return {"vmstat": vm, "meminfo_before": before.meminfo, "meminfo_after": after.meminfo}


def thp_fault_share(vmstat_delta: dict[str, int]) -> float | None:
    """Share of THP fault attempts served by a huge page (None when THP was never tried)."""
    alloc = vmstat_delta.get("thp_fault_alloc", 0)
    fallback = vmstat_delta.get("thp_fault_fallback", 0)
    return alloc / (alloc + fallback) if alloc + fallback else None
