"""The backing vocabulary: how a workload maps its memory. One source of truth, pure.

  4k            anonymous memory, MADV_NOHUGEPAGE
  thp           anonymous memory, MADV_HUGEPAGE (PMD-size, 2 MiB on x86-64)
  hugetlb-2M/1G MAP_HUGETLB from the host's pools
  mthp-<size>   anonymous memory, MADV_HUGEPAGE, with multi-size THP (Linux 6.8+) of that
                folio size: 16K, 32K, 64K, 128K, 256K, 512K or 1M
  thp-collapse  anonymous memory populated in 4 KiB pages, then MADV_COLLAPSE (Linux 6.1+)
  shmem-thp     a memfd (shmem) mapped MAP_SHARED, MADV_HUGEPAGE (shmem_enabled 'advise')
"""

from __future__ import annotations

CLASSIC = ("4k", "thp", "hugetlb-2M", "hugetlb-1G")
MTHP_SIZES_KB = (16, 32, 64, 128, 256, 512, 1024)
MTHP_PREFIX = "mthp-"


def mthp_size_label(size_kb: int) -> str:
    """64 -> '64K', 1024 -> '1M'."""
    return f"{size_kb // 1024}M" if size_kb % 1024 == 0 else f"{size_kb}K"


MTHP_BACKINGS = tuple(f"{MTHP_PREFIX}{mthp_size_label(s)}" for s in MTHP_SIZES_KB)
BACKINGS = (*CLASSIC, "thp-collapse", "shmem-thp", *MTHP_BACKINGS)
# Backings a workload can only get by asking for them itself (madvise, memfd): hugelab-mem can
BACKINGS_SELF_REQUESTED = ("thp-collapse", "shmem-thp")


def mthp_size_kb(backing: str) -> int | None:
    """'mthp-64K' -> 64; None for every other backing (or an unknown size)."""
    if not backing.startswith(MTHP_PREFIX):
        return None
    for size in MTHP_SIZES_KB:
        if backing == f"{MTHP_PREFIX}{mthp_size_label(size)}":
            return size
    return None


def describe_choices() -> str:
    """For error hints: the vocabulary, with the mTHP sizes folded."""
    return (", ".join((*CLASSIC, "thp-collapse", "shmem-thp")) +
            f", mthp-<size> ({', '.join(mthp_size_label(s) for s in MTHP_SIZES_KB)})")


def backing_error(backing: str) -> str | None:
    """Why `backing` is not a backing name, or None."""
    if backing in BACKINGS:
        return None
    if backing.startswith(MTHP_PREFIX):
        return (f"'{backing}' is not a multi-size THP size hugelab knows: sizes are "
                f"{', '.join(mthp_size_label(s) for s in MTHP_SIZES_KB)} (2M is 'thp')")
    return f"unknown backing {backing!r}; one of: {describe_choices()}"
