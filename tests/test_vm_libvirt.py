"""libvirt domain XML: pure checks per backing, schema validation, and a real libvirtd round trip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hugelab.errors import VMError
from hugelab.vm.common.backing_xml import QEMU_NS
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.own.initramfs import AGENT_PORT, ROOT_TAG
from hugelab.vm.own.libvirt_xml import domain_xml
from hugelab.vm.own.qemu_args import guest_cmdline, netdev
from tests.vmhelpers import libvirt_missing, virsh

_libvirt_missing = libvirt_missing  # the name tests/test_examples_run.py imports

KERNEL = "/boot/vmlinuz-test"
INITRD = "/var/lib/hugelab/initrd.cpio"

VARIANTS = {
    "anon": VmSpec(),
    "anon-prealloc-share": VmSpec(prealloc=True, share=True),
    "file-2M": VmSpec(backing="file", hugetlbfs_path="/dev/hugepages", hugetlb_size_kb=2048),
    "file-1G": VmSpec(mem_mib=2048, backing="file", hugetlbfs_path="/mnt/h1g",
                      hugetlb_size_kb=1048576, prealloc=True),
    "file-default-size": VmSpec(backing="file", hugetlbfs_path="/dev/hugepages"),
    "memfd": VmSpec(backing="memfd", share=True),
    "memfd-2M": VmSpec(mem_mib=256, backing="memfd", hugetlb_size_kb=2048, prealloc=True),
    "memfd-1G-pinned": VmSpec(mem_mib=2048, vcpus=2, backing="memfd", hugetlb_size_kb=1048576,
                              numa_node=0, cpu_pin=(1, 0), guest_thp="never",
                              guest_hugepages_2m=16),
    "net": VmSpec(port_forwards=((5201, 5201), (6380, 6379))),
}


def xml_of(spec: VmSpec, accel: str = "tcg", **kw) -> str:
    return domain_xml(spec, name=kw.pop("name", "vm0"), kernel=KERNEL, initrd=INITRD,
                      accel=accel, **kw)


def parse(spec: VmSpec, accel: str = "tcg", **kw) -> ET.Element:
    return ET.fromstring(xml_of(spec, accel, **kw))


def el(node: ET.Element, path: str) -> ET.Element:
    found = node.find(path)
    assert found is not None, f"no <{path}>"
    return found


def txt(node: ET.Element, path: str) -> str:
    return el(node, path).text or ""


def backing(dom: ET.Element) -> dict[str, object]:
    mb = dom.find("memoryBacking")
    if mb is None:
        return {}
    page = mb.find("hugepages/page")
    return {
        "hugepages": mb.find("hugepages") is not None,
        "page": None if page is None else (page.get("size"), page.get("unit")),
        "source": None if mb.find("source") is None else el(mb, "source").get("type"),
        "access": None if mb.find("access") is None else el(mb, "access").get("mode"),
        "allocation": (None if mb.find("allocation") is None
                       else el(mb, "allocation").get("mode")),
    }


# --- pure -------------------------------------------------------------------------------------

def test_anon_has_no_memory_backing_thp_follows_host():
    dom = parse(VARIANTS["anon"])
    assert dom.find("memoryBacking") is None
    assert dom.get("type") == "qemu"
    assert txt(dom, "name") == "hugelab-vm0"
    assert el(dom, "memory").get("unit") == "KiB" and txt(dom, "memory") == "524288"
    assert txt(dom, "currentMemory") == "524288"


def test_anon_prealloc_share():
    assert backing(parse(VARIANTS["anon-prealloc-share"])) == {
        "hugepages": False, "page": None, "source": None, "access": "shared",
        "allocation": "immediate"}


def test_file_backings():
    assert backing(parse(VARIANTS["file-2M"])) == {
        "hugepages": True, "page": ("2048", "KiB"), "source": "file", "access": None,
        "allocation": None}
    assert backing(parse(VARIANTS["file-1G"])) == {
        "hugepages": True, "page": ("1048576", "KiB"), "source": "file", "access": None,
        "allocation": "immediate"}
    b = backing(parse(VARIANTS["file-default-size"]))
    assert b["hugepages"] and b["page"] is None and b["source"] == "file"


def test_memfd_backings():
    assert backing(parse(VARIANTS["memfd"])) == {
        "hugepages": False, "page": None, "source": "memfd", "access": "shared",
        "allocation": None}
    assert backing(parse(VARIANTS["memfd-2M"])) == {
        "hugepages": True, "page": ("2048", "KiB"), "source": "memfd", "access": None,
        "allocation": "immediate"}


def test_pinning_numa_and_guest_layer():
    spec = VARIANTS["memfd-1G-pinned"]
    dom = parse(spec, accel="kvm")
    assert dom.get("type") == "kvm" and el(dom, "cpu").get("mode") == "host-passthrough"
    assert not el(dom, "cpu").findall("feature")
    assert txt(dom, "vcpu") == "2"
    pins = [(p.get("vcpu"), p.get("cpuset")) for p in dom.findall("cputune/vcpupin")]
    assert pins == [("0", "0,1"), ("1", "0,1")]
    assert el(dom, "cputune/emulatorpin").get("cpuset") == "0,1"
    mem = el(dom, "numatune/memory")
    assert mem.get("mode") == "strict" and mem.get("nodeset") == "0"
    cmdline = txt(dom, "os/cmdline")
    assert cmdline == guest_cmdline(spec)
    assert "transparent_hugepage=never" in cmdline and "hugepages=16" in cmdline


def test_no_pins_without_cpu_pin_or_numa():
    dom = parse(VARIANTS["anon"])
    assert dom.find("cputune") is None and dom.find("numatune") is None
    cpu = el(dom, "cpu")  # -cpu max under TCG, as `vm qemu-args` says
    assert cpu.get("mode") == "maximum" and not cpu.findall("feature")


def test_boot_root_agent_console_and_no_graphics():
    dom = parse(VARIANTS["anon"], serial_log="/tmp/x/serial.log")
    os_el = el(dom, "os")
    assert txt(os_el, "type") == "hvm" and el(os_el, "type").get("machine") == "pc"
    assert txt(os_el, "kernel") == KERNEL and txt(os_el, "initrd") == INITRD
    fs = el(dom, "devices/filesystem")
    assert fs.get("type") == "mount" and fs.get("accessmode") == "passthrough"
    assert el(fs, "source").get("dir") == "/" and el(fs, "target").get("dir") == ROOT_TAG
    assert fs.find("readonly") is not None
    chan = el(dom, "devices/channel")
    assert chan.get("type") == "unix" and el(chan, "source").get("mode") == "bind"
    assert el(chan, "target").get("type") == "virtio"
    assert el(chan, "target").get("name") == AGENT_PORT
    serial = el(dom, "devices/serial")
    assert serial.get("type") == "file"
    assert el(serial, "source").get("path") == "/tmp/x/serial.log"
    assert dom.find("devices/graphics") is None
    assert el(dom, "devices/video/model").get("type") == "none"
    assert el(dom, "devices/memballoon").get("model") == "none"
    assert dom.find("devices/interface") is None  # no networking without forwards
    assert dom.find(f"{{{QEMU_NS}}}commandline") is None


def test_port_forwards_pass_the_restricted_user_netdev():
    spec = VARIANTS["net"]
    dom = parse(spec)
    args = [a.get("value", "") for a in dom.findall(f"{{{QEMU_NS}}}commandline/{{{QEMU_NS}}}arg")]
    want = netdev(spec)
    assert args[:3] == want[:3] and args[3] == want[3] + ",bus=pci.0,addr=0x1f"
    assert "restrict=on" in args[1] and "hostfwd=tcp:127.0.0.1:6380-:6379" in args[1]
    assert "hugelab.net=1" in txt(dom, "os/cmdline")


def test_values_are_escaped_by_the_library():
    spec = VmSpec(guest_cmdline_extra=("x=<a&b>'\"",))
    text = xml_of(spec, name="a<b>&'c\"")
    assert "<a&b>" not in text and "&lt;a&amp;b&gt;" in text
    dom = ET.fromstring(text)
    assert txt(dom, "name") == "hugelab-a<b>&'c\""
    assert txt(dom, "os/cmdline").endswith("x=<a&b>'\"")


def test_errors():
    with pytest.raises(VMError, match="resolved"):
        xml_of(VmSpec(), accel="auto")
    with pytest.raises(VMError, match="libvirt domain"):
        xml_of(VmSpec(), name="a/b")
    with pytest.raises(VMError, match="multiple"):
        xml_of(VmSpec(mem_mib=1000, backing="memfd", hugetlb_size_kb=1048576))


# --- schema -----------------------------------------------------------------------------------

def _validator_missing() -> str | None:
    if not shutil.which("virt-xml-validate"):
        return "virt-xml-validate is not installed (apt-get install libvirt-clients)"
    if not shutil.which("xmllint"):
        return "xmllint is not installed (apt-get install libxml2-utils)"
    return None


@pytest.mark.tools
@pytest.mark.skipif(_validator_missing() is not None, reason=str(_validator_missing()))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("accel", ["tcg", "kvm"])
def test_libvirt_schema_accepts(variant, accel, tmp_path):
    f = tmp_path / "dom.xml"
    f.write_text(xml_of(VARIANTS[variant], accel))
    r = subprocess.run(["virt-xml-validate", str(f), "domain"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# --- CLI --------------------------------------------------------------------------------------

EXP = """\
[workload]
kind = "iperf3"

[[arms]]
name = "g2m"
backing = "thp"
[arms.vm]
backing = "file"
page_size = "2M"
prealloc = true
share = true
mem = "256M"
"""


@pytest.mark.slow
def test_cli_prints_the_domain(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(EXP)
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "vm", "libvirt-xml", "g2m", str(f),
                        "--accel", "tcg", "--initrd", "/srv/i.cpio", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["arm"] == "g2m" and out["domain"] == "hugelab-g2m"
    dom = ET.fromstring(out["xml"])
    assert dom.get("type") == "qemu" and txt(dom, "os/initrd") == "/srv/i.cpio"
    assert backing(dom) == {"hugepages": True, "page": ("2048", "KiB"), "source": "file",
                            "access": "shared", "allocation": "immediate"}
    args = [a.get("value", "") for a in dom.findall(f"{{{QEMU_NS}}}commandline/{{{QEMU_NS}}}arg")]
    assert args[0] == "-netdev" and ":127.0.0.1:" in args[1] and args[1].endswith("-:5201")
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "vm", "libvirt-xml", "g2m", str(f),
                        "--initrd", "/srv/i.cpio"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("<domain ")
    assert ET.fromstring(r.stdout).get("type") == "kvm"  # accel auto prints kvm


# --- real libvirtd ----------------------------------------------------------------------------

POOL_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB")
GUEST_MIB = 256
PAGES = GUEST_MIB // 2


def _qemu_pids(domain: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"qemu-system" in argv[0] and f"guest={domain},".encode() in b"\0".join(argv):
            pids.append(int(d.name))
    return pids


def _ram_backend(argv: list[str]) -> dict:
    machine = argv[argv.index("-machine") + 1]
    ram_id = next(p.split("=", 1)[1] for p in machine.split(",")
                  if p.startswith("memory-backend="))
    for i, a in enumerate(argv[:-1]):
        if a == "-object" and argv[i + 1].startswith("{"):
            obj = json.loads(argv[i + 1])
            if obj.get("id") == ram_id:
                return obj
    raise AssertionError(f"no -object {ram_id} in {argv}")


def _boot_files(workdir: Path) -> tuple[str, str]:
    """Kernel and hugelab's initramfs where libvirt's QEMU user can read them."""
    from hugelab.vm.own.initramfs import (
        InitramfsSpec,
        cached_initramfs,
        default_kernel,
        kernel_release,
        modules_dir_for,
    )

    kernel = default_kernel()
    release = kernel_release(kernel)
    built = cached_initramfs(InitramfsSpec(release, modules_dir_for(release)),
                             workdir / "cache")
    initrd = workdir / "initrd.cpio"
    shutil.copyfile(built, initrd)
    os.chmod(initrd, 0o644)
    return str(kernel), str(initrd)


def _wait_agent(serial: Path, timeout_s: float = 120) -> None:
    """The hugelab guest really boots from the domain: its agent comes up."""
    deadline = time.monotonic() + timeout_s
    while "hugelab-agent: serving" not in (serial.read_text(errors="replace")
                                           if serial.exists() else ""):
        assert time.monotonic() < deadline, serial.read_text(errors="replace")[-2000:]
        time.sleep(0.5)


@pytest.mark.vm
@pytest.mark.host
@pytest.mark.slow
def test_libvirtd_round_trip_memfd_2m():
    reason = libvirt_missing()
    if reason:
        pytest.skip(reason)
    before = (POOL_2M / "nr_hugepages").read_text().strip()
    name = f"t{uuid.uuid4().hex[:8]}"
    domain = f"hugelab-{name}"
    workdir = Path(tempfile.mkdtemp(prefix="hugelab-libvirt-"))
    os.chmod(workdir, 0o755)  # libvirt's QEMU runs as its own user
    serial = workdir / "serial.log"
    pid = None
    try:
        kernel, initrd = _boot_files(workdir)
        spec = VmSpec(mem_mib=GUEST_MIB, backing="memfd", hugetlb_size_kb=2048, prealloc=True)
        xml = domain_xml(spec, name=name, kernel=kernel, initrd=initrd, accel="tcg",
                         serial_log=str(serial))
        (POOL_2M / "nr_hugepages").write_text(str(int(before) + PAGES))
        free0 = int((POOL_2M / "free_hugepages").read_text())
        if free0 < PAGES:
            pytest.skip(f"could not reserve {PAGES} 2M pages (free: {free0})")
        (workdir / "dom.xml").write_text(xml)
        virsh("define", str(workdir / "dom.xml"))
        dumped = ET.fromstring(virsh("dumpxml", domain).stdout)
        assert dumped.get("type") == "qemu"
        assert backing(dumped) == {"hugepages": True, "page": ("2048", "KiB"),
                                   "source": "memfd", "access": None, "allocation": "immediate"}
        virsh("start", domain)
        pid = int(Path(f"/run/libvirt/qemu/{domain}.pid").read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        ram = _ram_backend(argv)
        assert ram["qom-type"] == "memory-backend-memfd", ram
        assert ram["hugetlb"] is True and ram["hugetlbsize"] == 2 << 20, ram
        assert ram["size"] == GUEST_MIB << 20 and ram.get("prealloc") is True, ram
        assert argv[argv.index("-accel") + 1] == "tcg"
        # prealloc: all guest RAM is already taken from the 2M pool
        taken = free0 - int((POOL_2M / "free_hugepages").read_text())
        assert taken >= PAGES, f"guest took {taken} 2M pages, expected {PAGES}"
        smaps = Path(f"/proc/{pid}/smaps").read_text()
        assert f"Size:             {GUEST_MIB * 1024} kB\nKernelPageSize:     2048 kB" in smaps
        _wait_agent(serial)
        assert virsh("domstate", domain).stdout.strip() == "running"
    finally:
        virsh("destroy", domain, check=False)
        virsh("undefine", domain, check=False)
        (POOL_2M / "nr_hugepages").write_text(before)
        shutil.rmtree(workdir, ignore_errors=True)
    assert _qemu_pids(domain) == []
    if pid is not None:
        assert not Path(f"/proc/{pid}").exists()
    assert domain not in virsh("list", "--all", "--name").stdout.split()
    assert (POOL_2M / "nr_hugepages").read_text().strip() == before
    assert (POOL_2M / "surplus_hugepages").read_text().strip() == "0"


@pytest.mark.vm
@pytest.mark.host
@pytest.mark.slow
def test_libvirtd_starts_a_pinned_guest_with_port_forwards():
    """The pass-through NIC, NUMA binding and pins start under libvirtd (no huge pages needed)."""
    reason = libvirt_missing()
    if reason:
        pytest.skip(reason)
    from hugelab.workloads.serverside import free_port

    name = f"n{uuid.uuid4().hex[:8]}"
    domain = f"hugelab-{name}"
    workdir = Path(tempfile.mkdtemp(prefix="hugelab-libvirt-"))
    os.chmod(workdir, 0o755)
    serial = workdir / "serial.log"
    port = free_port()
    cpus = tuple(sorted(os.sched_getaffinity(0)))[:2]
    try:
        kernel, initrd = _boot_files(workdir)
        spec = VmSpec(mem_mib=GUEST_MIB, backing="memfd", share=True, numa_node=0,
                      cpu_pin=cpus, port_forwards=((port, 5201),))
        (workdir / "dom.xml").write_text(domain_xml(spec, name=name, kernel=kernel,
                                                    initrd=initrd, accel="tcg",
                                                    serial_log=str(serial)))
        virsh("define", str(workdir / "dom.xml"))
        virsh("start", domain)
        pid = int(Path(f"/run/libvirt/qemu/{domain}.pid").read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert argv[argv.index("-netdev") + 1] == (
            f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:5201")
        ram = _ram_backend(argv)
        assert ram["qom-type"] == "memory-backend-memfd" and ram["share"] is True, ram
        assert ram["host-nodes"] == [0] and ram["policy"] == "bind", ram
        status = Path(f"/proc/{pid}/status").read_text()
        allowed = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        assert allowed.split()[1] in (",".join(map(str, cpus)), f"{cpus[0]}-{cpus[-1]}")
        _wait_agent(serial)
    finally:
        virsh("destroy", domain, check=False)
        virsh("undefine", domain, check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    assert _qemu_pids(domain) == []
    assert domain not in virsh("list", "--all", "--name").stdout.split()
