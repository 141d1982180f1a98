"""Folio-size evidence: pure parsing of pagemap / kpageflags bytes, windows, the evidence rule."""

from __future__ import annotations

import struct

import pytest

from hugelab.trial import folios
from hugelab.trial.evidence import (
    CONTRADICTED,
    NOT_APPLICABLE,
    VERIFIED,
    check_folios,
    check_workload,
)
from hugelab.trial.folios import (
    KPF_COMPOUND_HEAD as HEAD,
)
from hugelab.trial.folios import (
    KPF_COMPOUND_TAIL as TAIL,
)
from hugelab.trial.folios import (
    KPF_HUGE,
    KPF_THP,
    PM_PRESENT,
    classify,
    parse_kpageflags,
    parse_pagemap,
)

KiB = 1024


def pagemap_bytes(pfns: list[int | None]) -> bytes:
    return b"".join(struct.pack("<Q", 0 if p is None else PM_PRESENT | p | (1 << 56))
                    for p in pfns)


def folio(head_pfn: int, pages: int, extra: int = KPF_THP) -> dict[int, int]:
    """kpageflags of one compound folio: a head and its tails."""
    return {head_pfn + i: (HEAD if i == 0 else TAIL) | extra for i in range(pages)}


def test_parse_pagemap_present_bit_and_pfn() -> None:
    data = pagemap_bytes([0x1234, None, 0x7FFFFFFFFFFFF]) + b"\x01"  # a torn last entry
    assert parse_pagemap(data) == [0x1234, None, 0x7FFFFFFFFFFFF]


def test_parse_kpageflags() -> None:
    assert parse_kpageflags(struct.pack("<2Q", HEAD | KPF_THP, TAIL)) == [HEAD | KPF_THP, TAIL]


def test_small_pages_are_4k_even_with_contiguous_pfns() -> None:
    pfns = list(range(1000, 1016))  # contiguous, but no compound flag: 16 order-0 folios
    c = classify(pfns, {p: 0 for p in pfns})
    assert c.by_size == {4: 16 * 4 * KiB} and c.present == 64 * KiB


def test_64k_folios_from_head_and_tail_runs() -> None:
    # two 64 KiB folios, not adjacent in PFN space, then a small page and a hole
    flags = {**folio(4096, 16), **folio(8192, 16), 50: 0}
    pfns = [*range(4096, 4112), *range(8192, 8208), 50, None]
    c = classify(pfns, flags)
    assert c.by_size == {64: 128 * KiB, 4: 4 * KiB}
    assert c.absent == 4 * KiB
    assert c.to_dict()["folios_kb"] == {"4K": 4, "64K": 128}


def test_adjacent_folios_split_at_the_next_head() -> None:
    flags = {**folio(0x200, 4), **folio(0x204, 4)}  # two 16 KiB folios back to back
    c = classify(list(range(0x200, 0x208)), flags)
    assert c.by_size == {16: 32 * KiB}


def test_pmd_thp_and_hugetlb_and_partial() -> None:
    thp = folio(0x40000, 512)
    huge = folio(0x80000, 512, KPF_HUGE)
    pfns = [*range(0x40000 + 256, 0x40000 + 512),  # starts mid-folio: partial
            *range(0x40000, 0x40000 + 512), *range(0x80000, 0x80000 + 512)]
    c = classify(pfns, {**thp, **huge})
    assert c.partial == 256 * 4 * KiB
    assert c.by_size == {2048: 2048 * KiB}
    assert c.hugetlb == 2048 * KiB


def test_noncontiguous_tail_ends_a_run() -> None:
    flags = folio(0x100, 16)
    pfns = [0x100, 0x101, 0x103, 0x102]  # mapped out of order (mremap): runs of 2, then tails
    c = classify(pfns, flags)
    assert c.by_size == {8: 8 * KiB} and c.partial == 8 * KiB


def test_compound_pages_that_are_not_thp() -> None:
    c = classify([10, 11], folio(10, 2, extra=0))
    assert c.other == 8 * KiB and not c.by_size


def test_pfn_ranges_merge_close_pfns() -> None:
    assert folios.pfn_ranges([5, 6, 7, None, 100, 5000]) == [(5, 96), (5000, 1)]
    assert folios.pfn_ranges([None, 0]) == []


def test_windows_cover_small_ranges_whole_and_sample_large_ones() -> None:
    page = folios.PAGE
    assert folios.windows(0x1000, 0x1000 + 10 * page, 512) == [(1, 10)]
    win = folios.windows(0, 1 << 30, 4096)  # 1 GiB, budget 16 MiB: eight 2 MiB windows
    assert len(win) == 8 and all(n == 512 and first % 512 == 0 for first, n in win)
    assert win[-1][0] * page < 1 << 30


def test_anon_mappings_keep_rw_anon_and_shmem_only() -> None:
    maps = """\
55d0c0000000-55d0c0021000 r-xp 00000000 08:01 123 /usr/bin/hugelab-mem
55d0c0200000-55d0c0400000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
7f0004000000-7f0004200000 ---p 00000000 00:00 0
7f1000000000-7f1000200000 rw-s 00000000 00:01 77 /memfd:hugelab-mem (deleted)
7f2000000000-7f2000100000 rw-p 00000000 08:01 9 /var/lib/data.bin
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
"""
    got = folios.anon_mappings(maps)
    assert [(hex(s), n) for s, _e, n in got] == [
        ("0x55d0c0200000", "[heap]"), ("0x7f0000000000", ""),
        ("0x7f1000000000", "/memfd:hugelab-mem (deleted)")]


def test_summarize_shares() -> None:
    maps = [{"folios_kb": {"64K": 96, "4K": 32}, "hugetlb_kb": 0, "partial_kb": 0, "other_kb": 0,
             "present_kb": 128, "absent_kb": 0, "sampled_kb": 128},
            {"folios_kb": {"4K": 128}, "hugetlb_kb": 0, "partial_kb": 0, "other_kb": 0,
             "present_kb": 128, "absent_kb": 64, "sampled_kb": 192}]
    s = folios.summarize(maps)
    assert s["folios_kb"] == {"4K": 160, "64K": 96}
    assert s["share"] == {"4K": 0.625, "64K": 0.375}
    assert s["present_kb"] == 256 and s["absent_kb"] == 64


def test_stats_delta_keeps_what_moved(tmp_path) -> None:
    for size, alloc in ((64, 5), (2048, 1)):
        d = tmp_path / f"hugepages-{size}kB" / "stats"
        d.mkdir(parents=True)
        (d / "anon_fault_alloc").write_text(f"{alloc}\n")
        (d / "anon_fault_fallback").write_text("0\n")
    (tmp_path / "hugepages-8kB").mkdir()  # no stats directory: left out
    before = folios.mthp_stats(tmp_path)
    assert before == {"64K": {"anon_fault_alloc": 5, "anon_fault_fallback": 0},
                      "2M": {"anon_fault_alloc": 1, "anon_fault_fallback": 0}}
    (tmp_path / "hugepages-64kB" / "stats" / "anon_fault_alloc").write_text("9\n")
    assert folios.stats_delta(before, folios.mthp_stats(tmp_path)) == {
        "64K": {"anon_fault_alloc": 4}}
    assert folios.mthp_stats(tmp_path / "missing") == {}


# --- the evidence rule ---------------------------------------------------------------------

def _folios(dist: dict[str, int], size_kb: int = 65536) -> dict:
    present = sum(dist.values())
    m = {"size_kb": size_kb, "folios_kb": dist, "present_kb": present}
    return {"available": True, "mappings": [m], "folios_kb": dist, "present_kb": present}


OWN_4K = {"KernelPageSize_kB": 4, "AnonHugePages_kB": 0, "Rss_kB": 65536, "Size_kB": 65536}


def test_mthp_trial_with_64k_folios_is_verified() -> None:
    ev = {**OWN_4K, "folios": _folios({"64K": 63488, "4K": 2048})}
    c = check_workload("mthp-64K", ev)
    assert c.status == VERIFIED and "97% of 64.0 MiB sampled in 64K folios" in c.reason


def test_a_workloads_own_census_is_read_without_mappings() -> None:
    census = {"available": True, "source": "hugelab-mem", "folios_kb": {"16K": 65536},
              "present_kb": 65536}
    c = check_workload("mthp-16K", {**OWN_4K, "folios": census})
    assert c.status == VERIFIED and "100% of 64.0 MiB sampled in 16K folios" in c.reason
    census["folios_kb"] = {"4K": 33792, "16K": 31744}
    c = check_workload("mthp-16K", {**OWN_4K, "folios": census})
    assert c.status == CONTRADICTED and "only 48%" in c.reason


def test_mthp_trial_without_64k_folios_is_flagged() -> None:
    ev = {**OWN_4K, "folios": _folios({"4K": 65536})}
    c = check_workload("mthp-64K", ev)
    assert c.status == CONTRADICTED and "only 0%" in c.reason and "4K 100%" in c.reason
    pmd = {**OWN_4K, "AnonHugePages_kB": 65536, "folios": _folios({"2M": 65536})}
    assert "PMD-size" in check_workload("mthp-64K", pmd).reason


def test_4k_trial_with_large_folios_is_flagged() -> None:
    ev = {**OWN_4K, "folios": _folios({"4K": 32768, "16K": 32768})}
    c = check_workload("4k", ev)
    assert c.status == CONTRADICTED and "16K 50%" in c.reason
    ok = check_workload("4k", {**OWN_4K, "folios": _folios({"4K": 65536})})
    assert ok.status == VERIFIED and "all in 4K folios" in ok.reason


def test_folio_rule_needs_a_sample_of_the_buffer() -> None:
    assert check_workload("mthp-64K", OWN_4K).status == NOT_APPLICABLE
    other = {**OWN_4K, "folios": _folios({"64K": 1024}, size_kb=8192)}
    c = check_workload("mthp-64K", other)
    assert c.status == NOT_APPLICABLE and "caught the buffer" in c.reason
    # without folio sampling a 4k trial keeps its smaps verdict
    assert check_workload("4k", OWN_4K).status == VERIFIED
    hidden = {"available": False, "reason": "pagemap hides PFNs"}
    assert "hides PFNs" in check_folios("mthp-16K", hidden).reason


def test_tree_workloads_use_all_sampled_mappings() -> None:
    tree = {"samples": 3, "processes": 2, "anon_kb": 65536, "anon_huge_kb": 0}
    ev = {"tree": tree, "folios": _folios({"32K": 60000, "4K": 5536})}
    assert check_workload("mthp-32K", ev).status == VERIFIED


@pytest.mark.parametrize("backing,ev,status", [
    ("thp-collapse", {**OWN_4K, "AnonHugePages_kB": 65536,
                      "collapse": {"result": "0", "seconds": 0.02}}, VERIFIED),
    ("thp-collapse", {**OWN_4K, "collapse": {"result": "EAGAIN", "seconds": 0.5}}, CONTRADICTED),
    ("thp-collapse", {**OWN_4K, "AnonHugePages_kB": 65536,
                      "collapse": {"result": "0", "seconds": 0.03, "attempts": 2}}, VERIFIED),
    ("shmem-thp", {**OWN_4K, "ShmemPmdMapped_kB": 65536}, VERIFIED),
    ("shmem-thp", {**OWN_4K, "ShmemPmdMapped_kB": 0}, CONTRADICTED),
])
def test_collapse_and_shmem_rules(backing: str, ev: dict, status: str) -> None:
    c = check_workload(backing, ev)
    assert c.status == status
    if "collapse" in ev:
        assert f"MADV_COLLAPSE: {ev['collapse']['result']}" in c.reason
        assert ("2 attempts" in c.reason) == (ev["collapse"].get("attempts") == 2), c.reason


def test_sampler_reads_a_live_process_mapping() -> None:
    import mmap
    import os

    if not os.access("/proc/kpageflags", os.R_OK):
        pytest.skip("reading /proc/kpageflags needs root")
    buf = mmap.mmap(-1, 64 << 20)  # 64 MiB: larger than anything else pytest maps
    for off in range(0, len(buf), 4096):
        buf[off] = 1
    try:
        sampler = folios.FolioSampler(lambda: [os.getpid()])
        sampler.sample()
        out = sampler.stop()
    finally:
        buf.close()
    assert out["available"] and out["samples"] == 1
    mine = next(m for m in out["mappings"] if m["size_kb"] == 65536)
    # the budget (64 MiB) is shared among the largest mappings by size: windows of this one
    assert mine["size_kb"] == 65536 and 2048 <= mine["sampled_kb"] <= 65536
    assert mine["present_kb"] == mine["sampled_kb"] == sum(mine["folios_kb"].values())
