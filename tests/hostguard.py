"""Snapshot of the real host's huge-page state, to prove a test left it as it found it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hugelab.host.paths import REAL, parse_selected

HOST_LOCK = "/run/lock/hugelab-tests-host.lock"
MEMORY_LOCK = "/run/lock/hugelab-tests-memory.lock"


@contextmanager
def _flocked(path: str, how: int) -> Iterator[None]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)


def host_lock() -> contextlib.AbstractContextManager[None]:
    """The tests' lock on the real host, held across pytest processes (and by hand-run
    `hugelab run`s beside a suite: `flock HOST_LOCK ...`): one test that changes it at a time."""
    return _flocked(HOST_LOCK, fcntl.LOCK_EX)


def memory_lock(*, shared: bool) -> contextlib.AbstractContextManager[None]:
    """The tests' lock on the host's free memory. The guests of the background lane (own QEMU,
    anonymous RAM, judged only from inside) run beside the machine lane's host tests, holding
    it shared; a host test that needs free memory as it left it (`fills_memory`: an aged host
    made by faulting in nearly all of it, then measured while trials run) holds it alone, so
    no guest starts, grows or exits meanwhile."""
    return _flocked(MEMORY_LOCK, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


def host_state() -> dict[str, str]:
    state = {"thp": parse_selected(REAL.thp_enabled.read_text()),
             "defrag": parse_selected(REAL.thp_defrag.read_text())}
    for size in REAL.pool_sizes_kb():
        state[f"pool{size}"] = REAL.pool_file(size).read_text().strip()
        state[f"surplus{size}"] = REAL.pool_file(size, "surplus_hugepages").read_text().strip()
    for size in REAL.mthp_sizes_kb():  # multi-size THP and shmem THP knobs (Linux 6.8+)
        for name, path in (("mthp", REAL.mthp_enabled(size)),
                           ("mthp_shmem", REAL.mthp_shmem_enabled(size))):
            if path.exists():
                state[f"{name}{size}"] = parse_selected(path.read_text())
    if REAL.shmem_enabled.exists():
        state["shmem_enabled"] = parse_selected(REAL.shmem_enabled.read_text())
    for name, path in (("max_ptes_none", REAL.max_ptes_none),
                       ("shrink_underused", REAL.shrink_underused)):
        if path.exists():
            state[name] = path.read_text().strip()
    state["memcgs"] = ",".join(hugelab_memcgs())
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if " hugetlbfs " in line]
    state["hugetlbfs"] = ",".join(sorted(mounts))
    return state


def hugelab_memcgs() -> list[str]:
    """The memory cgroups hugelab runs made (hugelab.host.memcg) that are still there."""
    from hugelab.host import memcg

    h = memcg.find(REAL)
    if h is None:
        return []
    return sorted(str(d) for d in h.root.glob(f"{memcg.SESSION_PREFIX}*") if d.is_dir())


def put_back(state: dict[str, str]) -> None:
    """Write a host_state() snapshot back: THP modes, mTHP knobs, pool sizes; hugetlbfs mounts
    made since are unmounted (surplus pages go when their users do)."""
    import subprocess

    files = {"thp": REAL.thp_enabled, "defrag": REAL.thp_defrag, "shmem_enabled": REAL.shmem_enabled,
             "max_ptes_none": REAL.max_ptes_none, "shrink_underused": REAL.shrink_underused}
    for size in REAL.mthp_sizes_kb():
        files[f"mthp{size}"] = REAL.mthp_enabled(size)
        files[f"mthp_shmem{size}"] = REAL.mthp_shmem_enabled(size)
    for size in REAL.pool_sizes_kb():
        files[f"pool{size}"] = REAL.pool_file(size)
    now = host_state()
    for key, path in files.items():
        if key in state and now.get(key) != state[key]:
            try:
                path.write_text(state[key])
            except OSError:
                pass  # reported by the caller's comparison all the same
    made = set(now.get("memcgs", "").split(",")) - set(state.get("memcgs", "").split(","))
    for cg in sorted(c for c in made if c):
        from hugelab.host import memcg

        try:
            memcg.remove_session(Path(cg), Path(cg).parent)
        except Exception:  # noqa: BLE001 - reported by the caller's comparison all the same
            pass
    kept = set(state.get("hugetlbfs", "").split(","))
    for mnt in now.get("hugetlbfs", "").split(","):
        if mnt and mnt not in kept:
            subprocess.run(["umount", "-l", mnt], check=False)


def qemu_children() -> list[int]:
    """QEMU processes whose parent is this test process."""
    out = []
    me = str(os.getpid())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            exe = os.readlink(d / "exe")
            ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if Path(exe).name.startswith("qemu-system") and ppid == me:
            out.append(int(d.name))
    return out


WORKLOAD_NAMES = ("hugelab-mem", "stress-ng", "sysbench", "redis-server", "redis-benchmark",
                  "iperf3", "cc1", "make", "hugelab-thp", "java", "memcached", "memcslap")


# The lane a pytest process runs in (./bootstrap test sets it for the background lane); what
# its tests start inherits it, daemons included.
LANE_VAR = "HUGELAB_TEST_LANE"


def in_background_lane() -> bool:
    """Whether this pytest is the background lane (./bootstrap test's second process): the host
    is the machine lane's to change meanwhile, so host before/after checks are not ours."""
    return os.environ.get(LANE_VAR) is not None


def _environ_lane(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    prefix = f"{LANE_VAR}=".encode()
    return next((e[len(prefix):].decode() for e in env if e.startswith(prefix)), None)


def parent_pid(pid: int) -> int:
    """The parent of `pid` as /proc/PID/stat gives it (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _lane(pid_dir: Path) -> str | None:
    """The test lane a process belongs to: LANE_VAR in its environment or, first found, in its
    parent's, and so on up (a server that rewrites its process title, as redis-server does,
    overwrites the environment /proc shows; its parent, the lane's pytest, still carries it).
    None for none."""
    pid = int(pid_dir.name)
    for _ in range(32):  # a process tree is never this deep here; a loop cannot hang
        if pid <= 1:
            return None
        lane = _environ_lane(pid)
        if lane is not None:
            return lane
        pid = parent_pid(pid)
    return None


def workload_processes() -> list[str]:
    """'pid name' of every live process that looks like a hugelab workload (zombies are dead:
    their memory, hugetlb pages included, was freed when they exited), of this test lane only:
    the lane beside this one starts and stops its own servers meanwhile."""
    out = []
    mine = os.environ.get(LANE_VAR)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm = (d / "comm").read_text().strip()
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state in ("Z", "X"):  # dead, waiting for init to reap it: holds no memory
            continue
        if (comm in WORKLOAD_NAMES or comm.startswith("stress-ng")) and _lane(d) == mine:
            out.append(f"{d.name} {comm}")
    return out


PRIVATE_ROOTS = ("/var/tmp/hugelab-postgres", "/var/tmp/hugelab-mariadb")


def private_dirs() -> set[Path]:
    """The database servers' private data copies (PostgreSQL clusters, MariaDB datadirs) of
    this test lane: a copy whose maker (its owner record) lives in the other lane is that
    lane's, made and removed while this one runs (a CI run found a beside-lane PostgreSQL's copy
    in a kill test's before/after check)."""
    from hugelab import owned

    mine = os.environ.get(LANE_VAR)
    out = set()
    for top in (d for root in PRIVATE_ROOTS for d in Path(root).glob("*-*")):
        pid = owned.owner_record(top).get("owner_pid")
        if isinstance(pid, int) and owned.owner_alive(top) and \
                _lane(Path(f"/proc/{pid}")) != mine:
            continue
        out.add(top)
    return out


def _mapped_pg_dsm() -> set[Path]:
    """PostgreSQL dynamic shared memory some live process maps (every server process maps its
    postmaster's control segment)."""
    out: set[Path] = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            maps = (d / "maps").read_text()
        except OSError:
            continue
        out |= {Path(line.split()[-1]) for line in maps.splitlines()
                if "/dev/shm/PostgreSQL." in line}
    return out


def orphan_pg_dsm(settle_s: float = 0.3) -> set[Path]:
    """PostgreSQL dynamic shared memory (/dev/shm/PostgreSQL.<handle>) no live process maps, at
    two looks `settle_s` apart: what a killed postmaster leaves. A live server's segments are not
    orphans, whichever lane started it (a CI run found the beside lane's PostgreSQL segments in a
    kill test's before/after check); a server creates or destroys one between its file and its
    mapping only for an instant, so the second look drops those."""
    import time

    looks = []
    for i in range(2):
        if i:
            time.sleep(settle_s)
        files = set(Path("/dev/shm").glob("PostgreSQL.*"))
        looks.append(files - _mapped_pg_dsm())
    return looks[0] & looks[1]


def carrying(tokens: set[str]) -> list[int]:
    """Pids whose environment carries one of these trial tokens (HUGELAB_TRIAL=...)."""
    from hugelab.trial.procscan import TOKEN_VAR

    wanted = {f"{TOKEN_VAR}={t}".encode() for t in tokens}
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = set((d / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if env & wanted:
            out.append(int(d.name))
    return out


PYENV_LOCK = Path(os.path.expanduser("~/.pyenv/shims/.pyenv-shim"))


def clear_stale_pyenv_lock(lock: Path = PYENV_LOCK, *, proc: str = "/proc") -> bool:
    """Remove pyenv's rehash lock when no `pyenv-rehash` runs: root's ~/.bashrc here runs
    `pyenv rehash` in every SSH session, a session the tests kill mid-rehash leaves the lock,
    and with it every later session prints errors and runs slower (test_vm_ssh's timing
    failed that way). True when it removed one."""
    if not lock.exists():
        return False
    for entry in os.listdir(proc):
        if entry.isdigit():
            try:
                cmd = Path(proc, entry, "cmdline").read_bytes()
            except OSError:
                continue
            if b"pyenv-rehash" in cmd:
                return False
    lock.unlink(missing_ok=True)
    return True
