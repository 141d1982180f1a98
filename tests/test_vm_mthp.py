"""Multi-size THP around and inside guests, for real (QEMU under TCG, the host's 6.8+ kernel in
the guest): vm mthp puts guest RAM in host mTHP folios (anon and memfd), with the host knobs
set for the arm's trials only; guest mthp is written into the guest's own sysfs."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hugelab.experiment import Arm, Experiment, GuestLayer, VmLayer
from hugelab.host.paths import REAL, parse_selected
from hugelab.vm.own.initramfs import default_kernel, kernel_release
from hugelab.workloads.base import Target, WorkloadResult
from hugelab.workloads.hugelab_mem import HugelabMem
from tests.guestruns import guest_env, run_on_host

pytestmark = [pytest.mark.vm, pytest.mark.host, pytest.mark.slow]

if not REAL.mthp_anon_sizes_kb():
    pytest.skip("this kernel has no multi-size THP", allow_module_level=True)

GUEST_THP = "/sys/kernel/mm/transparent_hugepage"


class Spying(HugelabMem):
    """hugelab-mem that also notes, as each trial runs, the host's knobs (and, given paths,
    files read inside the guest through the guest's target)."""

    seen: list[dict[str, Any]]
    guest_files: tuple[str, ...] = ()

    def run(self, target: Target, backing: str) -> WorkloadResult:
        host = {kb: parse_selected(REAL.mthp_enabled(kb).read_text()) for kb in (64, 2048)}
        host |= {f"shmem-{kb}": parse_selected(REAL.mthp_shmem_enabled(kb).read_text())
                 for kb in (128, 2048)}
        host["shmem"] = parse_selected(REAL.shmem_enabled.read_text())
        guest = {p: target.read_file(p) for p in self.guest_files}  # type: ignore[attr-defined]
        self.seen.append({"backing": backing, "host": host, "guest": guest})
        return super().run(target, backing)


@pytest.fixture
def env(tmp_path, monkeypatch):
    with guest_env(tmp_path, monkeypatch, own_mem_binary=True) as e:
        yield e


def run(tmp, store, arms, wl):
    exp = Experiment("vm-mthp", arms, {"kind": "hugelab-mem"}, seed=5, blocks=1,
                     baseline=arms[0].name)
    out = run_on_host(tmp, store, exp, wl)
    assert out.executed == len(arms) and not out.skipped
    return {t["arm"]: t for t in store.trials(out.run_id)}


def test_vm_mthp_sets_host_knobs_and_guest_ram_gets_those_folios(env):
    tmp, store = env
    before = {kb: parse_selected(REAL.mthp_enabled(kb).read_text()) for kb in (64, 2048)}
    arms = (Arm("vm-anon-64K", "4k", vm=VmLayer(backing="anon", mthp="64K", mem_mib=256,
                                                accel="tcg")),
            Arm("vm-memfd-128K", "thp", vm=VmLayer(backing="memfd", mthp="128K", share=True,
                                                   mem_mib=256, accel="tcg")))
    wl = Spying(workload="populate", size_bytes=64 << 20, duration_s=0.2)
    wl.seen = []
    trials = run(tmp, store, arms, wl)
    t = trials["vm-anon-64K"]
    assert t["status"] == "ok", (t["error"], t["flag"])
    assert t["evidence"]["checks"]["vm"]["status"] == "verified", t["evidence"]["reason"]
    seen = {s["backing"]: s["host"] for s in wl.seen}

    # anon guest RAM under host 64K: that size madvise, 2M never, while the trial ran
    assert seen["4k"][64] == "madvise" and seen["4k"][2048] == "never"
    q = trials["vm-anon-64K"]["evidence"]["qemu"]
    assert q["folios"]["available"] and q["folios"]["share"].get("64K", 0) >= 0.5, q["folios"]
    assert "64K folios" in trials["vm-anon-64K"]["evidence"]["checks"]["vm"]["reason"]
    assert trials["vm-anon-64K"]["provenance"]["host_backing"] == "mthp-64K"

    # memfd (shmem) guest RAM under host 128K: shmem_enabled advise, per-size 128K advise,
    # shmem 2M never; the anonymous knobs as found
    assert seen["thp"]["shmem"] == "advise" and seen["thp"]["shmem-128"] == "advise"
    assert seen["thp"]["shmem-2048"] == "never" and seen["thp"][64] == before[64]
    # QEMU 7.2 maps non-hugetlb memfd RAM 4 KiB-aligned (file_ram_alloc aligns to the fd's
    # page size), and a shared file mapping gets a large folio only where the virtual address
    # and the file offset align to its size: such guest RAM stays in 4 KiB pages, flagged
    # with that reason; an aligned mapping (luck, or a QEMU that aligns it) gets 128K folios
    t = trials["vm-memfd-128K"]
    q = t["evidence"]["qemu"]
    if int(q["ranges"][0][0], 16) % (128 << 10):
        assert t["status"] == "flagged" and "not aligned to 128K" in t["flag"], t["flag"]
    else:
        assert t["status"] == "ok", t["flag"]
        assert q["folios"]["share"].get("128K", 0) >= 0.5, q["folios"]

    # and after the run, every knob as it was (the fixture checks the whole host too)
    assert {kb: parse_selected(REAL.mthp_enabled(kb).read_text())
            for kb in (64, 2048)} == before


def test_guest_mthp_written_inside_the_guest(env):
    """guest mthp lands in the guest's sysfs and reads back through the guest's target; a guest
    kernel before 6.8 (this machine's /boot holds 6.1) has no per-size knobs: the guest's boot
    fails with that reason instead of running the arm without them."""
    tmp, store = env
    kernel = default_kernel()
    release = tuple(int(x) for x in re.findall(r"\d+", kernel_release(kernel))[:2])
    arms = (Arm("guest-32K", "mthp-64K", vm=VmLayer(mem_mib=256, accel="tcg"),
                guest=GuestLayer(mthp=(("32K", "always"),))),)
    wl = Spying(workload="populate", size_bytes=16 << 20, duration_s=0.2)
    wl.seen = []
    wl.guest_files = tuple(f"{GUEST_THP}/hugepages-{kb}kB/enabled" for kb in (32, 64, 2048))
    t = run(tmp, store, arms, wl)["guest-32K"]
    if release >= (6, 8):
        assert t["status"] == "ok", (t["error"], t["flag"])
        got = {p.split("/")[-2]: parse_selected(v) for p, v in wl.seen[0]["guest"].items()}
        assert got == {"hugepages-32kB": "always", "hugepages-64kB": "madvise",
                       "hugepages-2048kB": "never"}
        assert t["provenance"]["guest_mthp"] == {"32K": "always", "64K": "madvise",
                                                 "2M": "never"}
    else:
        assert t["status"] == "failed" and not wl.seen
        assert "hugepages-32kB/enabled" in t["error"], t["error"]
