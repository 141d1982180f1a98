"""The machine lane's process checks see their own lane's workloads only: the background lane
(HUGELAB_TEST_LANE=beside) starts and stops servers while a machine test runs. These tests run
in either lane: the lane this pytest runs in (AMBIENT) is what its own children inherit, and a
made-up lane stands for the other one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.hostguard import LANE_VAR, workload_processes

AMBIENT = os.environ.get(LANE_VAR)  # None in the machine lane, "beside" in the Python lane
OTHER = f"other-{os.getpid()}"
NAMED = ("import ctypes, sys, time\n"
         "ctypes.CDLL(None).prctl(15, b'memcached', 0, 0, 0)\n"  # PR_SET_NAME: looks like one
         "print(flush=True)\n"
         "time.sleep(30)\n")


def _looking_from(monkeypatch, lane: str | None) -> list[str]:
    """workload_processes() as a pytest of `lane` sees them."""
    if lane is None:
        monkeypatch.delenv(LANE_VAR, raising=False)
    else:
        monkeypatch.setenv(LANE_VAR, lane)
    return workload_processes()


def _started(lane: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != LANE_VAR}
    if lane is not None:
        env[LANE_VAR] = lane
    p = subprocess.Popen([sys.executable, "-c", NAMED], env=env, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"\n"  # named by now
    return p


def test_each_lane_sees_its_own_workloads_only(monkeypatch):
    # one started in the other lane; one with no lane of its own: this pytest's, by ancestry
    other, mine = _started(OTHER), _started(None)
    try:
        time.sleep(0.05)
        seen = _looking_from(monkeypatch, AMBIENT)
        assert f"{mine.pid} memcached" in seen and f"{other.pid} memcached" not in seen
        seen = _looking_from(monkeypatch, OTHER)
        assert f"{other.pid} memcached" in seen and f"{mine.pid} memcached" not in seen
    finally:
        for p in (other, mine):
            p.kill()
            p.wait()


# a process whose environment /proc no longer shows the lane (redis-server rewrites its title
# over it): here a child started with an empty environment, below a parent of the other lane
PARENT = ("import subprocess, sys\n"
          "c = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={}, "
          "stdout=subprocess.PIPE)\n"
          "print(c.pid, c.stdout.readline().decode().strip(), flush=True)\n"
          "c.wait()\n")


def test_a_child_without_the_lane_in_its_environment_is_its_parents_lane(monkeypatch):
    env = {**os.environ, LANE_VAR: OTHER}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, NAMED], env=env,
                              stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline().split()[0])
        assert LANE_VAR.encode() not in Path(f"/proc/{child}/environ").read_bytes()
        assert f"{child} memcached" not in _looking_from(monkeypatch, AMBIENT)
        assert f"{child} memcached" in _looking_from(monkeypatch, OTHER)
        os.kill(child, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()


def test_the_memory_lock_is_shared_by_guests_and_held_alone_by_an_aged_host(tmp_path,
                                                                            monkeypatch):
    import tests.hostguard as hg
    from hugelab.owned import _locked  # a second reading: a live holder, shared or not
    monkeypatch.setattr(hg, "MEMORY_LOCK", str(tmp_path / "memory.lock"))

    def exclusive_now() -> bool:  # what a `fills_memory` test would get at once
        return not _locked(Path(hg.MEMORY_LOCK))

    with hg.memory_lock(shared=True), hg.memory_lock(shared=True):  # two guests at once
        assert not exclusive_now()
    assert exclusive_now()
    with hg.memory_lock(shared=False):
        assert not exclusive_now()
    assert (tmp_path / "memory.lock").stat().st_mode & 0o777 == 0o600


class _Node:
    def __init__(self, *marks: str) -> None:
        self.marks = set(marks)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_only_a_background_lanes_guest_without_host_skips_the_host_lock(monkeypatch):
    from tests.conftest import _guest_beside
    monkeypatch.setenv(LANE_VAR, "beside")
    assert _guest_beside(_Node("vm", "beside"))
    assert not _guest_beside(_Node("vm", "beside", "host"))  # changes the host: machine lane
    assert not _guest_beside(_Node("server", "beside"))
    monkeypatch.delenv(LANE_VAR)  # one pytest for everything: every guest takes the host lock
    assert not _guest_beside(_Node("vm", "beside"))


MAKER = ("import sys, time\n"
         "from pathlib import Path\n"
         "from hugelab import owned\n"
         "print(owned.new_owned_dir(Path(sys.argv[1]), 'trial'), flush=True)\n"
         "time.sleep(float(sys.argv[2]))\n")


def _made(root: Path, lane: str | None, stay_s: float) -> tuple[subprocess.Popen, Path]:
    """A private copy's directory made (with its owner record) by a process of `lane` that
    lives `stay_s` seconds more."""
    env = {k: v for k, v in os.environ.items() if k != LANE_VAR}
    if lane is not None:
        env[LANE_VAR] = lane
    p = subprocess.Popen([sys.executable, "-c", MAKER, str(root), str(stay_s)], env=env,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    return p, Path(p.stdout.readline().strip())


def test_each_lane_counts_its_own_private_copies_and_every_orphan(monkeypatch, tmp_path):
    """A server's private copy made in the other lane while its maker lives is that lane's; one
    of this lane, or one whose maker is gone (a killed run's leftover), is this lane's."""
    from tests import hostguard

    monkeypatch.setattr(hostguard, "PRIVATE_ROOTS", (str(tmp_path),))
    (other, theirs), (mine_p, mine) = _made(tmp_path, OTHER, 30), _made(tmp_path, None, 30)
    gone_p, gone = _made(tmp_path, OTHER, 0)
    gone_p.wait()
    try:
        if AMBIENT is None:
            monkeypatch.delenv(LANE_VAR, raising=False)
        else:
            monkeypatch.setenv(LANE_VAR, AMBIENT)
        assert hostguard.private_dirs() == {mine, gone}
        monkeypatch.setenv(LANE_VAR, OTHER)
        assert hostguard.private_dirs() == {theirs, gone}
    finally:
        for p in (other, mine_p):
            p.kill()
            p.wait()


HOLDER = ("import mmap, sys\n"
          "f = open(sys.argv[1], 'r+b')\n"
          "m = mmap.mmap(f.fileno(), 4096)\n"
          "print(flush=True)\n"
          "sys.stdin.read()\n")


def test_a_mapped_dsm_segment_is_not_an_orphan_and_an_unmapped_one_is():
    """A live server's segment (mapped, as every server process maps its postmaster's control
    segment), whichever lane started it, is not what a killed postmaster leaves; one no process
    maps is."""
    from tests.hostguard import orphan_pg_dsm

    held = Path(f"/dev/shm/PostgreSQL.hugelab-test-{os.getpid()}-held")
    left = Path(f"/dev/shm/PostgreSQL.hugelab-test-{os.getpid()}-left")
    p = None
    try:
        for f in (held, left):
            f.write_bytes(bytes(4096))
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(held)], env={
            **os.environ, LANE_VAR: OTHER}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline() == b"\n"  # mapped by now
        orphans = orphan_pg_dsm(settle_s=0.05)
        assert left in orphans and held not in orphans
        p.communicate(b"")
        assert held in orphan_pg_dsm(settle_s=0.05)  # its holder gone: an orphan
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        for f in (held, left):
            f.unlink(missing_ok=True)
