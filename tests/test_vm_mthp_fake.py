"""vm mthp and guest mthp without a guest: parsing, the host knobs a guest arm runs under (on a
fake sysfs tree), the guest's writes, and the vm layer's folio rule."""

from __future__ import annotations

import pytest

from hugelab.errors import ExperimentError, VMError
from hugelab.experiment import Arm, Experiment, GuestLayer, VmLayer
from hugelab.experiment.parse import parse_experiment
from hugelab.host.inspect import inspect_host
from hugelab.planning.arms import arm_thp_knobs, unsupported_arms
from hugelab.trial.evidence import check_vm
from hugelab.vm.common.guestapi import write_guest_mthp
from hugelab.vm.common.spec import VmSpec, guest_mthp_writes
from hugelab.vm.trial import guest_mthp
from tests.fakehost import add_mthp, make_host


def arm(**kw) -> dict:
    return {"arms": [{"name": "a", "backing": "4k", **kw}]}


def test_parse_vm_and_guest_mthp_and_round_trip():
    exp = parse_experiment(arm(vm={"mthp": "64K"}, guest={"mthp": {"2M": "never",
                                                                  "16K": "always"}}))
    a = exp.arms[0]
    assert a.vm is not None and a.vm.mthp == "64K" and a.vm.mthp_kb == 64
    assert a.guest is not None and a.guest.mthp == (("16K", "always"), ("2M", "never"))
    assert Experiment.from_dict(exp.to_dict()) == exp
    shared = parse_experiment(arm(vm={"backing": "memfd", "share": True, "mthp": "1M"}))
    assert shared.arms[0].vm is not None and shared.arms[0].vm.mthp_kb == 1024


def test_identity_of_experiments_without_the_new_keys_is_unchanged():
    exp = parse_experiment(arm(vm={"backing": "anon"}, guest={"thp": "never"}))
    d = exp.to_dict()["arms"][0]
    assert "mthp" not in d["vm"] and "mthp" not in d["guest"]


@pytest.mark.parametrize("bad, message", [
    (arm(vm={"mthp": "2M"}), "vm mthp = '2M': 2M is 'thp', not a multi-size THP size"),
    (arm(vm={"mthp": "1024K"}), "vm mthp = '1024K': '1024K' is not a multi-size THP size: a "
                                "power of two from 8K, written like 16K"),
    (arm(vm={"backing": "file", "page_size": "2M", "mthp": "64K"}),
     "vm mthp goes with guest RAM the host's THP can back"),
    (arm(vm={"backing": "memfd", "mthp": "64K"}), "needs share = true"),
    (arm(vm={}, guest={"mthp": {"64K": "sometimes"}}), "guest 64K mthp = 'sometimes'"),
    (arm(vm={}, guest={"mthp": {"3K": "always"}}), "guest mthp = '3K': '3K' is not a "
                                                   "multi-size THP size"),
    (arm(vm={}, guest={"mthp": "64K"}), "guest mthp must be a table"),
])
def test_bad_mthp_settings_name_the_key(bad, message):
    with pytest.raises(ExperimentError, match=message):
        parse_experiment(bad)


def test_factors_sweep_vm_mthp():
    exp = parse_experiment({"factors": {"vm.mthp": ["16K", "64K"]},
                            "base": {"vm": {"backing": "anon"}}})
    assert [a.vm.mthp for a in exp.arms if a.vm] == ["16K", "64K"]


def test_guest_arm_knobs(tmp_path):
    info = inspect_host(add_mthp(make_host(tmp_path / "h")))
    anon, shmem = arm_thp_knobs(Arm("g", "4k", vm=VmLayer(mthp="64K")), info)
    assert anon[64] == "madvise" and {v for k, v in anon.items() if k != 64} == {"never"}
    assert shmem[None] == "never"  # as found: anon guest RAM is not shmem
    anon, shmem = arm_thp_knobs(Arm("g", "4k", vm=VmLayer(backing="memfd", share=True,
                                                          mthp="128K")), info)
    assert anon[2048] == "inherit"  # as found
    assert shmem[None] == "advise" and shmem[128] == "advise" and shmem[2048] == "never"
    found = arm_thp_knobs(Arm("g", "4k", vm=VmLayer()), info)
    assert found[0][2048] == "inherit" and found[0][64] == "never"  # no vm mthp: as found


def test_guest_arms_with_sizes_the_host_lacks_are_skipped(tmp_path):
    info = inspect_host(add_mthp(make_host(tmp_path / "h"), anon_kb=(64, 2048)))
    exp = Experiment("e", (Arm("a", "4k", vm=VmLayer(mthp="64K")),
                           Arm("b", "4k", vm=VmLayer(mthp="16K"))))
    skipped = unsupported_arms(exp, info)
    assert "a" not in skipped
    assert skipped["b"].startswith("this kernel offers no 16 KiB multi-size THP for anonymous")
    old = inspect_host(make_host(tmp_path / "old"))
    assert "added in Linux 6.8" in unsupported_arms(exp, old)["a"]


def test_guest_mthp_defaults_for_an_mthp_backing_inside_the_guest():
    vm = VmLayer()
    assert guest_mthp(Arm("g", "4k", vm=vm)) == ()
    assert guest_mthp(Arm("g", "mthp-64K", vm=vm)) == (("64K", "madvise"), ("2M", "never"))
    given = GuestLayer(mthp=(("64K", "always"), ("16K", "always")))
    assert guest_mthp(Arm("g", "mthp-64K", vm=vm, guest=given)) == \
        (("16K", "always"), ("64K", "always"), ("2M", "never"))


class FakeTarget:
    def __init__(self, sizes: tuple[int, ...]) -> None:
        self.sizes = sizes
        self.written: dict[str, str] = {}

    def write_file(self, path: str, data: str) -> None:
        if not any(f"hugepages-{kb}kB/" in path for kb in self.sizes):
            raise VMError(f"guest cannot write {data!r} to {path}: [Errno 2] No such file")
        self.written[path] = data


def test_guest_writes_and_a_guest_kernel_without_the_size():
    spec = VmSpec(guest_mthp=(("64K", "always"), ("2M", "never")))
    assert guest_mthp_writes(spec) == [
        ("/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled", "always"),
        ("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled", "never")]
    t = FakeTarget((64, 2048))
    write_guest_mthp(t, spec)
    assert len(t.written) == 2
    with pytest.raises(VMError) as exc:  # a 6.1 guest kernel: no per-size directories
        write_guest_mthp(FakeTarget(()), spec)
    assert "Linux 6.8 or later" in (exc.value.hint or "")


def qemu(folios: dict, start: str = "0x7f0000000000", path: str = "") -> dict:
    return {"kernel_page_size_kb": 4, "rss_kb": 100000, "anon_huge_kb": 0,
            "ranges": [[start, "0x7f0010000000", path]], "folios": folios}


def test_vm_folio_rule():
    good = {"available": True, "present_kb": 1000, "folios_kb": {"4K": 100, "64K": 900}}
    c = check_vm("anon", None, qemu(good), "never", mthp="64K")
    assert c.status == "verified" and c.layer == "vm" and "90% of" in c.reason
    bad = {"available": True, "present_kb": 1000, "folios_kb": {"4K": 1000}}
    c = check_vm("anon", None, qemu(bad), "always/madvise", mthp="64K")
    assert c.status == "contradicted" and "not aligned" not in c.reason
    c = check_vm("memfd", None, qemu(bad, "0x7f0d1bfff000", "/memfd:m (deleted)"), None,
                 mthp="128K")
    assert c.status == "contradicted" and "not aligned to 128K" in c.reason
    c = check_vm("anon", None, qemu({"available": False, "reason": "needs root"}), None,
                 mthp="64K")
    assert c.status == "not applicable" and "needs root" in c.reason
