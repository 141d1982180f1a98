"""The multi-size THP size menus follow the kernel: `inspect`, the backings a run can have (native
mthp-<size>, guest vm mthp), the knobs an arm sets and the report's page-size axis list exactly
the kernel's hugepages-<N>kB directories, each for the memory its knobs say (`enabled`:
anonymous memory; `shmem_enabled`: shmem). On fake kernels through the sysfs-root seam, then on
this machine's kernel (read only)."""

from __future__ import annotations

import re

import pytest

from hugelab.cli.host import mthp_line
from hugelab.experiment import Arm, Experiment, VmLayer
from hugelab.experiment.parse import parse_experiment
from hugelab.host.inspect import inspect_host
from hugelab.host.paths import REAL, THP_DIR
from hugelab.planning.arms import arm_thp_knobs, unsupported_arms
from hugelab.planning.dryrun import host_mthp
from hugelab.report import pagesizes
from hugelab.units import page_label
from tests.fakehost import add_mthp, make_host


def label(kb: int) -> str:
    return f"{kb // 1024}M" if kb % 1024 == 0 else f"{kb}K"


def native(kb: int) -> Arm:
    return Arm(f"n{kb}", f"mthp-{label(kb)}")


def guest(kb: int, backing: str) -> Arm:
    vm = VmLayer(backing=backing, share=backing == "memfd", mthp=label(kb))
    return Arm(f"{backing}{kb}", "4k", vm=vm)


@pytest.fixture
def odd(tmp_path):
    """A kernel unlike this one: anonymous 32K, 128K, 4M (PMD) and shmem-only 8K and 16K."""
    return inspect_host(add_mthp(make_host(tmp_path / "odd", sizes=(4096,)),
                                 anon_kb=(32, 128, 4096), shmem_only_kb=(8, 16)))


def test_inspect_lists_the_kernels_directories_and_what_each_is_for(odd):
    sizes = {s["size"]: s for s in odd["mthp"]["sizes"]}
    assert list(sizes) == ["8K", "16K", "32K", "128K", "4M"]
    assert [k for k, s in sizes.items() if s["enabled"]] == ["32K", "128K", "4M"]
    assert all(s["shmem_enabled"] for s in sizes.values())
    line = mthp_line(odd)
    assert line.split(";")[0].endswith("anon: 32K never, 128K never, 4M never")
    assert "(per size: 8K never, 16K never, 32K never, 128K never, 4M never)" in line
    assert [(k["knob"], k["size"]) for k in host_mthp(odd)][:3] == \
        [("enabled", "32K"), ("enabled", "128K"), ("enabled", "4M")]


def test_native_backings_are_the_anonymous_sizes_only(odd):
    exp = parse_experiment({"arms": [{"name": f"n{kb}", "backing": f"mthp-{label(kb)}"}
                                     for kb in (8, 16, 32, 64, 128)]})
    skipped = unsupported_arms(exp, odd)
    assert sorted(skipped) == ["n16", "n64", "n8"]
    assert skipped["n8"] == ("this kernel offers no 8 KiB multi-size THP for anonymous memory "
                             "(it offers 32 KiB, 128 KiB, 4096 KiB)")


def test_guest_backings_follow_each_knob(odd):
    arms = (guest(8, "memfd"), guest(8, "anon"), guest(32, "anon"), guest(32, "memfd"),
            guest(64, "memfd"))
    skipped = unsupported_arms(Experiment("e", arms), odd)
    assert sorted(skipped) == ["anon8", "memfd64"]  # 8K is a shmem size, not an anon one
    assert "no 8 KiB multi-size THP for anonymous memory (it offers 32 KiB" in skipped["anon8"]
    assert skipped["memfd64"] == ("this kernel offers no 64 KiB multi-size THP for shmem "
                                  "(memfd) (it offers 8 KiB, 16 KiB, 32 KiB, 128 KiB, 4096 KiB)")


def test_the_knobs_an_arm_sets_are_the_kernels(odd):
    anon, shmem = arm_thp_knobs(native(128), odd)
    assert anon == {32: "never", 128: "madvise", 4096: "never"}
    assert set(shmem) == {None, 8, 16, 32, 128, 4096} and set(shmem.values()) == {"never"}
    _, shmem = arm_thp_knobs(guest(8, "memfd"), odd)
    assert shmem == {None: "advise", 8: "advise", 16: "never", 32: "never", 128: "never",
                     4096: "never"}


def test_the_report_places_any_kernel_size_on_its_page_axis():
    for kb in (8, 16, 32, 128, 256, 512, 1024):
        assert pagesizes.arm_page({"backing": f"mthp-{label(kb)}"}) == (kb, "4 KiB / mTHP")
        assert pagesizes.arm_page({"backing": "4k", "vm": {"backing": "memfd",
                                                       "mthp": label(kb)}}) == \
            (kb, "4 KiB / mTHP")
        assert page_label(kb) == label(kb)  # the figure's axis labels


# --- this machine's kernel (read only) -------------------------------------------------------

def real_dirs() -> dict[int, set[str]]:
    """hugepages-<N>kB directory -> the knobs in it, as /sys has them."""
    out = {}
    for d in REAL.p(THP_DIR).glob("hugepages-*kB"):
        m = re.fullmatch(r"hugepages-(\d+)kB", d.name)
        if m:
            out[int(m.group(1))] = {k for k in ("enabled", "shmem_enabled") if (d / k).exists()}
    return out


real = pytest.mark.skipif(not real_dirs(), reason="this kernel has no multi-size THP")


@real
def test_real_kernel_inspect_matches_its_directories():
    dirs = real_dirs()
    sizes = inspect_host()["mthp"]["sizes"]
    assert [s["size_kb"] for s in sizes] == sorted(dirs)
    for s in sizes:
        assert (s["enabled"] is not None) == ("enabled" in dirs[s["size_kb"]])
        assert (s["shmem_enabled"] is not None) == ("shmem_enabled" in dirs[s["size_kb"]])
    assert REAL.mthp_anon_sizes_kb() == sorted(k for k, v in dirs.items() if "enabled" in v)


@real
def test_real_kernel_backings_follow_its_knobs():
    dirs = real_dirs()
    host = inspect_host()
    pmd = 2048
    anon = [kb for kb, knobs in dirs.items() if "enabled" in knobs and kb != pmd]
    shmem_only = [kb for kb, knobs in dirs.items() if knobs == {"shmem_enabled"}]
    arms = tuple(native(kb) for kb in anon + shmem_only)
    skipped = unsupported_arms(Experiment("e", arms), host)
    assert sorted(skipped) == sorted(f"n{kb}" for kb in shmem_only)
    assert all("for anonymous memory" in why for why in skipped.values())
    if host["thp"].get("shmem_enabled"):
        memfd = tuple(guest(kb, "memfd") for kb in shmem_only)
        assert unsupported_arms(Experiment("g", memfd), host) == {}
    anon_knobs, _ = arm_thp_knobs(native(anon[0]), host) if anon else ({}, {})
    assert sorted(anon_knobs) == sorted(k for k, v in dirs.items() if "enabled" in v)
