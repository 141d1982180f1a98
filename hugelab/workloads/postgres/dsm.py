"""PostgreSQL's dynamic shared memory (`dynamic_shared_memory_type = posix`, its default on
Linux: files /dev/shm/PostgreSQL.<handle>) left by a killed postmaster. A server that stops
removes its own; a killed one (a run killed: its parent-death signal) leaves its control
segment and the segments that one lists. PostgreSQL removes them when the next postmaster
starts on the same data directory (sysv_shmem.c, dsm.c: the control segment's handle is in the
System V header); hugelab removes the data directory instead, so it removes them first, from
the same records, each checked by its magic number and size before it is believed."""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_RDONLY = 0o10000
HEADER_MAGIC = 679834894  # PGShmemMagic: int32 magic, pid_t, Size totalsize, Size freeoffset,
HEADER = struct.Struct("=iiQQI4xQQQ")  # dsm_handle dsm_control, void *index, dev_t, ino_t
CONTROL_MAGIC = 0x9A503D32  # PG_DYNSHMEM_CONTROL_MAGIC: uint32 magic, nitems, maxitems; items
CONTROL_HEAD = struct.Struct("=III4x")
ITEM = struct.Struct("=IIQQQ?7x")  # handle, refcnt, first_page, npages, private, pinned (14+)
MAX_CONTROL = CONTROL_HEAD.size + 65536 * ITEM.size  # maxitems is 64 + 5 per connection


def name(handle: int) -> Path:
    return SHM_DIR / f"PostgreSQL.{handle}"


def control_handle(header: bytes, data: Path) -> int | None:
    """The control segment's handle from a System V header, if it is PostgreSQL's and for the
    data directory `data` (its device and inode, as PostgreSQL checks); None else (pure but for
    the stat)."""
    if len(header) < HEADER.size:
        return None
    magic, _pid, _total, _free, handle, _index, dev, inode = HEADER.unpack_from(header)
    try:
        st = os.stat(data)
        ours = (st.st_dev, st.st_ino) == (dev, inode)
    except OSError:
        ours = False
    return handle if magic == HEADER_MAGIC and handle and ours else None


def listed(control: bytes) -> list[int]:
    """The live segments a control segment lists, as PostgreSQL's cleanup reads them: refcnt
    not 0, not a slice of the main region (odd handles); [] when its magic or size is not
    PostgreSQL 14+'s (pure)."""
    if len(control) < CONTROL_HEAD.size:
        return []
    magic, nitems, maxitems = CONTROL_HEAD.unpack_from(control)
    if magic != CONTROL_MAGIC or len(control) != CONTROL_HEAD.size + maxitems * ITEM.size \
            or nitems > maxitems:
        return []
    out = []
    for i in range(nitems):
        handle, refcnt, *_ = ITEM.unpack_from(control, CONTROL_HEAD.size + i * ITEM.size)
        if refcnt and not handle & 1:
            out.append(handle)
    return out


def attached_header(shmid: int) -> bytes:
    """The first bytes of System V segment `shmid`, attached read-only for the moment; b''
    when it cannot be."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    addr = libc.shmat(shmid, None, SHM_RDONLY)
    if addr in (None, ctypes.c_void_p(-1).value):
        return b""
    try:
        return ctypes.string_at(addr, HEADER.size)
    finally:
        libc.shmdt(addr)


def _theirs(path: Path, uid: int) -> bool:
    """Whether `path` is a regular file of `uid` (not a link, not another user's)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid


def _read_control(path: Path, uid: int) -> bytes:
    """The control segment's bytes, only from a regular file of `uid` of at most MAX_CONTROL
    bytes (the System V header is the server account's to write: root follows no link and
    reads no FIFO it names); b'' else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size > MAX_CONTROL:
            return b""
        return f.read(MAX_CONTROL)


def drop(header: bytes, data: Path, uid: int) -> list[str]:
    """Remove the dynamic shared memory of the killed postmaster whose System V header is
    `header` (a segment of `uid`, the server's account): the segments its control segment
    lists, then the control segment, each only a regular file of `uid`; what was done."""
    handle = control_handle(header, data)
    if handle is None:
        return []
    control = _read_control(name(handle), uid)
    if not control:
        return []
    done = []
    for h in [*listed(control), handle]:
        if not _theirs(name(h), uid):
            continue
        try:
            name(h).unlink()
        except OSError:
            continue
        done.append(f"removed PostgreSQL dynamic shared memory {name(h)}")
    return done
