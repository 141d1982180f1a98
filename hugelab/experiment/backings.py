"""The backing vocabulary: how a workload maps its memory. One source of truth, pure.

  4k            anonymous memory, MADV_NOHUGEPAGE
  thp           anonymous memory, MADV_HUGEPAGE (PMD-size, 2 MiB on x86-64)
  hugetlb-2M/1G MAP_HUGETLB from the host's pools
  mthp-<size>   anonymous memory, MADV_HUGEPAGE, with multi-size THP (Linux 6.8+) of that
                folio size: a power of two from 8K, written as the kernel's hugepages-<N>kB
                directories name it (16K, 64K, 1M)
  thp-collapse  anonymous memory populated in 4 KiB pages, then MADV_COLLAPSE (Linux 6.1+)
  shmem-thp     a memfd (shmem) mapped MAP_SHARED, MADV_HUGEPAGE (shmem_enabled 'advise')

Which multi-size THP sizes exist is the kernel's: each size is a hugepages-<N>kB directory, and
its knobs say what it is for (`enabled`: anonymous memory; `shmem_enabled`: shmem; x86-64 lists
8K for shmem only). This module checks a size's form; the host (`hugelab inspect`) lists the
sizes, and a run skips an arm whose size its kernel does not offer for that kind of memory.
"""

from __future__ import annotations

import re

from hugelab.units import page_kb, page_label

CLASSIC = ("4k", "thp", "hugetlb-2M", "hugetlb-1G")
MTHP_PREFIX = "mthp-"
MTHP_FORM = f"{MTHP_PREFIX}<size>"
PMD_LABEL = "2M"  # x86-64's PMD size: a folio of that size is `thp`, not an mthp-<size>
MTHP_EXAMPLES = "16K, 64K, 1M"
BACKINGS = (*CLASSIC, "thp-collapse", "shmem-thp", MTHP_FORM)
# Backings a workload can only get by asking for them itself (madvise, memfd): hugelab-mem can
BACKINGS_SELF_REQUESTED = ("thp-collapse", "shmem-thp")


def mthp_size_label(size_kb: int) -> str:
    """64 -> '64K', 1024 -> '1M' (hugelab.units.page_label)."""
    return page_label(size_kb)


def label_kb(label: str) -> int | None:
    """'64K' -> 64, '1M' -> 1024: a multi-size THP folio size, a power of two of at least 8 KiB,
    written as the kernel's hugepages-<N>kB directories name it ('1M', never '1024K'); None
    for anything else."""
    if not isinstance(label, str) or not re.fullmatch(r"[1-9][0-9]{0,7}[KM]", label):
        return None
    kb = page_kb(label)
    if kb < 8 or kb & (kb - 1) or mthp_size_label(kb) != label:
        return None
    return kb


def mthp_size_kb(backing: str) -> int | None:
    """'mthp-64K' -> 64; None for every other backing (or a malformed size, or 2M: thp)."""
    if not isinstance(backing, str) or not backing.startswith(MTHP_PREFIX):
        return None
    label = backing.removeprefix(MTHP_PREFIX)
    return None if label == PMD_LABEL else label_kb(label)


def describe_choices() -> str:
    """For error hints: the vocabulary, with the mTHP sizes folded."""
    return ", ".join(BACKINGS[:-1]) + f", {MTHP_FORM} ({MTHP_EXAMPLES}...)"


def mthp_size_problem(label: str) -> str:
    """Why `label` is not a multi-size THP size (for an error)."""
    if label == PMD_LABEL:
        return f"{PMD_LABEL} is 'thp', not a multi-size THP size"
    return (f"{label!r} is not a multi-size THP size: a power of two from 8K, written like "
            f"{MTHP_EXAMPLES} (a kernel's sizes are its hugepages-<N>kB directories; "
            "`hugelab inspect` lists this host's)")


def backing_error(backing: str) -> str | None:
    """Why `backing` is not a backing name, or None."""
    if backing in BACKINGS[:-1] or mthp_size_kb(backing) is not None:
        return None
    if isinstance(backing, str) and backing.startswith(MTHP_PREFIX):
        return f"'{backing}': {mthp_size_problem(backing.removeprefix(MTHP_PREFIX))}"
    return f"unknown backing {backing!r}; one of: {describe_choices()}"
