"""hugelab's own guests under manager = "libvirt" with backing = "file" (issue 40 item 3):
libvirt ignores the hugetlbfs mount hugelab makes, so a host without a mount libvirt knows is
refused before any guest starts (the run's and the dry run's resolve), naming the fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugelab.experiment.parse import parse_experiment
from hugelab.planning.domains import resolve_or_note
from hugelab.vm.common.libvirtd import DomainError
from hugelab.vm.domains.domainresolve import check_own_libvirt_file, resolve_experiment

MOUNTS_NONE = "proc /proc proc rw 0 0\n"
MOUNTS_2M = MOUNTS_NONE + "hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n"


def _exp(backing: str = "file", manager: str = "libvirt"):
    return parse_experiment({"workload": {"kind": "hugelab-mem"}, "arms": [
        {"name": "a", "backing": "4k", "vm": {"backing": "anon"}},
        {"name": "b", "backing": "4k", "vm": {"backing": backing, "page_size": "2M",
                                             "manager": manager}}]})


def test_libvirt_file_backing_without_a_mount_libvirt_knows_is_refused(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS_NONE)
    arm = _exp().arms[1]
    with pytest.raises(DomainError) as ei:
        check_own_libvirt_file(arm, str(mounts))
    assert "arm 'b': manager = \"libvirt\" with backing = \"file\"" in ei.value.message
    assert "hugetlbfs_mount in /etc/libvirt/qemu.conf" in ei.value.message
    assert 'backing = "memfd"' in (ei.value.hint or "") and "manager = \"qemu\"" in ei.value.hint
    mounts.write_text(MOUNTS_2M)
    check_own_libvirt_file(arm, str(mounts))  # a mount of its size: nothing to say


@pytest.mark.parametrize("backing,manager", [("memfd", "libvirt"), ("file", "qemu")])
def test_other_guests_are_not_asked_for_a_mount(tmp_path, backing, manager):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS_NONE)
    for arm in _exp(backing, manager).arms:
        check_own_libvirt_file(arm, str(mounts))


@pytest.mark.reads_host  # the real /proc/mounts: a host test in the other lane mounts hugetlbfs
def test_the_run_and_the_dry_run_check_it_first():
    if " hugetlbfs " in Path("/proc/mounts").read_text():  # read under the host lock
        pytest.skip("this host has a hugetlbfs mount")
    with pytest.raises(DomainError, match="manager = \"libvirt\" with backing = \"file\""):
        resolve_experiment(_exp())
    with pytest.raises(DomainError, match="manager = \"libvirt\" with backing = \"file\""):
        resolve_or_note(_exp())
