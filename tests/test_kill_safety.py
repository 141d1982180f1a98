"""SIGKILL of `hugelab run` mid-trial, then `hugelab recover` (or a plain re-run): no process of
the killed run survives, no temporary directory is left, pools (nr_hugepages and surplus),
THP modes and tunables (max_ptes_none, shrink_underused) and memory cgroups are as before, and
the resumed run completes every block with every trial ok."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import HUGELAB, cmdlines, make_tree
from tests.hostguard import carrying, host_state, orphan_pg_dsm, private_dirs, workload_processes

pytestmark = [pytest.mark.host, pytest.mark.slow]

# one block of two arms: the kill lands in one of its two trials, the resume reruns that one
# (and runs the other when the kill came first); a second block only repeated the same trials
HEAD = 'name = "kill"\nseed = 9\nblocks = 1\nbaseline = "a"\n'
STRESS = HEAD + """
[workload]
kind = "stress-ng"
stressor = "vm"
workers = 2
bytes_per_worker = "32M"
timeout_s = 2
[[arms]]
name = "a"
backing = "4k"
thp = "never"
[[arms]]
name = "b"
backing = "thp"
thp = "always"
"""
SHRINKER = HEAD + """
[workload]
kind = "stress-ng"
stressor = "vm"
workers = 2
bytes_per_worker = "32M"
timeout_s = 2
[[arms]]
name = "a"
backing = "4k"
thp = "never"
thp_max_ptes_none = 409
thp_shrink_underused = false
memory_limit = "256M"
[[arms]]
name = "b"
backing = "thp"
thp = "always"
thp_max_ptes_none = 300
thp_shrink_underused = false
memory_limit = "512M"
"""
BUILD = HEAD + """
[workload]
kind = "build"
source_dir = "{src}"
jobs = 2
[[arms]]
name = "a"
backing = "4k"
thp = "never"
[[arms]]
name = "b"
backing = "thp"
thp = "always"
"""
ONE_GIG = HEAD + """
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 1.0
[[arms]]
name = "a"
backing = "hugetlb-1G"
[[arms]]
name = "b"
backing = "hugetlb-2M"
"""
JVM = HEAD + """
[workload]
kind = "jvm"
heap = "128M"
[[arms]]
name = "a"
backing = "4k"
thp = "madvise"
[[arms]]
name = "b"
backing = "hugetlb-2M"
thp = "madvise"
app = {{ UseLargePages = true }}
"""
MEMCACHED = HEAD + """
[workload]
kind = "memcached"
execute_number = 40000
[[arms]]
name = "a"
backing = "4k"
thp = "madvise"
[[arms]]
name = "b"
backing = "thp"
thp = "madvise"
app = {{ large_pages = true }}
"""
PG_REQUESTS = HEAD + """
design = "interleaved"
[workload]
kind = "postgres"
scale = 1
clients = 2
duration_s = 3
window_ops = 100
warmup_s = 0
[[arms]]
name = "a"
backing = "4k"
app = {{ huge_pages = "off", shared_buffers = "32MB" }}
[[arms]]
name = "b"
backing = "hugetlb-2M"
app = {{ huge_pages = "on", shared_buffers = "32MB" }}
"""
MARIADB = HEAD + """
[workload]
kind = "mariadb"
tables = 1
table_size = 2000
threads = 1
duration_s = 2
warmup_s = 0
buffer_pool = "64M"
[[arms]]
name = "a"
backing = "4k"
[[arms]]
name = "b"
backing = "hugetlb-2M"
"""


def records(state: Path) -> list[dict]:
    out = []
    for p in state.glob("workload-*.json"):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def kill_during(exp: Path, state: Path, store: Path, needle: str) -> list[dict]:
    """Start `hugelab run`, SIGKILL it once a process whose command line has `needle` runs
    inside one of its trials; the scope records then."""
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    p = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", str(store)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            recs = records(state)
            tokens = {r["token"] for r in recs}
            mine = set(carrying(tokens)) if tokens else set()
            if any(needle in c for pid, c in cmdlines().items() if pid in mine):
                time.sleep(0.3)
                return records(state)
            assert p.poll() is None, "the run ended before the moment to kill it"
            time.sleep(0.05)
        raise AssertionError(f"no {needle} process appeared")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()


def trials(store: Path) -> list[tuple]:
    with sqlite3.connect(store) as c:
        return list(c.execute("SELECT block, arm, target, status, attempts FROM trials"))


@pytest.mark.parametrize("case,then", [
    ("stress-ng", "recover"), ("stress-ng", "rerun"), ("build", "recover"),
    ("hugelab-mem-1G", "recover"), ("jvm", "recover"), ("memcached", "recover"),
    ("pg-requests", "recover"), ("mariadb", "recover"), ("shrinker", "recover"),
])
def test_sigkill_mid_trial_leaves_nothing_and_resume_completes(case, then, tmp_path):
    text, needle = {"stress-ng": (STRESS, "stress-ng"), "build": (BUILD, "cc1"),
                    "hugelab-mem-1G": (ONE_GIG, "hugetlb-1G"),
                    "jvm": (JVM, "UseLargePages"), "memcached": (MEMCACHED, "memcslap"),
                    "pg-requests": (PG_REQUESTS, "hugelab-reqmix"),
                    "mariadb": (MARIADB, "sysbench"), "shrinker": (SHRINKER, "stress-ng")}[case]
    src = make_tree(tmp_path / "src", units=60) if case == "build" else ""
    exp = tmp_path / "exp.toml"
    exp.write_text(text.format(src=src))
    state, store = tmp_path / "state", tmp_path / "s.db"
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    before, procs, leftovers = host_state(), workload_processes(), private_dirs()
    dsm = set(Path("/dev/shm").glob("PostgreSQL.*"))
    recs = kill_during(exp, state, store, needle)
    # killed inside a trial (its scope's records still there), not after it: the workloads
    # run for seconds, the kill comes within a few tenths of one of their processes starting
    assert recs, "the run was killed between trials, not during one"
    killed = host_state()  # checked after recover (a failed check must not leave the host so)
    tokens = {r["token"] for r in recs}
    scratch = [Path(r["scratch"]) for r in recs if r.get("scratch")]
    if then == "recover":
        r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        assert not carrying(tokens), "a workload process of the killed run survived recover"
        assert not any(s.exists() for s in scratch), "a trial's temporary directory is left"
        assert host_state() == before and workload_processes() == procs
        assert not list(state.glob("qemu-*.json")) and not list(state.glob("workload-*.json"))
        assert private_dirs() == leftovers, "a server's private data copy is left"
        assert orphan_pg_dsm() <= dsm, "a killed postmaster's dynamic shared memory is left"
    if case == "shrinker":  # it was killed with max_ptes_none, shrink_underused, a memcg set
        assert killed["memcgs"] and killed["max_ptes_none"] in ("409", "300"), killed
        assert killed["shrink_underused"] == "0", killed
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(store), "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not carrying(tokens) and not any(s.exists() for s in scratch)
    assert host_state() == before and workload_processes() == procs
    rows = trials(store)
    assert len(rows) == len({(b, a, t) for b, a, t, *_ in rows}) == 2  # 1 block x 2 arms
    assert all(status == "ok" for *_, status, _att in rows), rows
