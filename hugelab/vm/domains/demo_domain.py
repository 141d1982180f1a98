"""A domain of hugelab's small Debian image (hugelab.vm.domains.image), for trying `domain = NAME` without
a VM of your own and for the tests: `hugelab vm demo-domain` defines it. Its kernel command
line names hugelab's own SSH key (`demo_key`), so its sshd lets hugelab in over SSH too, and
its metadata pins the image's sshd host key (made by that image's build), so hugelab's SSH
trusts that key only. The copies of the image it boots are 0600 (libvirt hands them to its QEMU
user): the disk holds the host key's private half.
"""

from __future__ import annotations

import enum
import os
import shutil
from pathlib import Path
from typing import Any

from hugelab.owned import ensure_private_dir
from hugelab.proc import run
from hugelab.vm.common.libvirtd import DomainError, connect, libvirt_module
from hugelab.vm.common.spec import safe_name
from hugelab.vm.domains import domain as dx
from hugelab.vm.domains.demokey import demo_key_path, public_half
from hugelab.vm.domains.domainresolve import user_xml
from hugelab.vm.domains.imagerecipe import SSH_KEY_ARG

IMAGES_ROOT = Path("/var/lib/libvirt/images/hugelab-domains")  # define_image_domain's copies
DOMAIN_VERSION = 4  # bump when image_domain_xml changes: older demo domains are defined again


def demo_key() -> Path:
    """hugelab's own SSH key for the domains `define_image_domain` makes (their kernel command
    line names its public half: see hugelab.vm.domains.imagerecipe.SSH_KEY_ARG). Made once, 0600."""
    key = demo_key_path()
    ensure_private_dir(key.parent)
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hugelab demo domains",
             "-f", str(key)])
    os.chmod(key, 0o600)
    return key


def _key_arg(key: Path) -> str:
    half = public_half(key)
    if half is None:
        raise DomainError(f"hugelab's SSH key {key} has no readable public half ({key}.pub)",
                          hint=f"remove {key} and run this again to make a new one")
    return f"{SSH_KEY_ARG}={half.replace(' ', ',', 1)}"


def image_domain_xml(name: str, disk: Path, kernel: Path, initrd: Path, *, mem_mib: int = 512,
                     accel: str = "tcg", key_arg: str = "", stamp: str = "",
                     host_key: str = "") -> str:
    """A persistent domain booting hugelab's Debian image (hugelab.vm.domains.image) directly from its
    kernel and initrd, root on a virtio disk, the guest agent's channel, the console on a pty;
    `key_arg` (hugelab.ssh_key=...) lets hugelab's key in over SSH; `host_key` (the image's
    sshd host key) is pinned in its metadata; `stamp` describes it."""
    import xml.etree.ElementTree as ET
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    ET.SubElement(dom, "name").text = name
    if stamp:
        ET.SubElement(dom, "description").text = stamp
    ET.SubElement(dom, "memory", unit="MiB").text = str(mem_mib)
    ET.SubElement(dom, "vcpu").text = "2"  # under TCG (one thread a vCPU) boots 3 s sooner
    if host_key:
        dx.pin_host_key(dom, host_key)
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    ET.SubElement(os_el, "kernel").text = str(kernel)
    ET.SubElement(os_el, "initrd").text = str(initrd)
    ET.SubElement(os_el, "cmdline").text = " ".join(
        ["root=/dev/vda", "rw", "console=ttyS0", "panic=-1", "quiet",  # quiet: 2 s less boot
         *([key_arg] if key_arg else [])])                            # under TCG (measured)
    ET.SubElement(ET.SubElement(dom, "features"), "acpi")
    ET.SubElement(dom, "on_reboot").text = "destroy"
    dev = ET.SubElement(dom, "devices")
    disk_el = ET.SubElement(dev, "disk", type="file", device="disk")
    ET.SubElement(disk_el, "driver", name="qemu", type="qcow2")
    ET.SubElement(disk_el, "source", file=str(disk))
    ET.SubElement(disk_el, "target", dev="vda", bus="virtio")
    chan = ET.SubElement(dev, "channel", type="unix")
    ET.SubElement(chan, "source", mode="bind")
    ET.SubElement(chan, "target", type="virtio", name=dx.AGENT_CHANNEL)
    ET.SubElement(ET.SubElement(dev, "serial", type="pty"), "target", port="0")
    ET.SubElement(ET.SubElement(dev, "console", type="pty"), "target", type="serial", port="0")
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"


def define_image_domain(name: str, *, uri: str = "qemu:///system", mem_mib: int = 512,
                        accel: str = "tcg", progress: Any = None) -> Path:
    """Build (or reuse) hugelab's Debian image, copy it where libvirt's QEMU can read it
    (IMAGES_ROOT/NAME) and define domain NAME booting it, hugelab's key (`demo_key`) let in
    over SSH. Returns the copy's directory. A domain of that name defined from the same image
    and key is left as it is; one of the same image with another key (hugelab's key is its state
    directory's) is defined again for this key, its copies kept; one of an older image is
    copied and defined again (when it is not running); any other domain of that name is
    refused. Copies that are no longer the image's (another hugelab wrote its own over them)
    are made again, as for an older image. `progress` hears which of these it did."""
    from hugelab.vm.domains.imagebuild import build_image
    from hugelab.vm.domains.imagerecipe import recipe_hash
    home = IMAGES_ROOT / safe_name(name)
    key = demo_key()
    stamp = f"{STAMP_PREFIX} {recipe_hash()} v{DOMAIN_VERSION}, key {_key_arg(key)[-12:]}"
    conn = connect(uri)
    lv = libvirt_module()
    say = progress or (lambda msg: None)
    try:
        found, pinned = _defined_as(conn, name, stamp)
        if found is Standing.SAME:
            say(f"domain '{name}' is defined from this image and key: left as it is")
            return home
        image = build_image(progress=progress)
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(IMAGES_ROOT, 0o711)
        kernel = _boot_kernel(image.kernel)
        if found in (Standing.OTHER_KEY, Standing.OLDER) and \
                pinned == (image.host_key or "").strip():
            why = f"another key: defined again for {key}" if found is Standing.OTHER_KEY else \
                "an older definition: defined again"
            say(f"domain '{name}' is of this image with {why} (its copies kept)")
        else:
            say(f"domain '{name}': copying the image to {home} and defining it")
            for src in dict.fromkeys((image.disk, image.kernel, image.initrd, kernel)):
                _copy_private(src, home / src.name)
        xml = image_domain_xml(name, home / image.disk.name, home / kernel.name,
                               home / image.initrd.name, mem_mib=mem_mib, accel=accel,
                               key_arg=_key_arg(key), stamp=stamp, host_key=image.host_key)
        try:
            conn.defineXML(xml)
        except lv.libvirtError as exc:
            raise DomainError(f"libvirt could not define '{name}': {exc.get_error_message()}"
                              ) from exc
    finally:
        conn.close()
    return home


STAMP_PREFIX = "hugelab demo domain: image"


def _boot_kernel(kernel: Path) -> Path:
    """What the domain boots: the bzImage's uncompressed kernel through its PVH entry where it
    has one (hugelab.vm.common.pvh, cached by content), 3.4 s sooner to the agent under TCG
    (bench/image_boot.py --pvh); else the bzImage."""
    from hugelab.vm.common.pvh import boot_image
    return boot_image(kernel) or kernel


def copies_intact(home: Path) -> bool:
    """Whether the copies in `home` are still the cached image's files (by size: a copy
    replaced by another image's, or cut short, is caught without reading 600 MiB); True when
    the cache no longer holds the image (nothing to compare with)."""
    from hugelab.vm.domains.image import image_dir, load_image
    image = load_image(image_dir())
    if image is None:
        return True
    try:
        return all((home / f.name).stat().st_size == f.stat().st_size
                   for f in (image.disk, image.kernel, image.initrd, _boot_kernel(image.kernel)))
    except OSError:
        return False


def _copy_private(src: Path, dst: Path) -> None:
    """Copy `src` to `dst`, 0600 from its first byte (an old copy is made 0600 first)."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
        os.fchmod(out.fileno(), 0o600)
        shutil.copyfileobj(inp, out, 1 << 20)


def _image_of(stamp: str) -> str:
    """The image (recipe hash) a demo domain's stamp names; "" for a stamp that is not one."""
    if not stamp.startswith(STAMP_PREFIX):
        return ""
    return (stamp.removeprefix(STAMP_PREFIX).split() or [""])[0]


def _key_of(stamp: str) -> str:
    """The key a demo domain's stamp names (its last 12 characters); "" for none."""
    return stamp.rpartition(", key ")[2] if ", key " in stamp else ""


class Standing(enum.Enum):
    """How a defined demo domain stands against the definition wanted (`_defined_as`)."""

    SAME = "defined with it, its copies intact"
    OTHER_KEY = "of this image, copies intact, another key: undefined here"
    OLDER = "of this image, copies intact, an older definition: undefined here"
    NONE = "not defined, or undefined here: another image or its copies not intact"


def _defined_as(conn: Any, name: str, stamp: str) -> tuple[Standing, str | None]:
    """How domain `name` stands against `stamp` (Standing), and the sshd host key it pinned
    (copies of this image are kept if it is the cached image's); refuses to touch any other
    domain, before reading any copy."""
    lv = libvirt_module()
    try:
        dom = conn.lookupByName(name)
    except lv.libvirtError:
        return Standing.NONE, None
    root = dx.parse(user_xml(dom))
    have = root.findtext("description") or ""
    home = str(IMAGES_ROOT / safe_name(name))
    if not (have.startswith(STAMP_PREFIX) or any(d.source.startswith(f"{home}/")
                                                 for d in dx.disks(root))):
        raise DomainError(f"a domain named '{name}' exists and hugelab did not define it",
                          hint="pick another name (--name)")
    intact = copies_intact(IMAGES_ROOT / safe_name(name))
    if have == stamp and intact:
        return Standing.SAME, dx.host_key(root)
    if dom.isActive():
        raise DomainError(f"demo domain '{name}' is of an older image or another key and is "
                          "running",
                          hint=f"shut it down (virsh destroy {name}) and run this again")
    try:
        dom.undefine()
    except lv.libvirtError as exc:
        raise DomainError(f"cannot undefine the old demo domain '{name}': "
                          f"{exc.get_error_message()}",
                          hint=f"undefine it yourself (virsh undefine {name}) and run this again"
                          ) from exc
    if not (intact and _image_of(have) == _image_of(stamp)):
        return Standing.NONE, dx.host_key(root)
    return (Standing.OTHER_KEY if _key_of(have) != _key_of(stamp) else Standing.OLDER), \
        dx.host_key(root)
