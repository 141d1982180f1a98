"""hugelab.units: one page-size label and one way to say an amount (binary units, KiB)."""

from __future__ import annotations

import pytest

from hugelab.units import amount, exact, page_kb, page_label


@pytest.mark.parametrize("kb,label", [(4, "4K"), (8, "8K"), (64, "64K"), (1024, "1M"),
                                      (2048, "2M"), (524288, "512M"), (1048576, "1G"),
                                      (16777216, "16G"), (1536, "1536K")])
def test_page_labels_round_trip(kb, label):
    assert page_label(kb) == label and page_kb(label) == kb


@pytest.mark.parametrize("bad", ["", "2", "2MB", "2 M", "M", "1T", "-4K"])
def test_what_is_no_label(bad):
    with pytest.raises(ValueError, match="page size label"):
        page_kb(bad)


def test_amounts_are_in_binary_units():
    assert [amount(k) for k in (0, 340, 1536, 6144, 1239040, 3 << 30)] == \
        ["0 KiB", "340 KiB", "1.5 MiB", "6.0 MiB", "1.2 GiB", "3.0 TiB"]
    assert amount(-2048) == "-2.0 MiB"
    assert [exact(k) for k in (4, 64, 2048, 1048576, 1536)] == \
        ["4 KiB", "64 KiB", "2 MiB", "1 GiB", "1536 KiB"]


def test_hugelab_labels_as_the_kernel_and_qemu_name_sizes():
    from hugelab.vm.common.spec import VmSpec, guest_mthp_writes

    spec = VmSpec(mem_mib=512, guest_mthp=(("64K", "always"), ("2M", "never")))
    assert guest_mthp_writes(spec) == [
        ("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled", "always"),
        ("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled", "never")]
