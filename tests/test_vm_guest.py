"""Real QEMU guests under TCG: boot, agent, evidence, hugetlb backings, failures, cleanup.

Every test checks that no QEMU child of this process is left and that host hugetlb pools are
back at the value they had when the test started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hugelab.errors import CommandError, ToolMissingError, VMError
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.own.accel import probe_reason
from hugelab.vm.own.guest import Guest, probe_accel
from hugelab.vm.own.initramfs import default_kernel
from hugelab.vm.own.qemurecords import kill_leftover_qemus
from tests.hostguard import in_background_lane, qemu_children

pytestmark = [pytest.mark.vm, pytest.mark.slow]

HUGEPAGES = Path("/sys/kernel/mm/hugepages")
POOL_2M = HUGEPAGES / "hugepages-2048kB/nr_hugepages"
KERNEL = str(default_kernel()) if sorted(Path("/boot").glob("vmlinuz-*")) else None

if KERNEL is None or not Path("/usr/bin/qemu-system-x86_64").exists():
    pytest.skip("needs qemu-system-x86_64 and a kernel in /boot", allow_module_level=True)


def spec(**kw) -> VmSpec:
    kw.setdefault("mem_mib", 256)
    return VmSpec(kernel=KERNEL, accel="tcg", **kw)




def gone(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) in "ZX"
    except OSError:
        return True


def pools() -> dict[str, str]:
    return {p.name: (p / "nr_hugepages").read_text().strip() for p in HUGEPAGES.iterdir()}


def meminfo(text: str) -> dict[str, int]:
    return {k: int(v.split()[0]) for k, v in
            (line.split(":", 1) for line in text.splitlines() if ":" in line)}


def host_meminfo() -> dict[str, int]:
    return meminfo(Path("/proc/meminfo").read_text())


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUGELAB_STATE_DIR", str(d))
        yield d


_SHARED: set[int] = set()


@pytest.fixture(scope="class")
def shared_guest(state_dir):
    """One read-mostly anon guest for the tests (of one class) that only run commands."""
    with Guest(spec(mem_mib=384), name="shared") as g:
        _SHARED.add(g.qemu_pid)
        yield g
    _SHARED.discard(g.qemu_pid)
    assert not list(state_dir.glob("qemu-*.json"))


@pytest.fixture(autouse=True)
def no_leftovers(state_dir):
    beside = in_background_lane()  # the host's pools are the machine lane's
    before = None if beside else pools()
    yield
    assert set(qemu_children()) <= _SHARED, "a QEMU was left running"
    assert beside or pools() == before, "host hugetlb pools not restored"


# the background lane (conftest) takes the guests that need nothing of the host's pools or THP
# mode and are judged from inside or by QEMU's exit alone
BESIDE = pytest.mark.beside


@pytest.fixture
def hugetlbfs_2m(tmp_path):
    """Reserve `n` extra 2M pages and mount a 2M hugetlbfs; always undone."""
    # conftest's host lock is held for the whole test (it is marked vm)
    start = POOL_2M.read_text().strip()
    mnt = tmp_path / "huge2M"
    mnt.mkdir()
    mounted = False

    def setup(extra_pages: int) -> Path:
        nonlocal mounted
        POOL_2M.write_text(str(int(start) + extra_pages))
        if int(POOL_2M.read_text()) < int(start) + extra_pages:
            pytest.skip("host cannot reserve enough 2M pages")
        subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "none", str(mnt)],
                       check=True)
        mounted = True
        return mnt

    try:
        yield setup
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False)
        POOL_2M.write_text(start)


# --- one shared guest -------------------------------------------------------------------------


class TestSharedGuest:
    def test_exec_meminfo_structured(self, shared_guest):
        t = shared_guest.target
        assert t.name == "shared"
        r = t.exec(["/bin/cat", "/proc/meminfo"])
        assert r.returncode == 0 and r.argv == ["/bin/cat", "/proc/meminfo"]
        mi = meminfo(r.stdout)
        assert 256 * 1024 < mi["MemTotal"] <= 384 * 1024  # the guest's RAM, not the host's
        assert r.wall_s > 0 and {"minflt", "majflt", "utime_s", "stime_s", "maxrss_kb"} <= set(r.rusage)
        r = t.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
        assert shared_guest.boot_s and shared_guest.accel == "tcg"

    def test_the_tcg_cpu_is_qemus_max_with_1g_pages(self, shared_guest):
        # the guest's own CPUID (hugelab.vm.common.cpumodel): `max`, pdpe1gb (guest 1 GiB
        # pools) and the fast strings among it (without them guest THP work ran 2-6x slower)
        flags = next(line.split(":", 1)[1].split() for line in
                     shared_guest.target.read_file("/proc/cpuinfo").splitlines()
                     if line.startswith("flags"))
        assert {"pdpe1gb", "pse", "avx2", "erms"} <= set(flags), flags

    def test_files_sysfs_and_errors(self, shared_guest):
        t = shared_guest.target
        assert "thp_fault_alloc" in t.read_file("/proc/vmstat")
        thp = "/sys/kernel/mm/transparent_hugepage/enabled"
        old = t.read_file(thp).split("[")[1].split("]")[0]
        try:
            t.write_file(thp, "always")
            assert "[always]" in t.read_file(thp)
        finally:
            t.write_file(thp, old)
        with pytest.raises(ToolMissingError):
            t.exec(["no-such-tool-hugelab"])
        with pytest.raises(CommandError):
            t.exec(["/bin/sleep", "30"], timeout=0.5)
        with pytest.raises(VMError):
            t.read_file("/no/such/file")
        assert t.exec(["/bin/true"]).returncode == 0  # channel still in step after errors

    def test_anon_evidence_and_qmp(self, shared_guest):
        shared_guest.target.exec(["/bin/dd", "if=/dev/zero", "of=/dev/shm/x", "bs=1M", "count=64"])
        ev = shared_guest.evidence()
        assert ev["size_kb"] == 384 * 1024 and ev["kernel_page_size_kb"] == 4
        assert ev["backing"] in ("thp", "4k") and ev["madv_hugepage"]
        host_thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        if "[never]" in host_thp:
            assert ev["anon_huge_kb"] == 0
        (mem,) = ev["memdev"]
        assert mem["id"] == "mem0" and mem["size"] == 384 << 20 and mem["prealloc"] is False
        assert shared_guest.qmp.cmd("query-status")["status"] == "running"


# --- hugetlb backings --------------------------------------------------------------------------


def test_hugetlbfs_file_2m_prealloc(hugetlbfs_2m, state_dir):
    mnt = hugetlbfs_2m(128 + 8)
    free0 = host_meminfo()["HugePages_Free"]
    with Guest(spec(backing="file", hugetlbfs_path=str(mnt), hugetlb_size_kb=2048,
                    prealloc=True)) as g:
        ev = g.evidence()
        assert ev["kernel_page_size_kb"] == 2048 and ev["backing"] == "hugetlb-2M"
        assert ev["hugetlb_kb"] == 256 * 1024 and ev["paths"][0].startswith(str(mnt))
        assert free0 - host_meminfo()["HugePages_Free"] == 128
        assert ev["memdev"][0]["prealloc"] is True
        assert g.target.exec(["/bin/true"]).returncode == 0
        assert list(state_dir.glob("qemu-*.json"))
    assert host_meminfo()["HugePages_Free"] == free0
    assert not list(state_dir.glob("qemu-*.json"))


def test_memfd_2m_guest_layer_and_ctrl_c(hugetlbfs_2m):
    hugetlbfs_2m(128 + 8)
    avail0 = host_meminfo()["HugePages_Free"] - host_meminfo()["HugePages_Rsvd"]
    pid = None
    with pytest.raises(KeyboardInterrupt):  # noqa: PT012 - Ctrl-C inside the with block
        with Guest(spec(backing="memfd", hugetlb_size_kb=2048, share=True, guest_thp="always",
                        guest_hugepages_2m=16)) as g:
            pid = g.qemu_pid
            ev = g.evidence()
            assert ev["kernel_page_size_kb"] == 2048 and "memfd" in ev["paths"][0]
            hm = host_meminfo()
            assert avail0 - (hm["HugePages_Free"] - hm["HugePages_Rsvd"]) == 128
            gm = meminfo(g.target.read_file("/proc/meminfo"))
            assert gm["HugePages_Total"] == 16
            assert "[always]" in g.target.read_file("/sys/kernel/mm/transparent_hugepage/enabled")
            raise KeyboardInterrupt
    assert pid is not None and not Path(f"/proc/{pid}").exists()
    hm = host_meminfo()
    assert hm["HugePages_Free"] - hm["HugePages_Rsvd"] == avail0


@BESIDE
def test_guest_1g_pool():
    with Guest(spec(mem_mib=2304, guest_hugepages_1g=1)) as g:
        pool = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
        assert int(g.target.read_file(pool)) == 1
        assert meminfo(g.target.read_file("/proc/meminfo"))["Hugetlb"] >= 1024 * 1024


# --- failures ----------------------------------------------------------------------------------


def test_bad_kernel_path(tmp_path, state_dir):
    for kernel in ("/boot/no-such-vmlinuz", str(tmp_path)):
        with pytest.raises(VMError) as ei:
            Guest(VmSpec(kernel=kernel, accel="tcg")).start()
        assert ei.value.hint
    junk = tmp_path / "vmlinuz-junk"
    junk.write_bytes(b"\0" * 8192)
    with pytest.raises(VMError) as ei:
        Guest(VmSpec(kernel=str(junk), accel="tcg")).start()
    assert "bzImage" in ei.value.message
    assert qemu_children() == [] and not list(state_dir.glob("qemu-*.json"))


def test_backing_allocation_failure(state_dir):
    """A hugetlb memfd of 1G pages with prealloc on a host whose 1G pool is empty."""
    free_1g = HUGEPAGES / "hugepages-1048576kB/free_hugepages"
    if free_1g.exists() and int(free_1g.read_text()) > 0:
        pytest.skip("the host has free 1G pages; the allocation would succeed")
    t0 = time.monotonic()
    g = Guest(spec(mem_mib=1024, backing="memfd", hugetlb_size_kb=1048576, prealloc=True))
    try:
        with pytest.raises(VMError) as ei:
            g.start()
    finally:
        g.close()
    assert "unable to map backing store" in ei.value.message
    assert "pool" in (ei.value.hint or "")
    assert time.monotonic() - t0 < 30
    assert qemu_children() == [] and not list(state_dir.glob("qemu-*.json"))


def test_not_a_hugetlbfs(tmp_path):
    with pytest.raises(VMError) as ei:
        Guest(spec(backing="file", hugetlbfs_path=str(tmp_path))).start()
    assert "not a hugetlbfs" in ei.value.message


@BESIDE
def test_boot_timeout_leaves_nothing(state_dir):
    with pytest.raises(VMError) as ei:
        Guest(spec(), boot_timeout=1.0).start()
    assert "failed to boot" in ei.value.message and ei.value.hint
    assert qemu_children() == [] and not list(state_dir.glob("qemu-*.json"))


def test_sigkilled_hugelab_then_recover(state_dir, tmp_path):
    code = ("import time; from hugelab.vm.own.guest import Guest; from hugelab.vm.own.qemu_args import "
            f"VmSpec; Guest(VmSpec(mem_mib=256, kernel={KERNEL!r}, accel='tcg'),"
            "boot_timeout=300).start(); time.sleep(300)")
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(state_dir.glob("qemu-*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        (rec,) = list(state_dir.glob("qemu-*.json"))
        qpid = int(rec.stem.split("-")[1])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert Path(f"/proc/{qpid}").exists()  # orphaned QEMU still running
    assert kill_leftover_qemus(state_dir) == [qpid]
    assert gone(qpid)
    assert not list(state_dir.glob("qemu-*.json"))


@BESIDE
def test_probe_accel_falls_back_and_caches(tmp_path, monkeypatch):
    from hugelab.vm.own import accel as accel_mod

    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    accel_mod.clear_cache()  # a real probe: no answer in this process nor on disk
    t0 = time.monotonic()
    accel = probe_accel(KERNEL)
    assert accel in ("kvm", "tcg") and probe_reason(KERNEL)
    assert "cached" not in (probe_reason(KERNEL) or "")
    assert time.monotonic() - t0 < 120

    def no_probe(*_a: object, **_k: object) -> None:
        raise AssertionError("a cached answer must not boot a probe")

    with monkeypatch.context() as m:
        m.setattr(accel_mod, "_probe", no_probe)
        assert probe_accel(KERNEL) == accel  # from this process's cache
    accel_mod.clear_cache()  # a new process: the answer comes from disk, said as cached
    assert probe_accel(KERNEL) == accel and "cached" in (probe_reason(KERNEL) or "")
    (kept,) = (tmp_path / "cache" / "accel").glob("*.json")
    assert kept.stat().st_mode & 0o777 == 0o600


@BESIDE
def test_a_guest_silent_on_its_console_fails_at_the_silence_limit_not_the_boot_timeout(
        tmp_path):
    """The KVM probe's early answer: a QEMU that runs but whose guest prints nothing (here a
    real QEMU started with its CPUs stopped, `-S`, as a kernel this KVM cannot run spins) is a
    failed boot once the console has been silent for console_silence_s, long before the boot
    timeout, and leaves no QEMU behind."""
    paused = tmp_path / "qemu-paused"
    paused.write_text('#!/bin/sh\nexec /usr/bin/qemu-system-x86_64 -S "$@"\n')
    paused.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(VMError, match="printed nothing on its console within 2s"):
        Guest(spec(), boot_timeout=120, qemu=str(paused), console_silence_s=2.0).start()
    assert time.monotonic() - t0 < 60  # not the 120 s timeout
    assert not qemu_children()
    # and a guest that speaks passes the same limit (our init prints first thing)
    with Guest(spec(), console_silence_s=30.0) as g:
        assert "hugelab-init" in g.serial_log()
