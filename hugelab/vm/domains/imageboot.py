"""Booting hugelab's Debian guest image (see image.py): a copy-on-write overlay over the cached
base, and the QEMU command line.

Guests boot a copy-on-write overlay (`make_overlay`), so the cached base is never written.
`boot_argv` gives the QEMU command line; the guest agent listens on the virtio-serial port
`org.qemu.guest_agent.0`: Debian's udev rule starts qemu-guest-agent.service as soon as that port
appears (the unit has no [Install] section and needs no enabling).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hugelab import proc
from hugelab.vm.common.cpumodel import qemu_cpu
from hugelab.vm.domains.image import GuestImage, ImageError, find_tool
from hugelab.vm.domains.imagerecipe import KERNEL_CMDLINE, ROOT_DEVICE

QGA_PORT = "org.qemu.guest_agent.0"  # qemu-guest-agent's port (hugelab's own agent uses another)

def make_overlay(image: GuestImage, path: Path) -> Path:
    """A qcow2 overlay at `path` backed by the image's disk: the guest writes only to it."""
    if Path(os.path.realpath(path)) == Path(os.path.realpath(image.disk)):
        raise ImageError(f"the overlay {path} would overwrite the cached base image")
    proc.run([find_tool("qemu-img"), "create", "-q", "-f", "qcow2", "-F", "qcow2",
              "-b", image.disk, path], timeout=60)
    return path


def boot_argv(image: GuestImage, *, mem_mib: int, agent_socket: Path, serial_log: Path,
              accel: str, overlay: Path, vcpus: int = 1, qemu: str = "qemu-system-x86_64",
              extra_cmdline: Sequence[str] = ()) -> list[str]:
    """QEMU argv booting the image's kernel directly with `overlay` (see make_overlay) as the
    virtio-blk root disk: serial console to `serial_log`, qemu-guest-agent on `agent_socket`,
    no network, no default devices."""
    if accel not in ("kvm", "tcg"):
        raise ImageError(f"accel {accel!r} must be kvm or tcg",
                         hint="resolve 'auto' first (hugelab.vm.own.guest.probe_accel)")
    if mem_mib < 256 or vcpus < 1:
        raise ImageError(f"a {mem_mib} MiB / {vcpus} vCPU guest cannot boot this image",
                         hint="give it at least 256 MiB (512 MiB under TCG) and one vCPU")
    if Path(os.path.realpath(overlay)) == Path(os.path.realpath(image.disk)):
        raise ImageError("boot_argv needs an overlay, not the cached base image",
                         hint="create one with make_overlay(image, path)")
    def q(path: Path) -> str:  # QEMU reads ',' in an option value as ',,'
        return str(path).replace(",", ",,")

    cmdline = [*KERNEL_CMDLINE, *extra_cmdline]
    if image.root_device != ROOT_DEVICE:
        cmdline[0] = f"root={image.root_device}"
    return [
        qemu,
        "-name", "hugelab-image,debug-threads=on",
        "-machine", "pc",
        "-accel", accel,
        "-cpu", qemu_cpu(accel),
        "-smp", str(vcpus),
        "-m", f"{mem_mib}M",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-chardev", f"file,id=con0,path={q(serial_log)}",
        "-serial", "chardev:con0",
        "-drive", f"file={q(overlay)},format=qcow2,if=none,id=disk0",
        "-device", "virtio-blk-pci,drive=disk0",
        "-device", "virtio-serial",
        "-chardev", f"socket,path={q(agent_socket)},server=on,wait=off,id=qga0",
        "-device", f"virtserialport,chardev=qga0,name={QGA_PORT}",
        "-kernel", str(image.kernel),
        "-initrd", str(image.initrd),
        "-append", " ".join(cmdline),
    ]
