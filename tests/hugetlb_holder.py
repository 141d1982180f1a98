"""A foreign user of a hugetlb pool, for tests: a process that holds pages the way databases,
DPDK or JVMs do, until its stdin closes or it is killed.

    python -m tests.hugetlb_holder MODE PAGES [--size-kb 2048]

MODE: `touch` maps PAGES anonymous MAP_HUGETLB pages and faults them in (in use); `reserve`
maps them and touches none (reserved: HugePages_Rsvd); `sysv` creates an SHM_HUGETLB segment
of PAGES pages, attaches it and faults it in; `sysv-detached` does the same, then detaches, so
the segment holds its pages with no process attached (it is removed when the holder exits);
`churn` maps PAGES pages for a millisecond and unmaps them for one, again and again (under
overcommit: surplus pages allocated and freed, the pool's counters changing all the time).
Prints one line `ready PID [SHMID]` when it holds its pages, `failed: WHY` and exits 1 when it
cannot get them.

The other side, for tests and benches: `start_holder` starts one and waits for its pages,
`stop_holder` lets it go; `hugetlb_kb`, `mapped_hugetlb_kb` and `segment` read what a holder
holds, from the kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

MAP_HUGETLB = 0x40000
MAP_HUGE_SHIFT = 26
SHM_HUGETLB = 0o4000
SHM_HUGE_SHIFT = 26
IPC_PRIVATE = 0
IPC_CREAT = 0o1000
IPC_RMID = 0
ROOT = Path(__file__).resolve().parents[1]


def churn(pages: int, size_kb: int, stop: threading.Event) -> None:
    """Map `pages` pages for a millisecond, unmap them for one, until `stop` is set."""
    while not stop.is_set():
        m = hold_anon(pages, size_kb, touch=False)
        time.sleep(0.001)
        m.close()
        time.sleep(0.001)


def _size_flag(size_kb: int, shift: int) -> int:
    return (size_kb * 1024).bit_length() - 1 << shift


def hold_anon(pages: int, size_kb: int, touch: bool) -> mmap.mmap:
    length = pages * size_kb * 1024
    m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB
                  | _size_flag(size_kb, MAP_HUGE_SHIFT))
    if touch:
        for off in range(0, length, size_kb * 1024):
            m[off] = 1
    return m


def hold_sysv(pages: int, size_kb: int, detach: bool) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    libc.shmdt.argtypes = (ctypes.c_void_p,)
    length = pages * size_kb * 1024
    shmid = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(length),
                        IPC_CREAT | SHM_HUGETLB | _size_flag(size_kb, SHM_HUGE_SHIFT) | 0o600)
    if shmid < 0:
        raise OSError(ctypes.get_errno(), f"shmget: {os.strerror(ctypes.get_errno())}")
    addr = libc.shmat(shmid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        libc.shmctl(shmid, IPC_RMID, None)
        raise OSError(ctypes.get_errno(), f"shmat: {os.strerror(ctypes.get_errno())}")
    for off in range(0, length, size_kb * 1024):
        ctypes.c_char.from_address(addr + off).value = b"x"
    if detach:
        libc.shmdt(ctypes.c_void_p(addr))
    else:  # removed when its last user detaches: a killed holder leaves nothing behind
        libc.shmctl(shmid, IPC_RMID, None)
    return shmid


@dataclass
class Holder:
    pid: int
    shmid: int | None
    proc: subprocess.Popen[str]

    def hugetlb_kb(self) -> int:
        """HugetlbPages of the holder (faulted-in hugetlb memory it maps)."""
        return hugetlb_kb(self.pid)


def start_holder(mode: str, pages: int, size_kb: int = 2048) -> Holder | None:
    """A holder of `pages` pages, once it holds them; None when it could not get them."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.hugetlb_holder", mode, str(pages),
                             "--size-kb", str(size_kb)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    words = proc.stdout.readline().split()
    if words[:1] != ["ready"]:
        proc.kill()
        proc.wait()
        return None
    return Holder(int(words[1]), int(words[2]) if len(words) > 2 else None, proc)


def stop_holder(h: Holder) -> None:
    """Let go of its pages as a stopping program would (its stdin closed; killed after 10 s)."""
    assert h.proc.stdin is not None
    h.proc.stdin.close()
    try:
        h.proc.wait(10)
    except subprocess.TimeoutExpired:
        h.proc.kill()
        h.proc.wait()


def hugetlb_kb(pid: int) -> int:
    """HugetlbPages of a process (hugetlb memory it maps and has faulted in); 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("HugetlbPages:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def mapped_hugetlb_kb(pid: int, size_kb: int = 2048) -> int:
    """The size of a process's mappings of `size_kb` hugetlb pages, faulted in or not (what it
    has a claim on: reserved at mmap time); 0 when gone."""
    total, size = 0, 0
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("KernelPageSize:") and int(line.split()[1]) == size_kb:
            total += size
    return total


def segment(shmid: int) -> dict[str, int] | None:
    """A System V segment's row of /proc/sysvipc/shm (size and rss in bytes), None if gone."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    header = lines[0].split()
    for line in lines[1:]:
        row = {k: int(v) for k, v in zip(header, line.split(), strict=False)}
        if row["shmid"] == shmid:
            return row
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("touch", "reserve", "sysv", "sysv-detached", "churn"))
    ap.add_argument("pages", type=int)
    ap.add_argument("--size-kb", type=int, default=2048)
    a = ap.parse_args(argv)
    shmid = None
    if a.mode == "churn":
        return _churn_until_eof(a.pages, a.size_kb)
    try:
        if a.mode in ("touch", "reserve"):
            held = hold_anon(a.pages, a.size_kb, a.mode == "touch")  # noqa: F841 - kept mapped
        else:
            shmid = hold_sysv(a.pages, a.size_kb, a.mode == "sysv-detached")
    except OSError as exc:
        print(f"failed: {exc}", flush=True)
        return 1
    print(f"ready {os.getpid()}" + (f" {shmid}" if shmid is not None else ""), flush=True)
    try:
        sys.stdin.read()
    finally:
        if shmid is not None and a.mode == "sysv-detached":
            ctypes.CDLL(None).shmctl(shmid, IPC_RMID, None)
    return 0


def _churn_until_eof(pages: int, size_kb: int) -> int:
    try:
        hold_anon(pages, size_kb, touch=False).close()
    except OSError as exc:
        print(f"failed: {exc}", flush=True)
        return 1
    stop = threading.Event()
    worker = threading.Thread(target=churn, args=(pages, size_kb, stop))
    worker.start()
    print(f"ready {os.getpid()}", flush=True)
    try:
        sys.stdin.read()
    finally:
        stop.set()
        worker.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
