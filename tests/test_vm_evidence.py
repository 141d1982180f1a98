"""evidence: guest-RAM mapping of a QEMU smaps."""

import os

from hugelab.vm.common.evidence import guest_ram_evidence, parse_smaps, qemu_memory_evidence


def vma(start: int, size_kb: int, path: str, **fields: int) -> str:
    end = start + size_kb * 1024
    lines = [f"{start:x}-{end:x} rw-p 00000000 00:00 0 {path}".rstrip(),
             f"Size:           {size_kb} kB"]
    lines += [f"{k}: {v} kB" for k, v in fields.items()]
    lines.append("THPeligible:    1")
    lines.append("VmFlags: rd wr mr mw me ac hg")
    return "\n".join(lines)


SMAPS_THP = "\n".join([
    vma(0x1000000, 4096, "[heap]", Rss=400, KernelPageSize=4, MMUPageSize=4),
    vma(0x7f0000000000, 524288, "", Rss=300000, AnonHugePages=294912, KernelPageSize=4,
        MMUPageSize=4),
    vma(0x7f0020000000, 4, "", Rss=0, KernelPageSize=4),
])

SMAPS_HUGETLB = "\n".join([
    vma(0x1000000, 4096, "[heap]", Rss=400, KernelPageSize=4),
    vma(0x7f4000000000, 262144, "/mnt/h/qemu_back_mem.mem0.X (deleted)", Rss=0,
        Private_Hugetlb=262144, Shared_Hugetlb=0, KernelPageSize=2048, MMUPageSize=2048),
])


def test_parse_smaps_fields():
    v = parse_smaps(SMAPS_THP)
    assert len(v) == 3
    assert v[1]["size_kb"] == 524288 and v[1]["fields"]["AnonHugePages"] == 294912
    assert v[0]["path"] == "[heap]" and v[1]["thp_eligible"] and "hg" in v[1]["vmflags"]


def test_thp_guest_ram():
    ev = guest_ram_evidence(SMAPS_THP, 512 << 20)
    assert ev["backing"] == "thp" and ev["anon_huge_kb"] == 294912 and ev["vmas"] == 1
    assert 0.98 < ev["thp_fraction"] < 0.99
    assert ev["madv_hugepage"]


def test_hugetlb_guest_ram():
    ev = guest_ram_evidence(SMAPS_HUGETLB, 256 << 20)
    assert ev["backing"] == "hugetlb-2M" and ev["kernel_page_size_kb"] == 2048
    assert ev["hugetlb_kb"] == 262144 and ev["paths"][0].startswith("/mnt/h/")


def test_largest_when_size_unknown():
    assert guest_ram_evidence(SMAPS_THP)["size_kb"] == 524288


def test_own_process_reads():
    ev = qemu_memory_evidence(os.getpid())
    assert ev["pid"] == os.getpid() and ev["size_kb"] > 0
