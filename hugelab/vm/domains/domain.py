"""A user's libvirt domain -> the transient copy an arm runs (pure: XML text in, XML text out).

The copy gets a new name and no UUID (libvirt makes one), the arm's `<memoryBacking>` (the same
element `common.backing_xml.memory_backing` writes for hugelab's own guests), the arm's memory and
vCPUs when it sets them, and its disks redirected to qcow2 overlays hugelab creates (and deletes)
over the user's images, so the user's disks are never written; read-only disks and CD-ROMs are
kept read-only as they are. MAC addresses are dropped (libvirt assigns fresh ones) so the copy
never collides with the original on a network, and a guest-agent channel is added when the
domain has none. The persistent definition is never touched: `hugelab vm diff` prints the
difference for a user who wants to make the change by hand.
"""

from __future__ import annotations

import copy
import difflib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

from hugelab.errors import VMError
from hugelab.vm.common.backing_xml import QEMU_NS, memory_backing
from hugelab.vm.common.spec import VmSpec

AGENT_CHANNEL = "org.qemu.guest_agent.0"
# a domain's pinned SSH host key, in its <metadata>: <hugelab:ssh host-key="ssh-ed25519 ..."/>
# (hugelab's demo domains carry their image's; the SSH way in then trusts only that key)
HUGELAB_NS = "urn:hugelab:domain:1"
MEMORY_UNITS_KIB = {"b": 1 / 1024, "bytes": 1 / 1024, "kib": 1, "k": 1, "kb": 1000 / 1024,
                    "mib": 1024, "m": 1024, "mb": 1e6 / 1024, "gib": 1024 ** 2, "g": 1024 ** 2,
                    "gb": 1e9 / 1024, "tib": 1024 ** 3, "t": 1024 ** 3, "tb": 1e12 / 1024}


@dataclass(frozen=True)
class Disk:
    """A disk of the user's domain: its image, format, and whether it is read-only."""

    target: str  # vda, sdb...
    source: str
    format: str
    readonly: bool
    device: str  # disk | cdrom | floppy


def parse(xml: str) -> ET.Element:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise VMError(f"the domain's XML does not parse: {exc}") from exc
    if root.tag != "domain":
        raise VMError("not a libvirt domain XML (no <domain> root)")
    return root


def host_key(root: ET.Element) -> str | None:
    """The SSH host key pinned in the domain's metadata (see HUGELAB_NS), or None."""
    el = root.find(f"metadata/{{{HUGELAB_NS}}}ssh")
    key = el.get("host-key") if el is not None else None
    return key.strip() if key and key.strip() else None


def kernel_ssh_key(root: ET.Element, arg: str) -> str | None:
    """The public key ("TYPE BASE64") the domain's direct-boot kernel command line names in
    `arg`=TYPE,BASE64 (hugelab's demo domains let that key in over SSH), or None."""
    for word in (root.findtext("os/cmdline") or "").split():
        name, _, value = word.partition("=")
        if name == arg and "," in value:
            return value.replace(",", " ", 1)
    return None


def pin_host_key(root: ET.Element, key: str) -> None:
    """Pin `key` (an OpenSSH public key line) in the domain's metadata, replacing one pinned."""
    ET.register_namespace("hugelab", HUGELAB_NS)
    meta = root.find("metadata")
    if meta is None:
        meta = ET.SubElement(root, "metadata")
    for old in meta.findall(f"{{{HUGELAB_NS}}}ssh"):
        meta.remove(old)
    ET.SubElement(meta, f"{{{HUGELAB_NS}}}ssh", {"host-key": key.strip()})


def memory_mib(root: ET.Element) -> int:
    """The domain's `<memory>` in MiB."""
    el = root.find("memory")
    if el is not None and (el.get("unit") or "KiB").lower() not in MEMORY_UNITS_KIB:
        raise VMError(f"the domain's <memory> has an unknown unit {el.get('unit')!r}")
    kib = kib_of(el)
    if kib is None:
        raise VMError("the domain's XML has no <memory>")
    return int(round(kib / 1024))


def vcpus(root: ET.Element) -> int:
    """The vCPUs the domain runs with (`current=` when set, else the maximum)."""
    el = root.find("vcpu")
    if el is None:
        return 1
    return int(el.get("current") or (el.text or "1").strip())


def disks(root: ET.Element) -> list[Disk]:
    """Every disk with an image, in device order. A writable disk hugelab cannot put an
    overlay over (a storage-pool volume or a network disk: rbd, iscsi, nbd...) is an error:
    the copy would write the user's data."""
    out = []
    for d in root.findall("./devices/disk"):
        src = d.find("source")
        drv = d.find("driver")
        tgt = d.find("target")
        target = tgt.get("dev", "?") if tgt is not None else "?"
        readonly = d.find("readonly") is not None or d.get("device") in ("cdrom", "floppy")
        path = None if src is None else (src.get("file") or src.get("dev"))
        if path is None:
            if src is None or readonly:
                continue  # an empty drive, or a read-only disk the copy may share
            raise VMError(f"disk {target} of the domain is a {d.get('type')} disk "
                          f"({', '.join(f'{k}={v}' for k, v in src.attrib.items())}): hugelab "
                          "can put a copy-on-write overlay only over a file or block device",
                          hint="mark that disk <readonly/>, or point it at an image file")
        out.append(Disk(target, path, (drv.get("type") if drv is not None else None) or "raw",
                        readonly, d.get("device") or "disk"))
    return out


def _set(root: ET.Element, tag: str, text: str, **attrs: str) -> None:
    el = root.find(tag)
    if el is None:
        el = ET.SubElement(root, tag)
    el.text = text
    el.attrib.clear()
    el.attrib.update(attrs)


ARM_BACKING = ("hugepages", "source", "access", "allocation")  # what an arm decides


def _memory(root: ET.Element, spec: VmSpec) -> None:
    """The arm's memory size and backing; the domain's other backing settings (locked,
    nosharepages, discard) stay, and a ballooned domain keeps its balloon below the size."""
    old_kib = kib_of(root.find("memory"))
    cur_kib = kib_of(root.find("currentMemory"))
    kib = spec.mem_mib * 1024
    _set(root, "memory", str(kib), unit="KiB")
    current = kib if cur_kib is None or old_kib is None or cur_kib >= old_kib else \
        min(kib, cur_kib)
    _set(root, "currentMemory", str(current), unit="KiB")
    mb = root.find("memoryBacking")
    keep = [c for c in (mb if mb is not None else []) if c.tag not in ARM_BACKING]
    if mb is not None:
        root.remove(mb)
    new = memory_backing(spec)
    if new is None and keep:
        new = ET.Element("memoryBacking")
    if new is not None:
        for c in keep:
            new.append(c)
        at = list(root).index(root.find("currentMemory"))  # type: ignore[arg-type]
        root.insert(at + 1, new)


def kib_of(el: ET.Element | None) -> int | None:
    """A memory element's size in KiB (None when absent)."""
    if el is None or not (el.text or "").strip():
        return None
    unit = (el.get("unit") or "KiB").lower()
    return int(int(el.text or "0") * MEMORY_UNITS_KIB.get(unit, 1))


def _disks(root: ET.Element, overlays: Mapping[str, str]) -> None:
    for d in root.findall("./devices/disk"):
        src = d.find("source")
        path = None if src is None else (src.get("file") or src.get("dev"))
        if path is None or path not in overlays:
            continue
        assert src is not None
        d.set("type", "file")
        src.attrib.clear()
        src.set("file", overlays[path])
        drv = d.find("driver")
        if drv is None:
            drv = ET.SubElement(d, "driver", name="qemu")
        drv.set("type", "qcow2")
        for child in list(d):  # a backing chain libvirt recorded for the original image
            if child.tag == "backingStore":
                d.remove(child)


def _devices(root: ET.Element, private: str | None) -> None:
    """What the copy must not share with the user's domain: consoles on the network
    (graphics: removed; the copy's console needs no screen), host directories (shared
    read-only), log files (file-backed serial/console/channel devices write into the copy's
    own directory `private`), MAC addresses and tap names."""
    dev = root.find("devices")
    if dev is None:
        dev = ET.SubElement(root, "devices")
    for iface in dev.findall("interface"):
        for mac in iface.findall("mac"):
            iface.remove(mac)
        for target in iface.findall("target"):  # tap names are per domain
            iface.remove(target)
    for g in dev.findall("graphics"):
        dev.remove(g)
    for fs in dev.findall("filesystem"):
        if fs.find("readonly") is None:
            ET.SubElement(fs, "readonly")
    for i, ch in enumerate(el for el in dev if el.tag in ("serial", "console", "channel",
                                                          "parallel")):
        src = ch.find("source")
        if ch.get("type") == "file" and src is not None and src.get("path"):
            src.set("path", f"{private}/{ch.tag}{i}.log" if private else "/dev/null")
        log = ch.find("log")
        if log is not None:
            ch.remove(log)
    _agent_channel(dev)


def _agent_channel(dev: ET.Element) -> None:
    """The guest agent's virtio-serial channel, on a socket libvirt picks for the copy."""
    channels = dev.findall("channel")
    if not any((c.find("target") is not None and
                c.find("target").get("name") == AGENT_CHANNEL) for c in channels):  # type: ignore[union-attr]
        chan = ET.SubElement(dev, "channel", type="unix")
        ET.SubElement(chan, "source", mode="bind")
        ET.SubElement(chan, "target", type="virtio", name=AGENT_CHANNEL)
    for c in channels:  # libvirt picks a fresh socket path for the copy
        src = c.find("source")
        if c.get("type") == "unix" and src is not None:
            src.attrib.pop("path", None)


def nvram(root: ET.Element) -> str | None:
    """The domain's UEFI variable store, which the guest writes (boot entries)."""
    el = root.find("os/nvram")
    return (el.text or "").strip() or None if el is not None else None


def _nvram(root: ET.Element, copy_path: str | None) -> None:
    el = root.find("os/nvram")
    if el is not None:
        if copy_path is None:
            raise VMError("the domain has a UEFI variable store but no copy of it was made")
        el.text = copy_path
        el.attrib.pop("template", None)


def _vcpus(root: ET.Element, n: int) -> None:
    """The arm's vCPU count; refused where the domain ties vCPUs to a topology, NUMA cells or
    pins (changing them consistently is the domain owner's call)."""
    el = root.find("vcpu")
    have = vcpus(root)
    if n == have:
        return
    ties = [what for what, path in (("a CPU topology", "cpu/topology"), ("NUMA cells", "cpu/numa"),
                                    ("vCPU pins", "cputune/vcpupin"), ("a <vcpus> list", "vcpus"))
            if root.find(path) is not None]
    if ties or (el is not None and el.get("current")):
        raise VMError(f"the arm asks for {n} vCPUs and the domain has {have}, tied to "
                      f"{', '.join(ties) or 'a current= count'}",
                      hint="leave vcpus out of the arm (the domain's own count is used)")
    if el is None:
        el = ET.SubElement(root, "vcpu")
    el.text = str(n)


def _placement(root: ET.Element, spec: VmSpec) -> None:
    """The arm's cpu_pin (every vCPU and the emulator) and numa_node (strict memory)."""
    if spec.cpu_pin:
        cpus = ",".join(str(c) for c in spec.cpu_pin)
        for old in root.findall("cputune"):
            root.remove(old)
        tune = ET.SubElement(root, "cputune")
        for v in range(spec.vcpus):
            ET.SubElement(tune, "vcpupin", vcpu=str(v), cpuset=cpus)
        ET.SubElement(tune, "emulatorpin", cpuset=cpus)
    if spec.numa_node is not None:
        for old in root.findall("numatune"):
            root.remove(old)
        ET.SubElement(ET.SubElement(root, "numatune"), "memory", mode="strict",
                      nodeset=str(spec.numa_node))


def _apply_arm(root: ET.Element, spec: VmSpec) -> None:
    if root.find("cpu/numa/cell") is not None and kib_of(root.find("memory")) != \
            spec.mem_mib * 1024:
        raise VMError("the domain has NUMA cells: libvirt sizes its memory from the cells, so "
                      "the arm cannot change it",
                      hint="leave mem out of the arm (the domain's own size is used)")
    _memory(root, spec)
    _vcpus(root, spec.vcpus)
    _placement(root, spec)


def with_arm(user_xml: str, spec: VmSpec) -> str:
    """The user's domain with only what the arm changes (memory backing, memory, vCPUs): what
    `virsh edit` would make of it to run the arm by hand."""
    root = copy.deepcopy(parse(user_xml))
    _apply_arm(root, spec)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def transient_xml(user_xml: str, spec: VmSpec, *, name: str,
                  overlays: Mapping[str, str], private: str | None = None,
                  nvram_copy: str | None = None, ssh_forward: tuple[int, int] | None = None
                  ) -> str:
    """The XML of the transient copy: `name`, no UUID, the spec's memory backing, memory and
    vCPUs (the domain's own unless the arm set them: see domainresolve.resolve), and the disks
    in `overlays` (image -> overlay path) redirected. `ssh_forward` (host port, guest port):
    a NIC of its own reaching the guest's SSH server from 127.0.0.1 (see `_ssh_nic`)."""
    root = copy.deepcopy(parse(user_xml))
    _set(root, "name", name)
    for tag in ("uuid", "title", "description"):
        for el in root.findall(tag):
            root.remove(el)
    root.attrib.pop("id", None)
    _apply_arm(root, spec)
    _disks(root, overlays)
    _devices(root, private)
    _nvram(root, nvram_copy)
    if ssh_forward is not None:
        _ssh_nic(root, *ssh_forward)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def _ssh_nic(root: ET.Element, host_port: int, guest_port: int) -> None:
    """A user-mode NIC whose only way in is 127.0.0.1:host_port -> guest_port (restrict=on:
    the guest reaches nothing through it). libvirt 9 forwards ports of a user NIC only with
    passt, so the NIC is given to QEMU directly (libvirt's qemu:commandline)."""
    ET.register_namespace("qemu", QEMU_NS)
    cmd = root.find(f"{{{QEMU_NS}}}commandline")  # the user's own QEMU arguments stay
    if cmd is None:
        cmd = ET.SubElement(root, f"{{{QEMU_NS}}}commandline")
    netdev = (f"user,id=hugelab-ssh,restrict=on,"
              f"hostfwd=tcp:127.0.0.1:{int(host_port)}-:{int(guest_port)}")
    nic = f"virtio-net-pci,netdev=hugelab-ssh,addr=0x{_free_root_slot(root):x}"
    for arg in ("-netdev", netdev, "-device", nic):
        ET.SubElement(cmd, f"{{{QEMU_NS}}}arg", value=arg)


def _free_root_slot(root: ET.Element) -> int:
    """The highest slot of the root PCI bus no device of the domain has: QEMU places devices
    given on its command line before libvirt's, and libvirt gives its own devices (and the
    controllers it adds at start) the lowest free slots."""
    used = {int(a.get("slot", "0"), 16) for a in root.iter("address")
            if a.get("type") == "pci" and int(a.get("bus", "0"), 16) == 0}
    for slot in range(0x1e, 0x02, -1):  # 0x1f: q35's LPC/SATA/SMBus
        if slot not in used:
            return slot
    raise VMError("the domain's root PCI bus has no free slot for the SSH NIC hugelab adds",
                  hint="use access = \"agent\"")


def diff(user_xml: str, new_xml: str, *, name: str) -> str:
    """A unified diff of the user's domain XML against `new_xml` (`with_arm`'s)."""
    old = ET.tostring(parse(user_xml), encoding="unicode")
    root = parse(old)
    ET.indent(root)
    before = (ET.tostring(root, encoding="unicode") + "\n").splitlines(keepends=True)
    after = new_xml.splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, fromfile=f"{name} (yours)",
                                        tofile=f"{name} (with the arm's memory)"))
