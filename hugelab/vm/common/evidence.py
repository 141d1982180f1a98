"""Proof of how QEMU really backs guest RAM: the guest-RAM mapping(s) in /proc/PID/smaps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hugelab.errors import VMError
from hugelab.trial.folios import PfnHidden, scan_mappings, summarize

_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) [0-9a-f]+ \S+ \d+\s*(.*)$")
_FIELD = re.compile(r"^(\w+):\s+(\d+) kB$")
_SUMMED = {"Rss": "rss_kb", "AnonHugePages": "anon_huge_kb", "ShmemPmdMapped": "shmem_pmd_kb",
           "FilePmdMapped": "file_pmd_kb", "Private_Hugetlb": "private_hugetlb_kb",
           "Shared_Hugetlb": "shared_hugetlb_kb", "Swap": "swap_kb"}


def parse_smaps(text: str) -> list[dict[str, Any]]:
    """One dict per mapping: start, end, size_kb, perms, path, every `X: N kB` field, flags."""
    vmas: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            cur = {"start": start, "end": end, "size_kb": (end - start) // 1024,
                   "perms": m.group(3), "path": m.group(4).strip(), "fields": {}}
            vmas.append(cur)
            continue
        if cur is None:
            continue
        f = _FIELD.match(line)
        if f:
            cur["fields"][f.group(1)] = int(f.group(2))
        elif line.startswith("VmFlags:"):
            cur["vmflags"] = line.split(":", 1)[1].split()
        elif line.startswith("THPeligible:"):
            cur["thp_eligible"] = line.split(":", 1)[1].strip() == "1"
    return vmas


def _pick_guest_ram(vmas: list[dict[str, Any]], size_bytes: int | None) -> list[dict[str, Any]]:
    if not vmas:
        return []
    if size_bytes:
        size_kb = size_bytes // 1024
        exact = [v for v in vmas if v["size_kb"] == size_kb]
        if exact:
            return exact
        bigger = [v for v in vmas if v["size_kb"] >= size_kb]
        if bigger:
            return [min(bigger, key=lambda v: v["size_kb"])]
    return [max(vmas, key=lambda v: v["size_kb"])]


def infer_backing(kernel_page_size_kb: int, anon_huge_kb: int) -> str:
    if kernel_page_size_kb == 1048576:
        return "hugetlb-1G"
    if kernel_page_size_kb == 2048:
        return "hugetlb-2M"
    if anon_huge_kb > 0:
        return "thp"
    return "4k"


def guest_ram_evidence(smaps_text: str, size_bytes: int | None = None) -> dict[str, Any]:
    """Sum the guest-RAM mapping(s) of a QEMU smaps text (pure; see qemu_memory_evidence)."""
    chosen = _pick_guest_ram(parse_smaps(smaps_text), size_bytes)
    if not chosen:
        raise VMError("no mappings found in QEMU's smaps")
    out: dict[str, Any] = {v: 0 for v in _SUMMED.values()}
    page_sizes = set()
    for v in chosen:
        for src, dst in _SUMMED.items():
            out[dst] += v["fields"].get(src, 0)
        page_sizes.add(v["fields"].get("KernelPageSize", 4))
    kps = max(page_sizes)
    out["hugetlb_kb"] = out["private_hugetlb_kb"] + out["shared_hugetlb_kb"]
    out["size_kb"] = sum(v["size_kb"] for v in chosen)
    out["kernel_page_size_kb"] = kps
    out["mmu_page_size_kb"] = max(v["fields"].get("MMUPageSize", 4) for v in chosen)
    out["paths"] = sorted({v["path"] for v in chosen})
    out["ranges"] = [[hex(v["start"]), hex(v["end"]), v["path"]] for v in chosen]
    out["vmas"] = len(chosen)
    out["thp_eligible"] = any(v.get("thp_eligible", False) for v in chosen)
    out["madv_hugepage"] = any("hg" in v.get("vmflags", []) for v in chosen)
    out["thp_fraction"] = (out["anon_huge_kb"] / out["rss_kb"]) if out["rss_kb"] else 0.0
    out["backing"] = infer_backing(kps, out["anon_huge_kb"])
    return out


def qemu_memory_evidence(pid: int, size_bytes: int | None = None) -> dict[str, Any]:
    """Evidence of a running QEMU's guest-RAM backing, from /proc/PID/smaps.

    The guest-RAM mapping is the one of exactly `size_bytes` (the guest's memory size) when
    given, else the largest mapping. Keys: size_kb, rss_kb, anon_huge_kb, kernel_page_size_kb,
    mmu_page_size_kb, private_hugetlb_kb, shared_hugetlb_kb, hugetlb_kb, thp_fraction, paths,
    backing ("hugetlb-2M" | "hugetlb-1G" | "thp" | "4k"), pid.
    """
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError as exc:
        raise VMError(f"cannot read smaps of QEMU pid {pid}: {exc.strerror}",
                      hint="the guest must be running; read evidence before it shuts down") from exc
    ev = guest_ram_evidence(text, size_bytes)
    ev["pid"] = pid
    return ev


def qemu_folio_evidence(pid: int, ev: dict[str, Any], proc: str = "/proc") -> dict[str, Any]:
    """The folio sizes of QEMU's guest-RAM mapping(s) (`ev`: qemu_memory_evidence's, with
    their ranges), from pagemap + kpageflags within the sampler's page budget: the proof that
    guest RAM is in multi-size THP folios, which smaps cannot give (root only)."""
    maps = [(pid, int(s, 16), int(e, 16), name) for s, e, name in ev.get("ranges") or []]
    if not maps:
        return {"available": False, "reason": "no guest-RAM mapping found"}
    try:
        found = scan_mappings(maps, proc=proc)
    except PfnHidden as exc:
        return {"available": False, "reason": str(exc)}
    except OSError as exc:
        return {"available": False, "reason": f"cannot read QEMU's pagemap: {exc.strerror}"}
    if not found:
        return {"available": False, "reason": "QEMU ended before its guest RAM was read"}
    return {"available": True, "samples": 1, **summarize(found), "mappings": found}
