"""Memory amounts and page sizes in hugelab's words, from KiB (the kernel's "kB", which is 1024
bytes: every amount hugelab reads from /proc and /sys is in KiB).

Two forms, one each:

- a page size's label, as the kernel names sizes on its command line and hugelab's experiment
  files and evidence keys name them: `page_label` ('4K', '64K', '2M', '1G') and its inverse
  `page_kb`;
- an amount as people write it in experiment files, to bytes: `parse_size` ('64M', '2GiB',
  4096);
- an amount in words, for people: binary units always, spelled KiB, MiB, GiB, TiB (`amount`:
  '340 KiB', '6.0 MiB'; `exact`: '4 KiB', '2 MiB', '1 GiB' for a page size in a sentence).

The kernel's own names stay as the kernel spells them ('hugepages-2048kB', meminfo's 'kB'),
and so do stored keys ('KernelPageSize_kB'): only hugelab's own words use these.
"""

from __future__ import annotations

import re

KIB_PER_MIB = 1024
KIB_PER_GIB = 1024 * 1024
_LABEL_UNITS = (("G", KIB_PER_GIB), ("M", KIB_PER_MIB), ("K", 1))
_WORD_UNITS = (("TiB", KIB_PER_GIB * 1024), ("GiB", KIB_PER_GIB), ("MiB", KIB_PER_MIB))


def page_label(kb: int) -> str:
    """A page size's label: 4 -> '4K', 64 -> '64K', 2048 -> '2M', 1048576 -> '1G' (the largest
    unit that divides it)."""
    for unit, scale in _LABEL_UNITS:
        if kb % scale == 0 and kb >= scale:
            return f"{kb // scale}{unit}"
    return f"{kb}K"


def page_kb(label: str) -> int:
    """The inverse of `page_label`: '64K' -> 64, '2M' -> 2048, '1G' -> 1048576; ValueError
    for anything else."""
    m = re.fullmatch(r"([0-9]+)([KMG])", label.strip())
    if m is None:
        raise ValueError(f"not a page size label: {label!r} (like 4K, 64K, 2M, 1G)")
    return int(m.group(1)) * dict(_LABEL_UNITS)[m.group(2)]


def amount(kb: float) -> str:
    """An amount for people: 340 -> '340 KiB', 6144 -> '6.0 MiB', 1239040 -> '1.2 GiB'."""
    for unit, scale in _WORD_UNITS:
        if abs(kb) >= scale:
            return f"{kb / scale:.1f} {unit}"
    return f"{kb:.0f} KiB"


def exact(kb: int) -> str:
    """A size in whole units, for a page size in a sentence: 4 -> '4 KiB', 2048 -> '2 MiB',
    1048576 -> '1 GiB', 1536 -> '1536 KiB'."""
    for unit, scale in _WORD_UNITS:
        if kb >= scale and kb % scale == 0:
            return f"{kb // scale} {unit}"
    return f"{kb} KiB"


_SHIFTS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
_SIZE = re.compile(r"\s*(\d+)\s*(?:([KMGT])(?:iB|B)?)?\s*", re.IGNORECASE)


def parse_size(value: int | str) -> int:
    """4096, '4096', '1K', '2M', '64MiB', '1G' -> bytes (binary units). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value)
        if m is None:
            raise ValueError(f"invalid size {value!r}: expected bytes with an optional "
                             "K/M/G/T or KiB/MiB/GiB/TiB suffix, e.g. 4096, 64M, 2GiB")
        n = int(m.group(1)) << _SHIFTS[(m.group(2) or "").upper()]
    if n <= 0:
        raise ValueError(f"invalid size {value!r}: must be greater than zero")
    return n
