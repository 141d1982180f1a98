"""What hugelab-mem's own smaps read proves: whether its buffer has the backing asked
(`backing_problem`), and, for a sparse buffer (touch_fraction), what the layout predicts against
what was resident (`layout_evidence`). Pure."""

from __future__ import annotations

import math
from typing import Any

from hugelab.experiment.backings import mthp_size_kb


def backing_problem(backing: str, evidence: dict[str, Any]) -> str | None:
    """Why the smaps evidence contradicts `backing`, or None when it agrees."""
    kps = evidence.get("KernelPageSize_kB")
    anon_huge = evidence.get("AnonHugePages_kB") or 0
    rss = evidence.get("Rss_kB") or 0
    if backing == "4k" and (kps != 4 or anon_huge):
        return f"4k backing but KernelPageSize_kB={kps}, AnonHugePages_kB={anon_huge}"
    if backing in ("thp", "thp-collapse") and anon_huge * 2 <= rss:
        return f"{backing} backing but only {anon_huge} of {rss} KiB resident are huge pages"
    shmem_huge = evidence.get("ShmemPmdMapped_kB") or 0
    if backing == "shmem-thp" and shmem_huge * 2 <= rss:
        return f"shmem-thp backing but only {shmem_huge} of {rss} KiB resident are shmem huge pages"
    if mthp_size_kb(backing) and anon_huge:
        return f"{backing} backing but {anon_huge} KiB are PMD-size (2 MiB) THP"
    want = {"hugetlb-2M": 2048, "hugetlb-1G": 1048576}.get(backing)
    if want is not None and kps != want:
        return f"{backing} backing but KernelPageSize_kB={kps}"
    return None


REGION = 2 << 20  # touch_fraction's unit: a PMD-size region


def touched_pages(fraction: float) -> int:
    """4 KiB pages touch_fraction `fraction` writes at the start of each 2 MiB region."""
    return math.ceil(fraction * (REGION // 4096))


def layout_evidence(layout: dict[str, Any], backing: str, evidence: dict[str, Any]
                    ) -> dict[str, Any]:
    """hugelab-mem's sparse layout with what its own smaps read measured at the end: the
    buffer's Rss, or its hugetlb pages for a hugetlb backing (smaps counts those apart from
    Rss), against `expected_kb`, the layout's prediction for this backing's page size."""
    out = dict(layout)
    if backing.startswith("hugetlb-"):
        parts = [p for k in ("Private_Hugetlb_kB", "Shared_Hugetlb_kB")
                 if isinstance(p := evidence.get(k), int)]
        measured = sum(parts) if parts else None
        out["measured_field"] = "Private_Hugetlb_kB + Shared_Hugetlb_kB"
    else:
        measured = evidence.get("Rss_kB")
        out["measured_field"] = "Rss_kB"
    expected = out.get("expected_kb")
    out["measured_kb"] = measured
    out["measured_over_expected"] = (
        measured / expected if isinstance(measured, int) and isinstance(expected, int)
        and expected > 0 else None)
    return out
