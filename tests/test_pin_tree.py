"""servercpu.pin_tree pins a server's whole tree, and a child forked after the tree was read
(before its parent was pinned, so it kept the old CPUs) is found by the next pass: a
PostgreSQL backend on both CPUs of a `client_apart` trial was seen once in a suite run. Real
processes (Python), their CPU lists read back from the kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.workloads import servercpu

PROC = Path("/proc")

PARENT = ("import subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
          "print(c.pid, flush=True); time.sleep(60)")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_child_the_first_read_missed_is_pinned_by_the_next_pass(monkeypatch):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())  # type: ignore[union-attr]
    try:
        real = servercpu.children
        reads: list[int] = []

        def stale_first(proc=PROC):
            """The first read of the tree does not have the child yet (forked just after)."""
            reads.append(1)
            got = real(proc)
            if len(reads) == 1:
                got = {p: [k for k in kids if k != child] for p, kids in got.items()}
            return got

        monkeypatch.setattr(servercpu, "children", stale_first)
        cpus = sorted(os.sched_getaffinity(0))[:1]
        servercpu.pin_tree(parent.pid, cpus)
        assert os.sched_getaffinity(parent.pid) == set(cpus)
        assert os.sched_getaffinity(child) == set(cpus), "the child the first read missed"
        assert len(reads) >= 2
    finally:
        os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
