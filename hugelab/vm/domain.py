"""A user's libvirt domain -> the transient copy an arm runs (pure: XML text in, XML text out).

The copy gets a new name and no UUID (libvirt makes one), the arm's `<memoryBacking>` (the same
element `libvirt_xml.memory_backing` writes for hugelab's own guests), the arm's memory and
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
from hugelab.vm.libvirt_xml import memory_backing
from hugelab.vm.qemu_args import VmSpec

AGENT_CHANNEL = "org.qemu.guest_agent.0"
MEMORY_UNITS_KIB = {"b": 1 / 1024, "bytes": 1 / 1024, "kib": 1, "k": 1, "kb": 1000 / 1024,
                    "mib": 1024, "m": 1024, "mb": 1e6 / 1024, "gib": 1024 ** 2, "g": 1024 ** 2,
                    "gb": 1e9 / 1024, "tib": 1024 ** 3, "t": 1024 ** 3}


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


def memory_mib(root: ET.Element) -> int:
    """The domain's `<memory>` in MiB."""
    el = root.find("memory")
    if el is None or not (el.text or "").strip():
        raise VMError("the domain's XML has no <memory>")
    unit = (el.get("unit") or "KiB").lower()
    if unit not in MEMORY_UNITS_KIB:
        raise VMError(f"the domain's <memory> has an unknown unit {unit!r}")
    return int(round(int(el.text or "0") * MEMORY_UNITS_KIB[unit] / 1024))


def vcpus(root: ET.Element) -> int:
    el = root.find("vcpu")
    return int((el.text or "1").strip()) if el is not None else 1


def disks(root: ET.Element) -> list[Disk]:
    """File-backed disks (type='file' or 'block'), in device order."""
    out = []
    for d in root.findall("./devices/disk"):
        src = d.find("source")
        path = None if src is None else (src.get("file") or src.get("dev"))
        if path is None:
            continue  # an empty CD-ROM drive, or a network disk: left as it is
        drv = d.find("driver")
        tgt = d.find("target")
        out.append(Disk(tgt.get("dev", "?") if tgt is not None else "?", path,
                        (drv.get("type") if drv is not None else None) or "raw",
                        d.find("readonly") is not None or d.get("device") == "cdrom",
                        d.get("device") or "disk"))
    return out


def _set(root: ET.Element, tag: str, text: str, **attrs: str) -> None:
    el = root.find(tag)
    if el is None:
        el = ET.SubElement(root, tag)
    el.text = text
    el.attrib.clear()
    el.attrib.update(attrs)


def _memory(root: ET.Element, spec: VmSpec) -> None:
    kib = str(spec.mem_mib * 1024)
    _set(root, "memory", kib, unit="KiB")
    _set(root, "currentMemory", kib, unit="KiB")
    for mb in root.findall("memoryBacking"):
        root.remove(mb)
    new = memory_backing(spec)
    if new is not None:
        at = list(root).index(root.find("currentMemory"))  # type: ignore[arg-type]
        root.insert(at + 1, new)


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


def _devices(root: ET.Element) -> None:
    dev = root.find("devices")
    if dev is None:
        dev = ET.SubElement(root, "devices")
    for iface in dev.findall("interface"):
        for mac in iface.findall("mac"):
            iface.remove(mac)
        for target in iface.findall("target"):  # tap names are per domain
            iface.remove(target)
    for el in dev.iter():
        if el.tag in ("graphics",) and el.get("autoport") != "yes":
            el.set("autoport", "yes")
            el.attrib.pop("port", None)
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


def _apply_arm(root: ET.Element, spec: VmSpec) -> None:
    _memory(root, spec)
    vcpu = root.find("vcpu")
    if vcpu is None:
        vcpu = ET.SubElement(root, "vcpu")
    vcpu.text = str(spec.vcpus)


def with_arm(user_xml: str, spec: VmSpec) -> str:
    """The user's domain with only what the arm changes (memory backing, memory, vCPUs): what
    `virsh edit` would make of it to run the arm by hand."""
    root = copy.deepcopy(parse(user_xml))
    _apply_arm(root, spec)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def transient_xml(user_xml: str, spec: VmSpec, *, name: str,
                  overlays: Mapping[str, str]) -> str:
    """The XML of the transient copy: `name`, no UUID, the spec's memory backing, memory and
    vCPUs (the domain's own unless the arm set them: see libvirt_guest.resolve), and the disks
    in `overlays` (image -> overlay path) redirected."""
    root = copy.deepcopy(parse(user_xml))
    _set(root, "name", name)
    for tag in ("uuid", "title", "description"):
        for el in root.findall(tag):
            root.remove(el)
    root.attrib.pop("id", None)
    _apply_arm(root, spec)
    _disks(root, overlays)
    _devices(root)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"


def diff(user_xml: str, new_xml: str, *, name: str) -> str:
    """A unified diff of the user's domain XML against `new_xml` (`with_arm`'s)."""
    old = ET.tostring(parse(user_xml), encoding="unicode")
    root = parse(old)
    ET.indent(root)
    before = (ET.tostring(root, encoding="unicode") + "\n").splitlines(keepends=True)
    after = new_xml.splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, fromfile=f"{name} (yours)",
                                        tofile=f"{name} (with the arm's memory)"))
