"""Does a trial's measured evidence match the backing its arm asked for? Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAGE_KB = {"4k": 4, "thp": 4, "hugetlb-2M": 2048, "hugetlb-1G": 1048576}


@dataclass(frozen=True)
class Check:
    status: str  # "ok" | "contradicts" | "unverified"
    reason: str = ""


def check_backing(backing: str, ev: dict[str, Any], thp_min_fraction: float = 0.5) -> Check:
    """Compare smaps evidence of the workload's own mapping with the arm's backing."""
    page = ev.get("KernelPageSize_kB")
    if page is None:
        return Check("unverified", "the workload reports no mapping evidence")
    want = PAGE_KB.get(backing)
    if want is None:
        return Check("unverified", f"no evidence rule for backing {backing!r}")
    if page != want:
        return Check("contradicts", f"asked for {backing}, but the mapping's page size is {page} kB")
    rss = ev.get("Rss_kB") or 0
    anon_huge = ev.get("AnonHugePages_kB") or 0
    if backing == "4k" and anon_huge > 0:
        return Check("contradicts", f"asked for 4k, but {anon_huge} kB are in transparent huge pages")
    if backing == "thp":
        share = anon_huge / rss if rss else 0.0
        if share < thp_min_fraction:
            return Check("contradicts", f"asked for thp, but only {share:.0%} of the mapping is in "
                                        f"huge pages (threshold {thp_min_fraction:.0%})")
    return Check("ok")
