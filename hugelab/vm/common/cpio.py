"""A minimal `newc` cpio archive writer: what the kernel's initramfs unpacker reads.

Pure Python and uncompressed (decompressing gzip under TCG costs more than reading a few extra
megabytes); hugelab's busybox initrds (busyboxinitrd.py) are written with it.
"""

from __future__ import annotations

import stat


class CpioWriter:
    """Entries added in order, then `finish()` for the archive's bytes."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
               nlink: int = 1) -> None:
        namez = name.encode() + b"\0"
        fields = [self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1],
                  len(namez), 0]
        self._ino += 1
        self._buf += b"070701" + b"".join(b"%08X" % v for v in fields)
        self._buf += namez
        self._pad()
        self._buf += data
        self._pad()

    def _pad(self) -> None:
        self._buf += b"\0" * (-len(self._buf) % 4)

    def dir(self, name: str, perm: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | perm, nlink=2)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, perm: int = 0o600) -> None:
        self._entry(name, stat.S_IFCHR | perm, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0, nlink=1)
        self._buf += b"\0" * (-len(self._buf) % 512)
        return bytes(self._buf)
