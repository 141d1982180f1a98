"""A guest's file backing checked on the host before QEMU starts: the path must be a hugetlbfs
mount of the page size the arm asks for."""

from __future__ import annotations

import os
from pathlib import Path

from hugelab.errors import VMError
from hugelab.units import exact
from hugelab.vm.common.spec import VmSpec


def hugetlbfs_page_kb(path: str, mounts_text: str, default_kb: int = 2048) -> int | None:
    """Page size (KiB) of the hugetlbfs mounted at `path`, None if `path` is no hugetlbfs."""
    want = os.path.realpath(path)
    found = None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[1] != want:
            continue
        found = None  # the last mount on a path wins
        if parts[2] != "hugetlbfs":
            continue
        found = default_kb
        for opt in parts[3].split(","):
            if opt.startswith("pagesize="):
                found = _size_kb(opt.split("=", 1)[1])
    return found


def _size_kb(text: str) -> int:
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    text = text.strip().upper().removesuffix("B")
    if text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text) // 1024

def check_file_backing(spec: VmSpec) -> None:
    assert spec.hugetlbfs_path is not None
    mounts = Path("/proc/mounts").read_text()
    page_kb = hugetlbfs_page_kb(spec.hugetlbfs_path, mounts)
    if page_kb is None:
        raise VMError(f"{spec.hugetlbfs_path} is not a hugetlbfs mount",
                      hint="mount one: mount -t hugetlbfs -o pagesize=2M none DIR")
    if spec.hugetlb_size_kb is not None and spec.hugetlb_size_kb != page_kb:
        raise VMError(f"{spec.hugetlbfs_path} has {exact(page_kb)} pages, not the "
                      f"{exact(spec.hugetlb_size_kb)} the arm asks for",
                      hint="mount hugetlbfs with the matching pagesize= option")
