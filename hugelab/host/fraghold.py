"""The fragment holder: a process that breaks free memory into pieces and holds it so.

    python -m hugelab.host.fraghold --token T --target 0.9 [--max-kb N] [--reserve-kb N]
                                    [--chunk-kb N] [--seed S] [--no-pin]

Started by `hugelab.host.fragment.Fragmenter` (which records it first); it is not a command
for users. How it fragments, the way mmtests' thpchallenge and a long-running host do:

1. It faults in anonymous 4 KiB pages (MADV_NOHUGEPAGE, MADV_POPULATE_WRITE), a chunk at a
   time; `--threads N` splits each chunk among N threads (0: one a CPU, up to 8), which the
   kernel serves side by side (their calls release the GIL). One by default: with two here,
   tests/test_fragment_host.py's second holder broke no 2 MiB block (not yet understood). The buddy allocator serves small pages
   from its smallest free blocks first, so the free fragments go first, then 2 MiB blocks
   are split.
2. After each chunk it reads /proc/buddyinfo and predicts the unusable free space index once
   all but its kept pages are freed: the free blocks of order 9 and above that are left stay
   as they are, and every page it frees returns to the free lists below order 9. It stops at
   the target, at `--max-kb`, or when MemAvailable would fall below `--reserve-kb`.
3. From /proc/self/pagemap (root: the page frame numbers) it keeps one page per physical
   2 MiB block it touched (which one, by `--seed`) and frees the rest with MADV_DONTNEED: no
   block it touched can be whole again while the holder lives. It holds 4 KiB per 2 MiB block
   touched (1/512 of what it faulted on a fresh host; more on an aged one, whose small free
   pieces lie scattered over many blocks).
4. Unless `--no-pin`, each kept page is also referenced by a pipe (vmsplice, never read), so
   compaction cannot migrate it away (a page with an extra reference does not migrate): the
   state holds while trials run, as pages the kernel pinned for I/O or slab would hold it.

With `--compact` it first compacts memory (/proc/sys/vm/compact_memory), so the state it starts
from, and so the state it makes, depends little on what ran before. It then prints one JSON line (what it did, the buddyinfo before and after) and waits. It
frees everything when its standard input closes (its hugelab ended it, or hugelab died: the
pipe's only writer is gone) or on SIGTERM/SIGKILL: nothing it holds outlives the process.

Kernels that initialise memory lazily (deferred struct pages: /proc/meminfo's MemFree far above
buddyinfo's free pages) hand out fresh 2 MiB blocks when a zone runs short, which would undo
the state: `--prime` first faults in and frees memory until that gap is gone.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import json
import mmap
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from hugelab.host import buddyinfo

MADV_POPULATE_WRITE = 23  # Linux 5.14+
F_SETPIPE_SZ = 1031
PFN_MASK = (1 << 55) - 1
PRESENT = 1 << 63
PIPE_PAGES = 256  # 1 MiB pipes: within the default fs.pipe-max-size
FILL_THREADS_MAX = 8  # threads that fault a chunk in side by side, at most
FILL_PART = 4 << 20  # and at least this much each

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def meminfo_kb(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def deferred_kb() -> int:
    """Free memory the kernel counts but has not put in its free lists yet (deferred init)."""
    return max(0, meminfo_kb("MemFree") - buddyinfo.read().free_kb())


def populate(addr: int, nbytes: int) -> None:
    """Fault in [addr, addr + nbytes) for writing (MADV_POPULATE_WRITE); on kernels without
    it (EINVAL), by writing it with memset: at memory speed either way, the GIL released."""
    if _libc.madvise(addr, nbytes, MADV_POPULATE_WRITE) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:
            raise OSError(err, f"fraghold: MADV_POPULATE_WRITE: {os.strerror(err)}")
        ctypes.memset(addr, 1, nbytes)


def fill_threads(asked: int = 0) -> int:
    """`asked` threads, or by default one a CPU this process may run on, up to 8."""
    return asked or min(FILL_THREADS_MAX, len(os.sched_getaffinity(0)))


class Region:
    """One reserved anonymous mapping, faulted in a chunk at a time with small pages."""

    def __init__(self, size: int) -> None:
        self.page = mmap.PAGESIZE
        self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                             | getattr(mmap, "MAP_NORESERVE", 0x4000))
        self.map.madvise(mmap.MADV_NOHUGEPAGE)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.used = 0

    def grow(self, nbytes: int, threads: int = 1) -> bool:
        """Fault in the next `nbytes`, split among up to `threads` threads (the GIL released
        while the kernel works, so each faults in on its own CPU); False at the end."""
        nbytes = min(nbytes, len(self.map) - self.used)
        if nbytes <= 0:
            return False
        n = max(1, min(threads, nbytes // FILL_PART))
        part = -(-nbytes // n // self.page) * self.page
        spans = [(self.base + off, min(part, self.used + nbytes - off))
                 for off in range(self.used, self.used + nbytes, part)]
        if len(spans) == 1:
            populate(*spans[0])
        else:
            with ThreadPoolExecutor(len(spans)) as ex:
                list(ex.map(lambda span: populate(*span), spans))  # raises what a thread did
        self.used += nbytes
        return True

    def pfns(self, first: int = 0) -> np.ndarray:
        """The page frame numbers of the pages faulted in, from page index `first` on; -1 for a
        page that is not present now (being migrated, which a moment later it is not)."""
        n = self.used // self.page - first
        for _ in range(5):
            with open("/proc/self/pagemap", "rb") as f:
                f.seek((self.base // self.page + first) * 8)
                raw = np.frombuffer(f.read(n * 8), dtype=np.uint64)
            present = (raw & np.uint64(PRESENT)) != 0
            if present.all():
                break
            time.sleep(0.01)
        pfns = (raw & np.uint64(PFN_MASK)).astype(np.int64)
        if n and not pfns.any():
            raise SystemExit("fraghold: pagemap shows no page frame numbers (needs root)")
        return np.where(present, pfns, -1)

    def keep_only(self, kept: np.ndarray) -> None:
        """MADV_DONTNEED every page but `kept` (sorted page indices)."""
        start = 0
        for k in [*kept.tolist(), self.used // self.page]:
            if k > start:
                self.map.madvise(mmap.MADV_DONTNEED, start * self.page, (k - start) * self.page)
            start = k + 1

    def release(self) -> None:
        self.map.madvise(mmap.MADV_DONTNEED, 0, self.used)
        self.used = 0


def choose_kept(pfns: np.ndarray, order: int, seed: int,
                known: np.ndarray | None = None) -> np.ndarray:
    """One page index per physical block of `order` among `pfns`, chosen by `seed` (the page
    of least random key in its block), but none in a `known` block (held already); sorted.

    A block's pages lie in runs of consecutive indices (the allocator hands out a split block
    page by page), so the least key of each run is found in one pass, and only the runs, not
    the pages, are sorted by block: the same pages as a sort of every page by (block, key),
    in milliseconds where that took over a second for 16 GiB."""
    blocks = np.where(pfns >= 0, pfns >> order, -1)
    key = np.random.default_rng(seed).random(len(pfns))
    if not len(blocks):
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
    runs = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(blocks)]))
    least = np.flatnonzero(key == np.minimum.reduceat(key, starts)[runs])
    least = least[np.r_[True, runs[least][1:] != runs[least][:-1]]]  # a tie: the first
    idx = least[np.lexsort((key[least], blocks[least]))]
    first = np.r_[True, blocks[idx][1:] != blocks[idx][:-1]]
    kept = idx[first & (blocks[idx] >= 0)]
    if known is not None and len(known):
        kept = kept[~np.isin(blocks[kept], known)]
    return np.sort(kept)


def predicted(freed_kb: int) -> float | None:
    """The unusable index once `freed_kb` more returns to the free lists below order 9."""
    now = buddyinfo.read()
    return buddyinfo.unusable(now.free_kb() + freed_kb, now.free_kb(now.order))


def fill(region: Region, args: argparse.Namespace, known: np.ndarray) -> tuple[str, np.ndarray]:
    """Fault in chunks until the predicted index reaches the target; why it stopped, and the
    blocks touched that are not in `known` (blocks an earlier round already holds a page of).
    The blocks seen are marked in a bitmap by block number, so each chunk costs its own pages'
    worth of work (not a sort of all the blocks seen so far, for each chunk)."""
    chunk, threads, order = args.chunk_kb * 1024, fill_threads(args.threads), buddyinfo.huge_order()
    seen = _mark(np.zeros(0, dtype=bool), known)
    count = 0  # blocks seen that are not in `known`
    while True:
        if meminfo_kb("MemAvailable") - args.chunk_kb < args.reserve_kb:
            return "reserve", _new_blocks(seen, known)
        first = region.used // region.page
        if not region.grow(chunk, threads):
            return "max", _new_blocks(seen, known)
        pfns = region.pfns(first)
        touched = np.unique(pfns[pfns >= 0] >> order)
        seen = _room(seen, touched)
        new = touched[~seen[touched]]
        seen[new] = True
        count += len(new)
        guess = predicted(region.used // 1024 - count * region.page // 1024)
        if guess is not None and guess >= args.target:
            return "target", _new_blocks(seen, known)


def _room(seen: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """`seen` (a bitmap by block number), long enough for `blocks` (doubled as it grows)."""
    top = int(blocks.max()) + 1 if len(blocks) else 0
    if top <= len(seen):
        return seen
    return np.concatenate([seen, np.zeros(max(top - len(seen), len(seen)), dtype=bool)])


def _mark(seen: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    seen = _room(seen, blocks)
    seen[blocks] = True
    return seen


def _new_blocks(seen: np.ndarray, known: np.ndarray) -> np.ndarray:
    blocks = np.flatnonzero(seen)
    return blocks[~np.isin(blocks, known)]


def compact() -> float:
    """Compact all memory first (a start that does not depend on what ran before); seconds."""
    t0 = time.monotonic()
    try:
        with open("/proc/sys/vm/compact_memory", "w") as f:
            f.write("1")
    except OSError:
        return 0.0
    return round(time.monotonic() - t0, 3)


def prime(args: argparse.Namespace) -> int:
    """Fault in and free memory until the kernel has no deferred memory left; KiB faulted."""
    if deferred_kb() < args.chunk_kb * 4:
        return 0
    room = max(0, meminfo_kb("MemAvailable") - args.reserve_kb) * 1024
    r = Region(room)
    while deferred_kb() >= args.chunk_kb * 4 and r.grow(args.chunk_kb * 1024):
        pass
    done = r.used // 1024
    r.map.close()
    time.sleep(0.5)
    return done


def pin(region: Region, kept: np.ndarray) -> list[int]:
    """A reference to each kept page from pipes nobody reads (vmsplice): compaction cannot
    move them. The pipes' file descriptors (closed at exit, which drops the references)."""
    libc = ctypes.CDLL(None, use_errno=True)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    fds: list[int] = []
    addrs = [region.base + int(k) * region.page for k in kept]
    while addrs:
        r, w = os.pipe()
        fds += [r, w]
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_PAGES * region.page)
        batch = addrs[:PIPE_PAGES]
        iov = (IoVec * len(batch))(*[IoVec(a, region.page) for a in batch])
        n = libc.vmsplice(w, iov, len(batch), 0)
        if n <= 0:
            raise SystemExit(f"fraghold: vmsplice failed: {os.strerror(ctypes.get_errno())}")
        addrs = addrs[n // region.page:]
    return fds


def one_round(args: argparse.Namespace, known: np.ndarray, seed: int) -> dict[str, Any]:
    """Fault in, keep one page per new block, free the rest, pin what is kept."""
    region = Region(args.max_kb * 1024)
    t0 = time.monotonic()
    stopped, _blocks = fill(region, args, known)
    fill_s = round(time.monotonic() - t0, 3)
    pfns = region.pfns()
    kept = choose_kept(pfns, buddyinfo.huge_order(), seed, known)
    fds = pin(region, kept) if args.pin else []  # first: compaction may move a page not pinned
    region.keep_only(kept)
    return {"stopped": stopped, "touched_kb": region.used // 1024, "kept": len(kept),
            "fill_s": fill_s, "blocks": pfns[kept] >> buddyinfo.huge_order(), "region": region, "fds": fds}


SETTLE_S = 3.0
PCP_LEFT_KB = 32 << 10
REFRESH_PASS = 32  # writes to stat_refresh between two readings of the per-CPU lists
PCP_FLOOR_STEP_KB = 2 << 10  # a pass that drains less: the lists are down to what they keep


def pcp_kb() -> int:
    """Free pages in the per-CPU lists (/proc/zoneinfo's pagesets), which buddyinfo omits."""
    with open("/proc/zoneinfo") as f:
        return 4 * sum(int(line.split()[1]) for line in f if line.strip().startswith("count:"))


def _refresh(times: int) -> bool:
    """Write /proc/sys/vm/stat_refresh `times` times; False where it cannot be written."""
    try:
        for _ in range(times):
            with open("/proc/sys/vm/stat_refresh", "w") as f:
                f.write("1")
    except OSError:
        return False
    return True


def settle(max_s: float = SETTLE_S) -> buddyinfo.Snapshot:
    """Buddyinfo once the pages freed a moment ago have left the per-CPU lists. The kernel
    drains them over seconds to minutes (their size is tuned up while a process frees much:
    2 GiB here after a 5 GiB release); each write to /proc/sys/vm/stat_refresh, which only
    folds the per-CPU statistics, decays them one step (a CPU's list sheds up to 2016 pages
    a zone, once its limit, lowered an eighth a step, is below what it holds). Draining ends
    when a pass of writes no longer lowers them: the lists are down to the floor the kernel
    keeps (40-80 MiB here, under load, which no write lowers), in milliseconds."""
    deadline = time.monotonic() + max_s
    left = pcp_kb()
    while left > PCP_LEFT_KB and time.monotonic() < deadline and _refresh(REFRESH_PASS):
        now = pcp_kb()
        if left - now < PCP_FLOOR_STEP_KB:
            break
        left = now
    return buddyinfo.read()


def run(args: argparse.Namespace, held: list[Any]) -> dict[str, Any]:
    """Rounds until the measured index is within `--tolerance` of the target (a round's
    prediction misses when others free memory meanwhile); `held` keeps the rounds alive.
    The last round's reading, taken as the holder gets ready, is the state made (`after`)."""
    t0 = time.monotonic()
    primed_kb = prime(args) if args.prime else 0
    compact_s = compact() if args.compact else None
    before = after = settle()
    known = np.zeros(0, dtype=np.int64)
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        t1 = time.monotonic()
        r = one_round(args, known, args.seed + i)
        held.append(r)
        known = np.union1d(known, r["blocks"])
        t2 = time.monotonic()
        after = settle()
        rounds.append({k: r[k] for k in ("stopped", "touched_kb", "kept", "fill_s")}
                      | {"unusable": after.unusable(), "keep_s": round(t2 - t1 - r["fill_s"], 3),
                         "settle_s": round(time.monotonic() - t2, 3)})
        if r["stopped"] != "target" or (rounds[-1]["unusable"] or 0) >= args.target - args.tolerance:
            break
    kept = sum(r["kept"] for r in rounds)
    return {"ready": True, "pid": os.getpid(), "stopped": rounds[-1]["stopped"],
            "touched_kb": sum(r["touched_kb"] for r in rounds), "primed_kb": primed_kb,
            "compact_s": compact_s, "kept_pages": kept, "held_kb": kept * mmap.PAGESIZE // 1024,
            "pinned": bool(args.pin), "rounds": rounds,
            "seconds": round(time.monotonic() - t0, 3), "deferred_kb": deferred_kb(),
            "before": before.to_json(), "after": after.to_json()}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fraghold")
    p.add_argument("--token", required=True)
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--max-kb", type=int, default=1 << 30)
    p.add_argument("--reserve-kb", type=int, default=1 << 20)
    p.add_argument("--chunk-kb", type=int, default=64 << 10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-pin", dest="pin", action="store_false")
    p.add_argument("--prime", action="store_true")
    p.add_argument("--compact", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1,
                   help="fault in with N threads (0: one a CPU, up to 8; see fill_threads)")
    p.add_argument("--tolerance", type=float, default=0.01)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    held: list[Any] = []
    report = run(args, held)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    while sys.stdin.buffer.read(4096):  # hold until the owner closes the pipe or dies
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
