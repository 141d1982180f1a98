"""Find and measure a trial's whole process tree through /proc. Standard library only.

The same file runs on the host (imported as hugelab.trial.procscan) and inside hugelab's guests
(copied into the initramfs beside the agent), so guest-side evidence is measured exactly like
host-side evidence.

A tree is the set of processes that belong to a trial: those in the sessions the trial started
(every workload process is started in a new session, so its stress-ng workers, make's compilers
and a server's children share its session id) and those carrying the trial's token in their
environment (which survives a `setsid()` or a daemon's double fork).

`TreeSampler` samples the tree a few times per second while the trial runs and keeps, for every
field, the peak of the tree's total: from /proc/PID/status at every sample, the RSS (VmRSS) and
the page tables (VmPTE), counters that cost the same at any page size; from
`/proc/PID/smaps_rollup`, a walk of the page tables and so read within a CPU budget
(TreeSampler), Anonymous, AnonHugePages, ShmemPmdMapped, FilePmdMapped, Shared_Hugetlb,
Private_Hugetlb and Pss (one walk's anonymous memory and THP read together, as the evidence
weighs them); for Rss, Pss and page tables also the mean over the samples (`rss_kb_mean`, ...:
what the memory costs over the trial, not only at its worst), the hugetlb pages by page size
(from /proc/PID/smaps, read only for processes that map hugetlb pages), the number of
processes, each process's own THP mode (`THP_enabled` of /proc/PID/status, counted by command
name: a per-process `process_thp` shows there), the THP outside madvised mappings (from smaps,
read only for processes that have THP), and the pages each hugetlb pool lost since the start
(free_hugepages down or resv_hugepages up: host-wide, so they explain rather than prove).
Where members hold shared memory (RssShmem in their status), each object behind it is read
once (`shmem_objects_kb`, from /proc/PID/maps and a stat of map_files) and `unique_kb` is the
tree's RSS with every such object counted once, at its allocated size.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable

try:
    from hugelab.walks import Walks
except ImportError:  # in hugelab's own guests: the initramfs copies walks.py beside this file
    from walks import Walks  # type: ignore[no-redef]

ROLLUP_FIELDS = {"Rss": "rss_kb", "Pss": "pss_kb", "Anonymous": "anon_kb",
                 "AnonHugePages": "anon_huge_kb",
                 "ShmemPmdMapped": "shmem_pmd_kb", "FilePmdMapped": "file_pmd_kb",
                 "Shared_Hugetlb": "shared_hugetlb_kb", "Private_Hugetlb": "private_hugetlb_kb"}
MEAN_FIELDS = ("rss_kb", "pss_kb", "pte_kb")  # also averaged over the samples: <name>_mean
TOKEN_VAR = "HUGELAB_TRIAL"
DEFAULT_INTERVAL_S = 0.25


def parse_kb_fields(text: str) -> dict[str, int]:
    """`Name:  123 kB` lines -> {"Name": 123} (smaps_rollup, one smaps mapping, status)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB" and parts[0].endswith(":"):
            try:
                out[parts[0][:-1]] = int(parts[1])
            except ValueError:
                continue
    return out


def hugetlb_by_page_size(smaps_text: str) -> dict[int, int]:
    """KiB of hugetlb memory mapped per page size (KiB), from a full /proc/PID/smaps text."""
    out: dict[int, int] = {}
    page = 4
    for line in smaps_text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            if parts[0] == "KernelPageSize:":
                page = int(parts[1])
            elif parts[0] in ("Private_Hugetlb:", "Shared_Hugetlb:") and int(parts[1]):
                out[page] = out.get(page, 0) + int(parts[1])
    return out


def unadvised_thp_kb(smaps_text: str) -> int:
    """KiB of AnonHugePages in mappings without MADV_HUGEPAGE (no `hg` in VmFlags), from a full
    /proc/PID/smaps text: what a process under PR_THP_DISABLE_EXCEPT_ADVISED must not have."""
    total, huge = 0, 0
    for line in smaps_text.splitlines():
        if line.startswith("AnonHugePages:"):
            parts = line.split()
            huge = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        elif line.startswith("VmFlags:"):
            if huge and "hg" not in line.split()[1:]:
                total += huge
            huge = 0
    return total


def page_table_kb(status_text: str) -> int:
    """VmPTE of a /proc/PID/status text: the KiB of page tables the process's memory needs
    (0 when absent)."""
    for line in status_text.splitlines():
        if line.startswith("VmPTE:"):
            value = line.split()[1:]
            return int(value[0]) if value and value[0].isdigit() else 0
    return 0


def thp_enabled(status_text: str) -> int | None:
    """THP_enabled of a /proc/PID/status text (1, or 0 under PR_SET_THP_DISABLE); None when
    the kernel does not say (before Linux 6.0)."""
    for line in status_text.splitlines():
        if line.startswith("THP_enabled:"):
            value = line.split()[1:]
            return int(value[0]) if value and value[0].isdigit() else None
    return None


def _comm(pid: int, proc: str, read: Callable[[str], str | bytes | None]) -> str:
    text = read(f"{proc}/{pid}/comm")
    return text.strip() if isinstance(text, str) else "?"


def stat_fields(text: str) -> tuple[int, int, int, int]:
    """(ppid, pgrp, session, starttime) from a /proc/PID/stat text."""
    f = text.rsplit(")", 1)[1].split()
    return int(f[1]), int(f[2]), int(f[3]), int(f[19])


def _read(path: str, mode: str = "r") -> str | bytes | None:
    try:
        with open(path, mode) as f:
            return f.read()  # type: ignore[no-any-return]
    except OSError:
        return None


def has_token(pid: int, token: str, proc: str = "/proc") -> bool:
    env = _read(f"{proc}/{pid}/environ", "rb")
    return isinstance(env, bytes) and f"{TOKEN_VAR}={token}".encode() in env.split(b"\0")


def _live_stat(pid: int, proc: str) -> tuple[int, int, int, int] | None:
    """stat_fields of a live process; None when it is gone or a zombie."""
    text = _read(f"{proc}/{pid}/stat")
    if not isinstance(text, str):
        return None
    try:
        if text.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return None
        return stat_fields(text)
    except (IndexError, ValueError):
        return None


def _our_sessions(sessions: Iterable[int] | dict[int, int | None], proc: str) -> set[int]:
    """The session ids that are still ours. With leader start times ({sid: starttime}), a sid
    whose number now belongs to another live process (a reused pid) is no longer ours."""
    if not isinstance(sessions, dict):
        return set(sessions)
    out = set()
    for sid, start in sessions.items():
        now = _live_stat(sid, proc)
        if now is None or start is None or now[3] == start:
            out.add(sid)
    return out


def find_members(sessions: Iterable[int] | dict[int, int | None], token: str | None = None,
                 *, since: int = 0, proc: str = "/proc") -> list[int]:
    """Live pids (zombies excluded) started at or after clock tick `since` that are in one of
    `sessions` or carry `token` in their environment."""
    sids = _our_sessions(sessions, proc)
    me = os.getpid()
    out = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        fields = _live_stat(pid, proc)
        if fields is None:
            continue
        sid, start = fields[2], fields[3]
        if start >= since and (sid in sids or (token and has_token(pid, token, proc))):
            out.append(pid)
    return out


ROLLUP_ONLY = {k: v for k, v in ROLLUP_FIELDS.items() if k != "Rss"}
STATUS_FIELDS = {"VmRSS": "rss_kb", "VmPTE": "pte_kb"}


def measure(pids: Iterable[int], proc: str = "/proc",
            read: Callable[[str], str | bytes | None] | None = None,
            thp_detail: bool | None = None,
            walk: bool | Callable[[int], bool] = True) -> dict[str, object]:
    """One sample: the tree's RSS and page tables (status: counters, cheap at any page size),
    THP modes, and with `walk` its smaps_rollup totals (anonymous memory and THP among them)
    and hugetlb KiB per page size (walks of the page tables: 512 times the entries for 4 KiB
    pages as for THP), with the CPU the smaps_rollup reads took (`walk_cpu_s`). `walk` may be
    a function of the tree's RSS (KiB, from the status counters, all read first) that decides
    (hugelab.walks). `read` reads a file (default: this machine's; a user's guest passes one
    that reads through its agent). `thp_detail`: also each process's THP mode (status, comm)
    and, for processes with THP, the THP outside madvised mappings (full smaps); default: only
    when reading this machine's files, where it is cheap."""
    thp_detail = read is None if thp_detail is None else thp_detail
    local = read is None  # shared memory objects are stat'ed, so only on this machine
    read = read or _read
    live = _statuses(pids, proc, read, thp_detail)
    walking = walk(sum(f["VmRSS"] for _pid, _comm, f, _on in live)) if callable(walk) else walk
    tot: dict[str, int] = dict.fromkeys(STATUS_FIELDS.values(), 0)
    if walking:
        tot.update(dict.fromkeys(ROLLUP_ONLY.values(), 0))
    by_size: dict[int, int] = {}
    thp_on: dict[str, int] = {}   # command name -> processes with THP_enabled 1
    thp_off: dict[str, int] = {}  # ... with THP_enabled 0
    unadvised: dict[str, int] = {}  # command name -> KiB of THP outside madvised mappings
    walk_s = 0.0
    for pid, comm, fields, enabled in live:
        if enabled is not None:
            counts = thp_on if enabled else thp_off
            counts[comm] = counts.get(comm, 0) + 1
        if walking:  # its Rss read with its Pss: one moment, so Pss <= Rss holds
            rollup, spent = _walk(pid, proc, read, comm if thp_detail else None, tot, by_size,
                                  unadvised)
            walk_s += spent
            if "Rss" in rollup:  # (gone since its status: that read stands)
                fields["VmRSS"] = rollup["Rss"]
        for src, dst in STATUS_FIELDS.items():
            tot[dst] += fields.get(src, 0)
    out: dict[str, object] = {**tot, "processes": len(live), "thp_enabled_by_comm": thp_on,
                              "thp_disabled_by_comm": thp_off}
    if local:
        out.update(_shared_once(live, proc, tot["rss_kb"]))
    if walking:
        out.update({"hugetlb_by_page_kb": by_size, "unadvised_thp_kb_by_comm": unadvised,
                    "walk_cpu_s": walk_s})
    return out


SHMEM_NAMES = ("/dev/zero (deleted)", "/SYSV", "/memfd:")  # mmap(MAP_SHARED|MAP_ANONYMOUS),
# System V segments and memfds, on the kernel's own shmem mount (in no mountinfo)


def tmpfs_devices(proc: str = "/proc") -> set[tuple[int, int]]:
    """(major, minor) of every tmpfs mount this process sees (/proc/self/mountinfo)."""
    text = _read(f"{proc}/self/mountinfo")
    out = set()
    for line in text.splitlines() if isinstance(text, str) else ():
        fields = line.split()
        if " - tmpfs " in line and len(fields) > 2 and ":" in fields[2]:
            major, _, minor = fields[2].partition(":")
            out.add((int(major), int(minor)))
    return out


def shmem_objects(pid: int, into: dict[tuple[int, int, int], int], tmpfs: set[tuple[int, int]],
                  proc: str = "/proc") -> None:
    """Each shared memory object a process maps, into `into` as {(major, minor, inode): KiB
    allocated}: an anonymous shared mapping, a System V segment, a memfd, or a file on a
    tmpfs (under /dev/shm, or /tmp where that is a tmpfs), shared or private: every page whose
    RSS the kernel counts as RssShmem. Its size is the object's allocated blocks from a stat of
    /proc/PID/map_files/RANGE (root only): every page it holds, whether or not a live process
    maps it (a PostgreSQL backend that prewarmed shared buffers and exited). Files on disk and
    hugetlbfs objects (their block size is the huge page's; the pool counts them) are left
    out; an object already in `into` is not read again."""
    text = _read(f"{proc}/{pid}/maps")
    for line in text.splitlines() if isinstance(text, str) else ():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or parts[4] == "0" or ":" not in parts[3]:
            continue
        major, _, minor = parts[3].partition(":")
        key = (int(major, 16), int(minor, 16), int(parts[4]))
        if key in into or not (key[:2] in tmpfs or (parts[5].endswith("(deleted)") and
                                                    parts[5].startswith(SHMEM_NAMES))):
            continue
        try:
            st = os.stat(f"{proc}/{pid}/map_files/{parts[0]}")
        except OSError:
            continue
        if st.st_blksize <= 4096:
            into[key] = st.st_blocks // 2  # 512-byte blocks


def _shared_once(live: list[tuple[int, str, dict[str, int], int | None]], proc: str,
                 rss_kb: int) -> dict[str, int]:
    """The tree's memory with every shared memory object counted once (`unique_kb`): its RSS
    less the shmem pages in it (RssShmem: each sharer's counted again) plus each object's
    allocated size (`shmem_objects_kb`); {} where no member maps shmem."""
    objects: dict[tuple[int, int, int], int] = {}
    tmpfs: set[tuple[int, int]] | None = None
    in_rss = 0
    for pid, _comm, fields, _on in live:
        if fields.get("RssShmem", 0) > 0:
            in_rss += fields["RssShmem"]
            tmpfs = tmpfs_devices(proc) if tmpfs is None else tmpfs
            shmem_objects(pid, objects, tmpfs, proc)
    if not in_rss:
        return {}
    held = sum(objects.values())
    return {"shmem_objects_kb": held, "unique_kb": max(rss_kb - in_rss, 0) + held}


def _statuses(pids: Iterable[int], proc: str, read: Callable[[str], str | bytes | None],
              thp_detail: bool) -> list[tuple[int, str, dict[str, int], int | None]]:
    """(pid, command name, status counters, THP_enabled) of each member still alive (a
    zombie or a kernel thread has no VmRSS); name and mode only with `thp_detail`."""
    out = []
    for pid in pids:
        status = read(f"{proc}/{pid}/status")
        fields = parse_kb_fields(status) if isinstance(status, str) else {}
        if "VmRSS" not in fields:
            continue
        comm = _comm(pid, proc, read) if thp_detail else "?"
        enabled = thp_enabled(status) if isinstance(status, str) and thp_detail else None
        out.append((pid, comm, fields, enabled))
    return out


def _walk(pid: int, proc: str, read: Callable[[str], str | bytes | None], comm: str | None,
          tot: dict[str, int], by_size: dict[int, int], unadvised: dict[str, int]
          ) -> tuple[dict[str, int], float]:
    """One process's smaps_rollup into `tot`; its smaps, read where it maps hugetlb pages (or,
    with a `comm` for THP detail, THP), into `by_size` and `unadvised`; the rollup's fields, and
    the CPU its read took (the kernel's walk of the page tables, whose cost is the page size's:
    the smaps read after it and the parsing are the huge-page process's, and cheap)."""
    t0 = time.thread_time()
    text = read(f"{proc}/{pid}/smaps_rollup")
    spent = time.thread_time() - t0
    fields = parse_kb_fields(text) if isinstance(text, str) else {}
    for src, dst in ROLLUP_ONLY.items():
        tot[dst] += fields.get(src, 0)
    hugetlb = fields.get("Private_Hugetlb", 0) or fields.get("Shared_Hugetlb", 0)
    if hugetlb or (comm is not None and fields.get("AnonHugePages", 0)):
        text = read(f"{proc}/{pid}/smaps")
        smaps = text if isinstance(text, str) else ""
        for size, kb in hugetlb_by_page_size(smaps).items():
            by_size[size] = by_size.get(size, 0) + kb
        if comm is not None and fields.get("AnonHugePages", 0):
            unadvised[comm] = unadvised.get(comm, 0) + unadvised_thp_kb(smaps)
    return fields, spent


def pool_counts(sysfs: str = "/sys/kernel/mm/hugepages") -> dict[str, tuple[int, int]]:
    """{page size in KiB: (free_hugepages, resv_hugepages)} of every hugetlb pool (host-wide)."""
    out: dict[str, tuple[int, int]] = {}
    try:
        entries = os.listdir(sysfs)
    except OSError:
        return out
    for entry in entries:
        size = entry.removeprefix("hugepages-").removesuffix("kB")
        vals = [_read(f"{sysfs}/{entry}/{name}") for name in ("free_hugepages", "resv_hugepages")]
        if size.isdigit() and all(isinstance(v, str) for v in vals):
            out[size] = (int(str(vals[0])), int(str(vals[1])))
    return out


def pool_use(before: dict[str, tuple[int, int]], now: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Pages of each pool taken since `before`: fewer free, or more reserved (host-wide)."""
    return {size: max(before[size][0] - free, resv - before[size][1], 0)
            for size, (free, resv) in now.items() if size in before}


RUSAGE_KEYS = {"minflt": "ru_minflt", "majflt": "ru_majflt", "utime_s": "ru_utime",
               "stime_s": "ru_stime", "maxrss_kb": "ru_maxrss", "nvcsw": "ru_nvcsw",
               "nivcsw": "ru_nivcsw"}


def wait_tree(pid: int, timeout: float | None) -> tuple[int, dict[str, float], bool]:
    """Wait for a trial's process PID, the leader of its own process group: (its exit code,
    its rusage from wait4(), whether it timed out). After `timeout` seconds its whole group
    (its workers too) is killed with SIGKILL. On the host and in guests alike."""
    timed_out = threading.Event()
    timer = None
    if timeout is not None:
        def _kill() -> None:
            timed_out.set()
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        timer = threading.Timer(float(timeout), _kill)
        timer.start()
    try:
        _, status, ru = os.wait4(pid, 0)
    finally:
        if timer is not None:
            timer.cancel()
    usage = {k: float(getattr(ru, attr)) for k, attr in RUSAGE_KEYS.items()}
    return os.waitstatus_to_exitcode(status), usage, timed_out.is_set()


def merge_peak(peak: dict[str, object], sample: dict[str, object]) -> dict[str, object]:
    """Field-wise maximum of two samples (or summaries), hugetlb sizes included."""
    out = dict(peak)
    for key, value in sample.items():
        if isinstance(value, dict):
            cur = dict(out.get(key) or {})  # type: ignore[call-overload]
            for k, v in value.items():
                cur[k] = max(cur.get(k, 0), v)
            out[key] = cur
        elif isinstance(value, int | float):
            old = out.get(key, 0)
            out[key] = max(old, value) if isinstance(old, int | float) else value
    return out


class TreeSampler:
    """Samples a tree in a background thread until stop(); stop() returns the peak summary.

    `members` returns the tree's pids at each sample (re-evaluated, so new processes count).
    Every sample reads the members' status (RSS, page tables: counters, the same cost at any
    page size); a sample walks their page tables too (smaps_rollup: anonymous memory, PSS, THP,
    hugetlb) as hugelab.walks allows: while the walks' own CPU (the smaps_rollup reads) stays
    within a small share of one CPU, or when the tree's RSS moved since the last walk. A GiB in
    4 KiB pages, whose walk takes 30 times a THP one's, then draws little more of the
    workload's CPUs than the same GiB in THP while its memory holds still, and the walks still
    follow the tree while it grows (docs/benchmarks.md, "What hugelab's own reads cost"). A
    caller's sample (sample_now, pause, resume) and the last, at stop(), always walk."""

    def __init__(self, members: Callable[[], list[int]], interval_s: float = DEFAULT_INTERVAL_S,
                 proc: str = "/proc") -> None:
        self.members = members
        self.interval_s = interval_s
        self.proc = proc
        self.samples = 0
        self.walks = Walks()  # its smaps_rollup reads
        self.peak: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hugelab-tree-sampler",
                                        daemon=True)
        self._t0 = 0.0
        self._pools: dict[str, tuple[int, int]] = {}
        self._sums: dict[str, float] = dict.fromkeys(MEAN_FIELDS, 0.0)
        self._counts: dict[str, int] = dict.fromkeys(MEAN_FIELDS, 0)
        self._lock = threading.Lock()  # one sample at a time: the thread's, or a caller's
        self._paused = False  # read and set under the lock
        self._paused_since = 0.0
        self.paused_s = 0.0

    def start(self) -> TreeSampler:
        self._t0 = time.monotonic()
        self.walks = Walks()  # its budget counts from here
        self._pools = pool_counts()
        self._thread.start()
        return self

    def sample_now(self) -> None:
        with self._lock:
            self._sample(walk=True)

    def _sample(self, walk: bool = False) -> None:
        pids = self.members()
        if not pids:
            return
        s = measure(pids, self.proc, walk=walk or self.walks.due)
        if not s.get("processes"):
            return
        spent = s.pop("walk_cpu_s", None)
        if isinstance(spent, float):
            rss = s.get("rss_kb")
            self.walks.walked(spent, rss if isinstance(rss, int) else None)
        self.samples += 1
        s["pool_pages_taken"] = pool_use(self._pools, pool_counts())
        self.peak = merge_peak(self.peak, s)
        for key in MEAN_FIELDS:
            value = s.get(key)
            if isinstance(value, int | float):
                self._sums[key] += value
                self._counts[key] += 1

    def pause(self) -> None:
        """No samples until `resume()` (one taken first): while a workload's timed requests
        run, a sample's /proc reads would take CPU from them (docs/benchmarks.md: a
        request-level trial's window noise, with and without them)."""
        with self._lock:
            self._sample(walk=True)
            self._paused_since = time.monotonic()
            self._paused = True

    def resume(self) -> None:
        """Sampling again, from a sample taken at once."""
        with self._lock:
            if self._paused:
                self._paused = False
                self.paused_s += time.monotonic() - self._paused_since
            self._sample(walk=True)

    def _loop(self) -> None:
        delay = min(0.05, self.interval_s)  # a first look early: short commands count too
        while not self._stop.wait(delay):
            with self._lock:
                if not self._paused:
                    self._sample()
            delay = self.interval_s

    def stop(self) -> dict[str, object]:
        self._stop.set()
        self._thread.join()
        with self._lock:  # the last look, where the tree is still there (a kept server)
            if not self._paused:
                self._sample(walk=True)
        out: dict[str, object] = {v: 0 for v in ROLLUP_FIELDS.values()}
        out.update({"pte_kb": 0, "processes": 0, "hugetlb_by_page_kb": {},
                    "pool_pages_taken": {}, "thp_enabled_by_comm": {}, "thp_disabled_by_comm": {},
                    "unadvised_thp_kb_by_comm": {}})
        out.update(self.peak)
        by_size = out.get("hugetlb_by_page_kb")
        out["hugetlb_by_page_kb"] = ({str(k): v for k, v in by_size.items()}
                                     if isinstance(by_size, dict) else {})
        out["samples"] = self.samples
        out["walks"] = self.walks.count  # samples that read smaps_rollup (PSS, THP, hugetlb)
        out["walk_cpu_s"] = round(self.walks.cpu_s, 4)
        out.update({f"{k}_mean": round(v / self._counts[k]) if self._counts[k] else 0
                    for k, v in self._sums.items()})
        out["seconds"] = round(time.monotonic() - self._t0, 3)
        out["interval_s"] = self.interval_s
        out["paused_s"] = round(self.paused_s, 3)  # not sampled: a workload's timed requests
        return out
