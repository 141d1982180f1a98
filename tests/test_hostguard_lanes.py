"""The machine lane's process checks see their own lane's workloads only: the background lane
(HUGELAB_TEST_LANE=beside) starts and stops servers while a machine test runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.hostguard import LANE_VAR, workload_processes

NAMED = ("import ctypes, sys, time\n"
         "ctypes.CDLL(None).prctl(15, b'memcached', 0, 0, 0)\n"  # PR_SET_NAME: looks like one
         "print(flush=True)\n"
         "time.sleep(30)\n")


def _started(lane: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != LANE_VAR}
    if lane is not None:
        env[LANE_VAR] = lane
    p = subprocess.Popen([sys.executable, "-c", NAMED], env=env, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"\n"  # named by now
    return p


# a process whose environment /proc no longer shows the lane (redis-server rewrites its title
# over it): here a child started with an empty environment, below a parent of the lane
PARENT = ("import subprocess, sys\n"
          "c = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={}, "
          "stdout=subprocess.PIPE)\n"
          "print(c.pid, c.stdout.readline().decode().strip(), flush=True)\n"
          "c.wait()\n")


def test_a_child_without_the_lane_in_its_environment_is_its_parents_lane(monkeypatch):
    env = {**os.environ, LANE_VAR: "beside"}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, NAMED], env=env,
                              stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline().split()[0])
        assert LANE_VAR.encode() not in Path(f"/proc/{child}/environ").read_bytes()
        monkeypatch.delenv(LANE_VAR, raising=False)
        assert f"{child} memcached" not in workload_processes()
        monkeypatch.setenv(LANE_VAR, "beside")
        assert f"{child} memcached" in workload_processes()
        os.kill(child, signal.SIGKILL)
    finally:
        parent.kill()
        parent.wait()


def test_each_lane_sees_its_own_workloads_only(monkeypatch):
    beside, machine = _started("beside"), _started(None)
    try:
        time.sleep(0.05)
        monkeypatch.delenv(LANE_VAR, raising=False)  # the machine lane
        seen = workload_processes()
        assert f"{machine.pid} memcached" in seen and f"{beside.pid} memcached" not in seen
        monkeypatch.setenv(LANE_VAR, "beside")  # the background lane
        seen = workload_processes()
        assert f"{beside.pid} memcached" in seen and f"{machine.pid} memcached" not in seen
    finally:
        for p in (beside, machine):
            p.kill()
            p.wait()
