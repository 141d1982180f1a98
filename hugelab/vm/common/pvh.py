"""The kernel image hugelab's own guests boot: the bzImage's uncompressed ELF kernel where it has
a PVH entry (the ELF note XEN_ELFNOTE_PHYS32_ENTRY), which QEMU starts directly through its
PVH option ROM, skipping the bzImage's real-mode setup and self-decompression. Under TCG that
decompression is most of what a boot spends before the guest's clock starts: to the agent's
first answer, a median of 6.71 s with the bzImage against 3.90 s (docs/benchmarks.md, "Own
guests: PVH boot"). Extracted once per kernel into the cache directory, keyed by the bzImage's
content; None (boot the bzImage as given) where its payload is compressed in a way Python's
standard library cannot read (zstd, lz4, lzo) or the kernel has no PVH entry."""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from hugelab.owned import TemplateCache, cache_path, file_sha256
from hugelab.vm.common.bzimage import setup_header

IMAGE = "vmlinux"
XEN_ELFNOTE_PHYS32_ENTRY = 18
PT_NOTE = 4


def _gunzip(data: bytes) -> bytes:
    return zlib.decompressobj(wbits=31).decompress(data)


def _unxz(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)


def _unlzma(data: bytes) -> bytes:
    return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(data)


def _bunzip(data: bytes) -> bytes:
    return bz2.BZ2Decompressor().decompress(data)


# the payload's first bytes -> its decompressor (the kernel's own CONFIG_KERNEL_* formats)
DECOMPRESSORS: tuple[tuple[bytes, Callable[[bytes], bytes]], ...] = (
    (b"\xfd7zXZ\x00", _unxz), (b"\x1f\x8b", _gunzip), (b"BZh", _bunzip), (b"\x5d\x00\x00", _unlzma),
)


def payload(bzimage: bytes) -> bytes | None:
    """The compressed kernel inside an x86 bzImage (boot protocol 2.08 or later: its setup
    header's payload_offset and payload_length); None if it is not one."""
    header = setup_header(bzimage)
    return header.payload(bzimage) if header is not None else None


def decompress(data: bytes) -> bytes | None:
    """The payload decompressed, by its magic; None for a format not read here."""
    for magic, fn in DECOMPRESSORS:
        if data.startswith(magic):
            try:
                return fn(data)
            except (lzma.LZMAError, zlib.error, OSError, EOFError):
                return None
    return None


def has_pvh_entry(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF carries the Xen PVH entry note QEMU boots through."""
    if elf[:4] != b"\x7fELF" or len(elf) < 64 or elf[4] != 2 or elf[5] != 1:
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        if base + 0x28 > len(elf):
            return False
        p_type, = struct.unpack_from("<I", elf, base)
        if p_type != PT_NOTE:
            continue
        offset, = struct.unpack_from("<Q", elf, base + 0x08)
        size, = struct.unpack_from("<Q", elf, base + 0x20)
        if _notes_have_entry(elf[offset:offset + size]):
            return True
    return False


def _notes_have_entry(notes: bytes) -> bool:
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, pos)
        name = notes[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        if name == b"Xen" and kind == XEN_ELFNOTE_PHYS32_ENTRY:
            return True
        pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def elf_kernel(bzimage: bytes) -> bytes | None:
    """The bzImage's ELF kernel if it has a PVH entry; else None."""
    packed = payload(bzimage)
    elf = decompress(packed) if packed is not None else None
    return elf if elf is not None and has_pvh_entry(elf) else None


def boot_image(kernel: Path, cache: Path | None = None) -> Path | None:
    """The uncompressed PVH kernel for the bzImage `kernel`, extracted once into the cache
    directory (`pvh/<its SHA-256>/vmlinux`); None where it has none (boot `kernel` itself).
    A kernel without a PVH entry is remembered as such (an empty directory)."""
    cache = cache if cache is not None else cache_path("pvh")

    def build(tmp: Path) -> None:
        tmp.mkdir(mode=0o700)
        elf = elf_kernel(kernel.read_bytes())
        if elf is not None:
            (tmp / IMAGE).write_bytes(elf)

    try:
        key = file_sha256(kernel)[:32]
        image = TemplateCache(cache).ensure(key, build) / IMAGE
    except OSError:
        return None
    return image if image.is_file() else None
