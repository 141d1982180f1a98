"""hugelab.kernel: the kernel's words for huge pages, read from the texts the kernel writes."""

from __future__ import annotations

from hugelab import kernel
from hugelab.units import page_kb

MOUNTS = """\
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
none /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/huge1g hugetlbfs rw,relatime,pagesize=1024M 0 0
hugetlbfs /mnt/plain hugetlbfs rw,relatime 0 0
"""


def test_a_switchs_chosen_value_and_its_choices():
    assert kernel.selected("always [madvise] never\n") == "madvise"
    assert kernel.selected("2\n") == "2"
    assert kernel.choices("always [madvise] never") == list(kernel.THP_ENABLED)


def test_hugetlbfs_mounts_and_their_page_sizes():
    got = kernel.hugetlbfs_mounts(MOUNTS)
    assert [m.target for m in got] == ["/dev/hugepages", "/mnt/huge1g", "/mnt/plain"]
    assert [page_kb(m.pagesize) for m in got if m.pagesize] == [2048, 1048576]
    assert got[-1].pagesize is None
