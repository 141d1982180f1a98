"""Does a trial's measured evidence match the backing its arm asked for? Pure.

Every rule lives here, one function per layer; each returns a Check that is `verified`,
`contradicted` or `not applicable` (with the reason a user reads). A contradicted trial is
flagged and never counted as its arm.

workload layer (where the workload runs: the host, or inside a guest)
  - own mapping (hugelab-mem reports its buffer's /proc/self/smaps entry; postgres its
    postmaster's shared memory segment's):
      4k          KernelPageSize 4 kB, no AnonHugePages and no ShmemPmdMapped
      thp         AnonHugePages >= thp_min_fraction of the mapping's Rss
      hugetlb-2M  KernelPageSize 2048 kB;  hugetlb-1G  KernelPageSize 1048576 kB
      thp-collapse as thp, after MADV_COLLAPSE (the collapse's result is in the reason)
      shmem-thp   ShmemPmdMapped >= thp_min_fraction of the mapping's Rss
      mthp-<S>    KernelPageSize 4 kB, no PMD-size THP, and the folio evidence below
  - folio sizes (/proc/PID/pagemap + /proc/kpageflags of the largest anonymous/shmem mappings,
    sampled while the trial runs; for hugelab-mem the buffer's own mapping):
      mthp-<S>    at least thp_min_fraction of the present bytes in folios of size S
      4k          no folio larger than 4 KiB
  - process tree (every other workload: the peak of the whole tree's smaps_rollup, sampled
    while it runs; hugetlb pages by page size from smaps):
      4k          no AnonHugePages, no ShmemPmdMapped, no hugetlb pages in any process
      thp         AnonHugePages at least 10% of the tree's anonymous memory (peaks of each);
                  not applicable when the anonymous memory never reached 4 MiB (two huge
                  pages): too little to expect one
      hugetlb-*   hugetlb pages of that size mapped by the tree
vm layer (how QEMU backs guest RAM: QEMU's own smaps of the guest-RAM mapping)
      page_size   KernelPageSize of the guest-RAM mapping is that page size
      anon        host THP 'never': no AnonHugePages; otherwise AnonHugePages > 0 (not applicable
                  while less than 4 MiB of guest RAM is resident)
      memfd       without page_size: not applicable (shmem THP follows shmem_enabled)
      mthp S      (anon, or memfd without page_size) the folio sizes of QEMU's guest-RAM
                  mapping (pagemap + kpageflags, read after the workload): at least
                  thp_min_fraction of its present bytes in folios of size S
Host-wide counters (/proc/vmstat thp_*, pool free counts) explain results; they never prove.
"""

from __future__ import annotations

from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.experiment.backings import mthp_size_kb
from hugelab.units import amount, exact, page_label

PAGE_KB = {"4k": 4, "thp": 4, "hugetlb-2M": 2048, "hugetlb-1G": 1048576, "thp-collapse": 4,
           "shmem-thp": 4}
HUGE_KB = {"2M": 2048, "1G": 1048576}
MIN_ANON_FOR_THP_KB = 4096  # two 2 MiB pages: below this a THP-less tree proves nothing
# A thp tree needs at least this share of its anonymous memory in THP. Lower than hugelab-mem's
# own-buffer threshold: a tree also holds heaps, stacks and libraries that THP never covers
# (measured: stress-ng malloc 54-60%, redis 83%, sysbench 94%, a cc1 compile 43%).
TREE_THP_MIN_FRACTION = 0.1


def check_own_mapping(backing: str, ev: dict[str, Any], thp_min_fraction: float = 0.5,
                      layer: str = "workload") -> Check:
    """hugelab-mem's evidence of its own buffer (smaps of exactly that mapping)."""
    page = ev.get("KernelPageSize_kB")
    want = 4 if mthp_size_kb(backing) else PAGE_KB.get(backing)
    if page is None or want is None:
        return Check(NOT_APPLICABLE, f"no mapping rule for backing {backing!r}", layer)
    if page != want:
        return Check(CONTRADICTED, f"asked for {backing}, but the mapping's page size is {exact(page)}",
                     layer)
    rss = ev.get("Rss_kB") or 0
    anon_huge = ev.get("AnonHugePages_kB") or 0
    shmem_huge = ev.get("ShmemPmdMapped_kB") or 0  # a shared mapping's THP (shmem_enabled)
    if backing == "4k" and (anon_huge > 0 or shmem_huge > 0):
        return Check(CONTRADICTED, f"asked for 4k, but {anon_huge + shmem_huge} KiB are in "
                                   "transparent huge pages", layer)
    if backing in ("thp", "thp-collapse", "shmem-thp"):
        huge = (ev.get("ShmemPmdMapped_kB") or 0) if backing == "shmem-thp" else anon_huge
        share = huge / rss if rss else 0.0
        what = "shmem huge pages" if backing == "shmem-thp" else "huge pages"
        if share < thp_min_fraction:
            return Check(CONTRADICTED, f"asked for {backing}, but only {share:.0%} of the mapping "
                                       f"is in {what} (threshold {thp_min_fraction:.0%})"
                                       f"{_collapse_note(ev)}", layer)
        return Check(VERIFIED, f"{share:.0%} of the buffer in transparent {what}"
                               f"{_collapse_note(ev)}", layer)
    if mthp_size_kb(backing):
        if anon_huge > 0:
            return Check(CONTRADICTED, f"asked for {backing}, but {anon_huge} KiB are in PMD-size "
                                       "(2 MiB) THP", layer)
        return Check(VERIFIED, "buffer in 4 KiB page table entries, no PMD-size THP", layer)
    if backing.startswith("hugetlb-"):
        return Check(VERIFIED, f"{_mapping_name(ev)} in {exact(page)} hugetlb pages", layer)
    return Check(VERIFIED, f"{_mapping_name(ev)} in 4 KiB pages, no transparent huge pages",
                 layer)


def _mapping_name(ev: dict[str, Any]) -> str:
    """What the mapping is, for a reason: hugelab-mem's buffer, or what the workload says
    (postgres: the shared memory segment)."""
    return str(ev.get("mapping_role") or "buffer")


def _hugetlb_sizes(tree: dict[str, Any]) -> dict[int, int]:
    return {int(k): int(v) for k, v in (tree.get("hugetlb_by_page_kb") or {}).items() if v}


def check_tree(backing: str, tree: dict[str, Any], where: str = "host",
               layer: str = "workload", min_fraction: float = TREE_THP_MIN_FRACTION) -> Check:
    """The peak smaps_rollup of the workload's whole process tree (see module docstring); a
    thp tree needs `min_fraction` of its anonymous memory in THP (10%, or an experiment's
    lower `[evidence] thp_min_fraction`)."""
    if not tree or not tree.get("samples"):
        return Check(NOT_APPLICABLE, f"the workload's processes on {where} ended before the "
                                     "first sample", layer)
    n = tree.get("processes", 0)
    anon = int(tree.get("anon_kb", 0))
    anon_huge = int(tree.get("anon_huge_kb", 0))
    shmem_pmd = int(tree.get("shmem_pmd_kb", 0))
    sizes = _hugetlb_sizes(tree)
    hugetlb = sum(sizes.values())
    who = f"{n} process{'es' if n != 1 else ''} on {where}"
    if backing == "4k":
        if anon_huge or shmem_pmd or hugetlb:
            return Check(CONTRADICTED, f"asked for 4k, but {who} had {amount(anon_huge)} in "
                                       f"THP, {amount(shmem_pmd)} shmem PMD-mapped, "
                                       f"{amount(hugetlb)} hugetlb", layer)
        return Check(VERIFIED, f"no huge pages in {who} ({amount(anon)} anon at peak)", layer)
    if backing == "thp":
        share = anon_huge / anon if anon else (1.0 if anon_huge else 0.0)
        if anon_huge and share >= min_fraction:
            return Check(VERIFIED, f"{amount(anon_huge)} of {amount(anon)} anon in THP "
                                   f"({share:.0%}), {who}", layer)
        if anon_huge:
            return Check(CONTRADICTED, f"asked for thp, but only {amount(anon_huge)} of "
                                       f"{amount(anon)} anon of {who} was in THP ({share:.0%}"
                                       f" < {TREE_THP_MIN_FRACTION:.0%})", layer)
        if anon < MIN_ANON_FOR_THP_KB:
            return Check(NOT_APPLICABLE, f"{who} had only {amount(anon)} of anonymous memory:"
                                         " too little to expect a 2 MiB huge page", layer)
        return Check(CONTRADICTED, f"asked for thp, but none of the {amount(anon)} anon of "
                                   f"{who} was in huge pages (THP 'never', or memory that is "
                                   "not THP-eligible)", layer)
    want = PAGE_KB.get(backing)
    if want is None:
        return Check(NOT_APPLICABLE, f"no evidence rule for backing {backing!r}", layer)
    if sizes.get(want):
        return Check(VERIFIED, f"{amount(sizes[want])} in {backing.removeprefix('hugetlb-')} "
                               f"hugetlb pages, {who}", layer)
    if sizes:
        other = ", ".join(f"{amount(kb)} of {exact(size)} pages" for size, kb in sorted(sizes.items()))
        return Check(CONTRADICTED, f"asked for {backing}, but {who} mapped {other}", layer)
    return Check(CONTRADICTED, f"asked for {backing}, but {who} mapped no hugetlb pages", layer)


def _collapse_note(ev: dict[str, Any]) -> str:
    c = ev.get("collapse")
    if not isinstance(c, dict):
        return ""
    tries = c.get("attempts")
    again = f", {tries} attempts" if isinstance(tries, int) and tries > 1 else ""
    return (f" (MADV_COLLAPSE: {c.get('result')} in {float(c.get('seconds') or 0) * 1000:.1f} ms"
            f"{again})")


def _distribution(folios_kb: dict[str, int], present_kb: int) -> str:
    parts = sorted(folios_kb.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v / present_kb:.0%}" for k, v in parts if v) if present_kb else "none"


def _folio_data(folios: dict[str, Any], mapping_kb: int | None) -> dict[str, Any] | None:
    """The workload's own census of its buffer (hugelab-mem: no `mappings`); else the
    sampled mapping of `mapping_kb`, or all sampled mappings together."""
    if mapping_kb is None or "mappings" not in folios:
        return folios
    return next((m for m in folios.get("mappings") or [] if m.get("size_kb") == mapping_kb),
                None)


def check_folios(backing: str, folios: dict[str, Any] | None, min_fraction: float = 0.5,
                 mapping_kb: int | None = None, layer: str = "workload") -> Check:
    """Folio sizes from pagemap + kpageflags (hugelab.trial.folios) against the backing: an
    mthp-<S> mapping mostly in S folios, a 4k one with no folio larger than 4 KiB."""
    want = mthp_size_kb(backing)
    if backing != "4k" and not want:
        return Check(NOT_APPLICABLE, f"no folio rule for backing {backing!r}", layer)
    if not folios or not folios.get("available"):
        why = (folios or {}).get("reason") or "folio sizes were not sampled"
        return Check(NOT_APPLICABLE, f"folio sizes unknown: {why}", layer)
    data = _folio_data(folios, mapping_kb)
    if data is None:
        return Check(NOT_APPLICABLE, "no folio sample caught the buffer's mapping", layer)
    present = int(data.get("present_kb") or 0)
    dist = {k: int(v) for k, v in (data.get("folios_kb") or {}).items()}
    if not present:
        return Check(NOT_APPLICABLE, "no page of the sampled memory was present", layer)
    shown = _distribution(dist, present)
    if want is None:  # 4k
        large = sum(v for k, v in dist.items() if k != "4K")
        if large:
            return Check(CONTRADICTED, f"asked for 4k, but {amount(large)} of "
                                       f"{amount(present)} sampled are in larger folios "
                                       f"({shown})", layer)
        return Check(VERIFIED, f"{amount(present)} sampled, all in 4K folios", layer)
    label = page_label(want)  # the census's own keys (hugelab.trial.folios)
    share = dist.get(label, 0) / present
    if share < min_fraction:
        return Check(CONTRADICTED, f"asked for {backing}, but only {share:.0%} of "
                                   f"{amount(present)} sampled is in {label} folios "
                                   f"(threshold {min_fraction:.0%}; folios: {shown})", layer)
    return Check(VERIFIED, f"{share:.0%} of {amount(present)} sampled in {label} folios "
                           f"({shown})", layer)


def check_workload(backing: str, evidence: dict[str, Any], thp_min_fraction: float = 0.5,
                   where: str = "host") -> Check:
    """The workload layer: the workload's own mapping when it reports one, else its tree;
    for mthp-<S> and 4k also the folio sizes, when they were sampled."""
    folio_rule = backing == "4k" or mthp_size_kb(backing) is not None
    if "KernelPageSize_kB" in evidence:
        own = check_own_mapping(backing, evidence, thp_min_fraction)
        if own.status == CONTRADICTED or not folio_rule:
            return own
        size = evidence.get("Size_kB")
        folio = check_folios(backing, evidence.get("folios"), thp_min_fraction,
                             int(size) if size is not None else None)
    else:
        own = check_tree(backing, evidence.get("tree") or {}, where,
                         min_fraction=min(TREE_THP_MIN_FRACTION, thp_min_fraction))
        if own.status == CONTRADICTED or not folio_rule:
            return own
        folio = check_folios(backing, evidence.get("folios"), thp_min_fraction)
    if folio.status == CONTRADICTED or (folio.status == VERIFIED and own.status != VERIFIED):
        return folio
    if folio.status == VERIFIED:
        return Check(VERIFIED, f"{own.reason}; {folio.reason}", own.layer)
    if mthp_size_kb(backing):  # smaps cannot tell a 64K folio from a 4K page
        return Check(NOT_APPLICABLE, f"{own.reason}; {folio.reason}", own.layer)
    return own


def check_vm(vm_backing: str, page_size: str | None, qemu: dict[str, Any],
             host_thp: str | None, *, mthp: str | None = None,
             min_fraction: float = 0.5) -> Check:
    """The vm layer: QEMU's guest-RAM mapping against the arm's [arms.vm] backing."""
    if not qemu or "kernel_page_size_kb" not in qemu:
        why = qemu.get("error") if qemu else None
        return Check(NOT_APPLICABLE, f"QEMU's smaps were not read{': ' + str(why) if why else ''}",
                     "vm")
    kps = int(qemu["kernel_page_size_kb"])
    if mthp and not page_size:
        c = check_folios(f"mthp-{mthp}", qemu.get("folios"), min_fraction, layer="vm")
        return Check(c.status, f"guest RAM under host {mthp} mTHP: {c.reason}"
                               f"{_misaligned(qemu, mthp) if c.status == CONTRADICTED else ''}",
                     "vm")
    if page_size:
        want = HUGE_KB[page_size]
        if kps != want:
            return Check(CONTRADICTED, f"guest RAM asked for {page_size} pages, QEMU's mapping has "
                                       f"{exact(kps)} pages", "vm")
        return Check(VERIFIED, f"guest RAM in {page_size} hugetlb pages "
                               f"({amount(qemu.get('hugetlb_kb', 0))} of "
                               f"{amount(qemu.get('size_kb', 0))} mapped)", "vm")
    if vm_backing == "memfd":
        return Check(NOT_APPLICABLE, "memfd guest RAM without page_size is shmem: its THP follows "
                                     "/sys/kernel/mm/transparent_hugepage/shmem_enabled", "vm")
    huge, rss = int(qemu.get("anon_huge_kb", 0)), int(qemu.get("rss_kb", 0))
    if host_thp == "never":
        if huge:
            return Check(CONTRADICTED, f"host THP is 'never', yet {huge} KiB of guest RAM are in "
                                       "THP", "vm")
        return Check(VERIFIED, f"guest RAM in 4 KiB pages ({amount(rss)} resident, host THP "
                               "never)", "vm")
    if huge:
        return Check(VERIFIED, f"{amount(huge)} of {amount(rss)} resident guest RAM in THP",
                     "vm")
    if rss < MIN_ANON_FOR_THP_KB:
        return Check(NOT_APPLICABLE, f"only {amount(rss)} of guest RAM resident", "vm")
    return Check(CONTRADICTED, f"host THP is on, but none of the {amount(rss)} resident guest "
                               "RAM is in huge pages", "vm")


def _misaligned(qemu: dict[str, Any], mthp: str) -> str:
    """Why a file (memfd) mapping of guest RAM cannot get folios of `mthp`: the kernel maps a
    large page-cache folio only where the virtual address and the file offset agree modulo
    its size, and QEMU 7.2 aligns non-hugetlb memfd RAM to 4 KiB only."""
    size = int(mthp[:-1]) * (1024 if mthp.endswith("M") else 1) * 1024
    bad = [start for start, _end, path in qemu.get("ranges") or []
           if path and int(start, 16) % size]
    if not bad:
        return ""
    return (f" (QEMU mapped guest RAM at {bad[0]}, not aligned to {mthp}: a shared file "
            "mapping gets large folios only where its addresses align with the file's; QEMU "
            "aligns memfd RAM to the fd's page size only)")


def combine(checks: list[Check]) -> tuple[str, str]:
    """One verdict for a trial: contradicted if any layer is, verified if one layer is and
    none contradicts, else not applicable; with every layer's reason."""
    statuses = {c.status for c in checks}
    status = (CONTRADICTED if CONTRADICTED in statuses else
              VERIFIED if VERIFIED in statuses else NOT_APPLICABLE)
    first = [c for c in checks if c.status == status] + [c for c in checks if c.status != status]
    return status, "; ".join(f"{c.layer}: {c.reason}" for c in first if c.reason)
