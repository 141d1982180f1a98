"""What hugelab's busybox initrds share: a static busybox, the kernel modules they load, and the
start of their /init.

Two initrds are built on this: the one of hugelab's own image-less guests
(hugelab.vm.own.initramfs: the host's root over 9p, the agent as PID 1) and the one of the
Debian image (hugelab.vm.domains.imageinitrd: the root disk, then systemd). `busybox_initrd`
gives the archive with busybox, the modules (`lib/modules/NAME.ko`, loaded in the order of
`/modules.order`) and the device nodes the kernel needs before /init runs; the caller adds its
/init, which starts with `init_prelude`.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from hugelab.errors import VMError
from hugelab.vm.common.cpio import CpioWriter
from hugelab.vm.common.kmodules import modname, module_bytes, modules_of

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox", "/usr/lib/initramfs-tools/bin/busybox")
_PT_INTERP = 3

# The start of every /init: busybox's applets, /proc, /sys, /dev, `say` and `fail` on the
# console, then the modules. {name} prefixes what it says.
_PRELUDE = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() {{ echo "{name}: $*" > /dev/console; }}
fail() {{ say "FATAL: $*"; poweroff -f; }}
while read -r m; do
  insmod "/lib/modules/$m" 2>/dev/null || say "insmod $m failed"
done < /modules.order
"""


def init_prelude(name: str) -> str:
    """The first lines of an /init whose messages start with `name`."""
    return _PRELUDE.format(name=name)


def is_static(path: Path) -> bool:
    """Whether `path` is a 64-bit ELF executable without a program interpreter (the initrd
    has no dynamic loader or libc)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:5] != b"\x7fELF\x02" or len(head) < 64:
                return False
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return not any(struct.unpack_from("<I", table, i * phentsize)[0] == _PT_INTERP
                   for i in range(min(phnum, len(table) // max(phentsize, 1))))


def find_busybox() -> Path:
    """The host's static busybox (busybox-static); a dynamically linked one cannot run as /init."""
    found = [Path(c) for c in BUSYBOX_CANDIDATES if Path(c).exists()]
    if (on_path := shutil.which("busybox")) is not None:
        found.append(Path(on_path))
    for p in found:
        if is_static(p):
            return p
    if found:
        raise VMError(f"{found[0]} is dynamically linked: an initrd needs a static busybox",
                      hint="install it with: apt-get install busybox-static")
    raise VMError("busybox is not installed (the guest initramfs needs a static busybox)",
                  hint="install it with: apt-get install busybox-static")


def busybox_initrd(modules_dir: Path, wanted: tuple[str, ...], *, busybox: Path | None = None,
                   dirs: tuple[str, ...] = ()) -> CpioWriter:
    """An initrd archive, not yet finished: busybox, the `wanted` modules of the kernel in
    `modules_dir` with their dependencies (built-in ones skipped), /dev/console and /dev/null,
    and the directories /init mounts on plus `dirs`."""
    mods = modules_of(modules_dir, wanted)
    w = CpioWriter()
    for d in ("bin", "dev", "proc", "sys", "lib", "lib/modules", *dirs):
        w.dir(d)
    w.chardev("dev/console", 5, 1)
    w.chardev("dev/null", 1, 3, 0o666)
    w.file("bin/busybox", (busybox or find_busybox()).read_bytes(), 0o755)
    names = []
    for rel in mods:
        name = modname(rel) + ".ko"
        w.file(f"lib/modules/{name}", module_bytes(modules_dir / rel))
        names.append(name)
    w.file("modules.order", "".join(f"{n}\n" for n in names).encode())
    return w
