"""hugelab's own guests boot the bzImage's uncompressed kernel through QEMU's PVH entry where
it has one (hugelab.vm.common.pvh). Pure checks on images this test builds itself (a bzImage
header around an XZ, gzip or zstd payload; an ELF with and without the note), and a real one:
the host's kernel extracted, its PVH note confirmed by binutils' `readelf -n` (not by this
code), and a guest booted from it that runs the bzImage's own release."""

from __future__ import annotations

import gzip
import lzma
import shutil
import struct
import subprocess

import pytest

from hugelab.vm.common import pvh


def elf(note: bool) -> bytes:
    """A minimal 64-bit little-endian ELF with one PT_NOTE segment holding a Xen note (type 18,
    the PVH entry, or 6 when `note` is False)."""
    name, desc = b"Xen\0", struct.pack("<Q", 0x1000000)
    notes = struct.pack("<III", len(name), len(desc), 18 if note else 6) + name + desc
    phoff, phentsize = 64, 56
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, phoff)
    struct.pack_into("<HH", header, 0x36, phentsize, 1)
    offset = phoff + phentsize
    phdr = struct.pack("<IIQQQQQQ", 4, 0, offset, 0, 0, len(notes), len(notes), 4)
    return bytes(header) + phdr + notes + b"\0" * 100


def bzimage(packed: bytes, setup_sects: int = 1) -> bytes:
    """An x86 boot sector and setup header (protocol 2.15) around `packed`."""
    setup = bytearray((setup_sects + 1) * 512)
    setup[0x1F1] = setup_sects
    setup[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", setup, 0x206, 0x20F)
    struct.pack_into("<II", setup, 0x248, 16, len(packed))
    return bytes(setup) + b"\0" * 16 + packed + b"\xff" * 8


@pytest.mark.parametrize("pack", [lambda b: lzma.compress(b, format=lzma.FORMAT_XZ),
                                  gzip.compress], ids=["xz", "gzip"])
def test_the_elf_kernel_comes_out_of_its_bzimage(pack):
    image = bzimage(pack(elf(True)))
    assert pvh.elf_kernel(image) == elf(True)
    assert pvh.elf_kernel(bzimage(pack(elf(False)))) is None  # no PVH entry: boot the bzImage


def test_what_is_not_read_here_boots_the_bzimage():
    assert pvh.elf_kernel(bzimage(b"\x28\xb5\x2f\xfd" + b"zstd frame")) is None  # zstd
    assert pvh.elf_kernel(bzimage(b"\xfd7zXZ\x00 not really xz")) is None
    assert pvh.elf_kernel(b"MZ" + b"\0" * 4096) is None  # no setup header
    old = bytearray(bzimage(lzma.compress(elf(True), format=lzma.FORMAT_XZ)))
    struct.pack_into("<H", old, 0x206, 0x206)  # protocol 2.06: no payload fields
    assert pvh.elf_kernel(bytes(old)) is None


def test_it_is_extracted_once_per_kernel_content(tmp_path):
    kernel, other = tmp_path / "vmlinuz", tmp_path / "vmlinuz-none"
    kernel.write_bytes(bzimage(lzma.compress(elf(True), format=lzma.FORMAT_XZ)))
    other.write_bytes(bzimage(lzma.compress(elf(False), format=lzma.FORMAT_XZ)))
    cache = tmp_path / "cache"
    first = pvh.boot_image(kernel, cache)
    assert first is not None and first.read_bytes() == elf(True)
    made = first.stat().st_mtime_ns
    assert pvh.boot_image(kernel, cache) == first and first.stat().st_mtime_ns == made
    assert pvh.boot_image(other, cache) is None
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2  # "none" is remembered too
    assert pvh.boot_image(tmp_path / "missing", cache) is None


@pytest.mark.vm
@pytest.mark.slow
@pytest.mark.beside  # an own QEMU guest, judged from inside: the background lane (conftest)
@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_the_hosts_kernel_boots_through_its_pvh_entry(tmp_path, monkeypatch):
    from hugelab.vm.common.spec import VmSpec
    from hugelab.vm.own.guest import Guest
    from hugelab.vm.own.initramfs import default_kernel, kernel_release

    kernel = default_kernel()
    image = pvh.boot_image(kernel, tmp_path / "cache")
    if image is None:
        pytest.skip(f"{kernel} has no PVH entry or a payload not read here")
    notes = subprocess.run(["readelf", "-n", str(image)], capture_output=True, text=True,
                           check=True).stdout
    assert "(0x00000012)" in notes  # binutils' own reading: XEN_ELFNOTE_PHYS32_ENTRY
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "c"))
    spec = VmSpec(mem_mib=512, vcpus=1, accel="tcg", backing="anon")
    with Guest(spec, state=tmp_path / "state") as g:
        booted = g.argv[g.argv.index("-kernel") + 1]
        assert booted == str(tmp_path / "c" / "pvh" / image.parent.name / "vmlinux")
        release = g.target.exec(["/bin/uname", "-r"]).stdout.strip()
    assert release == kernel_release(kernel)


@pytest.mark.vm
@pytest.mark.slow
def test_the_demo_domain_boots_its_images_kernel_through_the_pvh_entry():
    """The demo domain's XML names a `vmlinux` beside its disk: the image's own kernel
    uncompressed (same bytes as pvh extracts), with binutils' PVH note; its trials' guests run
    the image's release (checked by every domain test that reads the guest, e.g. the examples)."""
    import xml.etree.ElementTree as ET

    from hugelab.vm.common.libvirtd import connect
    from hugelab.vm.domains.demo_domain import define_image_domain
    from hugelab.vm.domains.image import image_dir, load_image
    from tests.vmhelpers import libvirt_missing

    if (why := libvirt_missing()) is not None:
        pytest.skip(why)
    home = define_image_domain("hugelab-demo-debian")
    conn = connect(None)
    try:
        kernel = ET.fromstring(conn.lookupByName("hugelab-demo-debian").XMLDesc()).findtext(
            "os/kernel")
    finally:
        conn.close()
    image = load_image(image_dir())
    assert image is not None
    assert kernel == str(home / "vmlinux"), kernel
    assert (home / "vmlinux").read_bytes() == pvh.elf_kernel(image.kernel.read_bytes())
    if shutil.which("readelf"):
        notes = subprocess.run(["readelf", "-n", kernel], capture_output=True, text=True,
                               check=True).stdout
        assert "(0x00000012)" in notes
