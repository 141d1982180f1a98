"""An x86 bzImage's setup header (the kernel's Documentation/arch/x86/boot.rst): one reader for
what hugelab takes from a kernel image, its release string and its compressed payload."""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class SetupHeader:
    protocol: int  # boot protocol version, e.g. 0x20F for 2.15
    setup_sects: int  # 512-byte sectors of real-mode setup after the boot sector
    version_offset: int  # where the kernel's version string starts in the file
    payload_offset: int | None  # from the protected-mode code (protocol 2.08+), else None
    payload_length: int | None

    def payload(self, image: bytes) -> bytes | None:
        """The compressed kernel the header points at; None before 2.08 or if cut short."""
        if self.payload_offset is None or self.payload_length is None:
            return None
        start = (self.setup_sects + 1) * 512 + self.payload_offset
        end = start + self.payload_length
        return image[start:end] if end <= len(image) else None

    def release(self, image: bytes) -> str:
        """The release (`uname -r`) at the head of the version string; "" if there is none."""
        raw = image[self.version_offset:self.version_offset + 256].split(b"\0", 1)[0]
        return raw.decode("ascii", "replace").split(" ", 1)[0]


def setup_header(image: bytes) -> SetupHeader | None:
    """The header of a bzImage's first bytes (0x250 or more); None if they are not one."""
    if len(image) < 0x210 or image[0x202:0x206] != b"HdrS":
        return None
    protocol = struct.unpack_from("<H", image, 0x206)[0]
    offset = length = None
    if protocol >= 0x208 and len(image) >= 0x250:
        offset, length = struct.unpack_from("<II", image, 0x248)
    return SetupHeader(protocol=protocol, setup_sects=image[0x1F1] or 4,
                       version_offset=struct.unpack_from("<H", image, 0x20E)[0] + 0x200,
                       payload_offset=offset, payload_length=length)
