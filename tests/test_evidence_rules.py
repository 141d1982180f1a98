"""The evidence rules of every layer (hugelab.trial.evidence), with plain inputs."""

from __future__ import annotations

import pytest

from hugelab.trial.evidence import (
    CONTRADICTED,
    NOT_APPLICABLE,
    VERIFIED,
    Check,
    check_own_mapping,
    check_tree,
    check_vm,
    check_workload,
    combine,
)


def tree(anon=100_000, huge=0, hugetlb=None, samples=3, n=2, shmem_pmd=0):
    return {"anon_kb": anon, "anon_huge_kb": huge, "shmem_pmd_kb": shmem_pmd,
            "hugetlb_by_page_kb": hugetlb or {}, "samples": samples, "processes": n}


@pytest.mark.parametrize("backing,t,status", [
    ("4k", tree(), VERIFIED),
    ("4k", tree(huge=2048), CONTRADICTED),
    ("4k", tree(hugetlb={"2048": 4096}), CONTRADICTED),
    ("4k", tree(shmem_pmd=2048), CONTRADICTED),
    ("thp", tree(huge=60_000), VERIFIED),
    ("thp", tree(huge=2048), CONTRADICTED),     # 2% of the tree's anon in THP: too little
    ("thp", tree(), CONTRADICTED),
    ("thp", tree(anon=3000), NOT_APPLICABLE),   # too small to expect a huge page
    ("hugetlb-2M", tree(hugetlb={"2048": 6144}), VERIFIED),
    ("hugetlb-2M", tree(hugetlb={"1048576": 1048576}), CONTRADICTED),
    ("hugetlb-2M", tree(), CONTRADICTED),
    ("hugetlb-1G", tree(hugetlb={"1048576": 1048576}), VERIFIED),
    ("4k", tree(samples=0), NOT_APPLICABLE),    # ended before the first sample
    ("4k", {}, NOT_APPLICABLE),
])
def test_tree_rules(backing, t, status):
    c = check_tree(backing, t, "guest vm0")
    assert c.status == status and c.reason and c.layer == "workload"
    if status != NOT_APPLICABLE or t:
        assert "guest vm0" in c.reason or status == NOT_APPLICABLE


@pytest.mark.parametrize("backing,ev,status", [
    ("4k", {"KernelPageSize_kB": 4, "Rss_kB": 1000, "AnonHugePages_kB": 0}, VERIFIED),
    ("4k", {"KernelPageSize_kB": 4, "Rss_kB": 1000, "AnonHugePages_kB": 2048}, CONTRADICTED),
    ("thp", {"KernelPageSize_kB": 4, "Rss_kB": 1000, "AnonHugePages_kB": 900}, VERIFIED),
    ("thp", {"KernelPageSize_kB": 4, "Rss_kB": 1000, "AnonHugePages_kB": 100}, CONTRADICTED),
    ("hugetlb-1G", {"KernelPageSize_kB": 1048576}, VERIFIED),
    ("hugetlb-1G", {"KernelPageSize_kB": 2048}, CONTRADICTED),
])
def test_own_mapping_rules(backing, ev, status):
    assert check_own_mapping(backing, ev).status == status


def test_workload_layer_prefers_the_workloads_own_mapping_over_its_tree():
    ev = {"KernelPageSize_kB": 2048, "tree": tree()}  # the tree alone would contradict
    assert check_workload("hugetlb-2M", ev).status == VERIFIED
    assert check_workload("hugetlb-2M", {"tree": tree()}).status == CONTRADICTED


@pytest.mark.parametrize("backing,page,qemu,host_thp,status", [
    ("file", "1G", {"kernel_page_size_kb": 1048576, "hugetlb_kb": 2 << 20, "size_kb": 2 << 20},
     "always", VERIFIED),
    ("file", "1G", {"kernel_page_size_kb": 4}, "always", CONTRADICTED),
    ("anon", None, {"kernel_page_size_kb": 4, "anon_huge_kb": 0, "rss_kb": 90_000}, "never",
     VERIFIED),
    ("anon", None, {"kernel_page_size_kb": 4, "anon_huge_kb": 4096, "rss_kb": 90_000}, "never",
     CONTRADICTED),
    ("anon", None, {"kernel_page_size_kb": 4, "anon_huge_kb": 40_960, "rss_kb": 90_000},
     "always", VERIFIED),
    ("anon", None, {"kernel_page_size_kb": 4, "anon_huge_kb": 0, "rss_kb": 90_000}, "always",
     CONTRADICTED),
    ("memfd", None, {"kernel_page_size_kb": 4}, "always", NOT_APPLICABLE),
    ("anon", None, {"error": "gone"}, "always", NOT_APPLICABLE),
])
def test_vm_rules(backing, page, qemu, host_thp, status):
    c = check_vm(backing, page, qemu, host_thp)
    assert c.status == status and c.layer == "vm" and c.reason


def test_combine_contradiction_wins_and_every_reason_is_kept():
    v, n, x = Check(VERIFIED, "ok", "vm"), Check(NOT_APPLICABLE, "small"), Check(CONTRADICTED, "bad")
    assert combine([v, n]) == (VERIFIED, "vm: ok; workload: small")
    status, reason = combine([v, x])
    assert status == CONTRADICTED and reason.startswith("workload: bad")
    assert combine([n])[0] == NOT_APPLICABLE
