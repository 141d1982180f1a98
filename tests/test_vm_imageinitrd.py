"""The Debian image's busybox initrd (hugelab.vm.domains.imageinitrd) and what it shares with the
own guests' initramfs (hugelab.vm.common.busyboxinitrd): the module list resolved from a small
fake modules.dep, the archive's layout and the /init script. The real boot through it is
tests/test_vm_image.py's."""

from __future__ import annotations

import lzma
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from hugelab.errors import VMError
from hugelab.vm.common import busyboxinitrd as bb
from hugelab.vm.domains import imageinitrd
from hugelab.vm.domains.imagerecipe import RECIPE, ROOT_DEVICE
from tests.test_vm_initramfs import parse_cpio

# A guest kernel's modules.dep in small: ext4 needs crc16, mbcache and jbd2; virtio is built in.
DEP = """\
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko \
kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko \
kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/crypto/crc32c_generic.ko:
kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/fs/9p/9p.ko:
"""
BUILTIN = "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n"


def fake_modules(root: Path) -> Path:
    d = root / "lib/modules/6.1.0-9-amd64"
    for line in DEP.splitlines():
        rel = line.split(":", 1)[0]
        f = d / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        body = f"ELF {rel}".encode()
        f.write_bytes(lzma.compress(body) if rel.endswith(".xz") else body)
    (d / "modules.dep").write_text(DEP)
    (d / "modules.builtin").write_text(BUILTIN)
    return d


def test_the_image_initrd_carries_the_root_disks_modules_in_order(tmp_path):
    mods = fake_modules(tmp_path)
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF busybox")
    entries = parse_cpio(imageinitrd.build_image_initrd(mods, RECIPE.initrd_modules,
                                                        busybox=busybox))
    order = entries["modules.order"][1].decode().split()
    assert order == ["virtio_pci_legacy_dev.ko", "virtio_pci_modern_dev.ko", "virtio_pci.ko",
                     "virtio_blk.ko", "crc32c_generic.ko", "crc16.ko", "mbcache.ko", "jbd2.ko",
                     "ext4.ko"]  # built-ins (virtio, virtio_ring) and 9p left out
    for name in order:
        assert entries[f"lib/modules/{name}"][1].startswith(b"ELF ")  # ext4's unpacked from xz
    assert entries["bin/busybox"] == (0o100755, b"\x7fELF busybox")
    assert entries["init"][0] == 0o100755
    assert entries["init"][1].decode() == imageinitrd.init_script()
    for d in ("dev", "proc", "sys", "newroot"):
        assert entries[d][0] & 0o170000 == 0o040000
    assert entries["dev/console"][0] & 0o170000 == 0o020000


def test_the_image_initrd_refuses_a_kernel_without_modules_dep(tmp_path):
    with pytest.raises(VMError) as e:
        imageinitrd.build_image_initrd(tmp_path, RECIPE.initrd_modules, busybox=tmp_path)
    assert "modules.dep" in e.value.message and e.value.hint


def test_the_init_mounts_root_from_the_cmdline_and_switches_to_systemd():
    text = imageinitrd.init_script()
    assert text.startswith("#!/bin/busybox sh\n")
    assert 'insmod "/lib/modules/$m"' in text and "done < /modules.order" in text
    assert 'root=*) root="${arg#root=}"' in text and "rw|ro) mode=" in text
    assert 'mount -t "$fstype" -o "$mode$flags" "$dev" /newroot' in text
    assert f"within {imageinitrd.ROOT_WAIT_S} s" in text and "poweroff -f" in text
    assert "hugelab-initrd: root $dev mounted" in text and "> /dev/kmsg" in text
    for fs in ("/dev", "/proc", "/sys"):
        assert f"mount -o move {fs} /newroot{fs}" in text
    assert text.rstrip().endswith('exec switch_root /newroot "$init" "$@"')
    assert ROOT_DEVICE.startswith("/dev/")  # the `[ -b "$dev" ]` wait, not findfs
    assert subprocess.run([shutil.which("sh") or "/bin/sh", "-n"], input=text.encode(),
                          check=False).returncode == 0


def elf(path: Path, *, interp: bool) -> Path:
    """A 64-bit ELF header and two program headers (PT_LOAD, then PT_INTERP or PT_NOTE)."""
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 32, 64)  # e_phoff
    struct.pack_into("<HH", head, 54, 56, 2)  # e_phentsize, e_phnum
    table = bytearray(112)
    struct.pack_into("<I", table, 0, 1)
    struct.pack_into("<I", table, 56, 3 if interp else 4)
    path.write_bytes(bytes(head + table))
    return path


def test_find_busybox_takes_a_static_one_and_refuses_a_dynamic_one(tmp_path, monkeypatch):
    static, dynamic = elf(tmp_path / "static", interp=False), elf(tmp_path / "dyn", interp=True)
    assert bb.is_static(static) and not bb.is_static(dynamic)
    assert not bb.is_static(tmp_path / "missing") and not bb.is_static(Path(__file__))
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    monkeypatch.setattr(bb, "BUSYBOX_CANDIDATES", (str(dynamic), str(static)))
    assert bb.find_busybox() == static
    monkeypatch.setattr(bb, "BUSYBOX_CANDIDATES", (str(dynamic),))
    with pytest.raises(VMError) as e:
        bb.find_busybox()
    assert "dynamically linked" in e.value.message and "busybox-static" in (e.value.hint or "")
    monkeypatch.setattr(bb, "BUSYBOX_CANDIDATES", ())
    with pytest.raises(VMError, match="not installed"):
        bb.find_busybox()
