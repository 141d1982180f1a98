"""The cost record agrees with independent counts (issue 36): a real `hugelab run` of
hugelab-mem under 4 KiB pages, THP and a 2 MiB pool, each trial's cost figures checked against
the buffer's own smaps (read by hugelab-mem itself), the pool's size, and the kernel's counters
read by this test around the run; and the tree sampler's PSS and page tables against the
test's own read of a process's smaps_rollup and status."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hugelab import walks
from hugelab.host.paths import parse_vmstat
from hugelab.trial import costs, procscan
from hugelab.workloads.servercpu import daemons_cpu_s
from tests.helpers import HUGELAB
from tests.hostguard import host_state

MIB = 1024
EXPERIMENT = """\
name = "costs-real"
seed = 8
blocks = 2
baseline = "4k"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 0.3

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"

[[arms]]
name = "2M"
backing = "hugetlb-2M"
"""


def _vmstat() -> dict[str, int]:
    return parse_vmstat(Path("/proc/vmstat").read_text())


@pytest.mark.host
@pytest.mark.slow
def test_each_trials_costs_agree_with_the_buffers_own_smaps_and_the_kernels_counters(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    before_host = host_state()
    (tmp_path / "e.toml").write_text(EXPERIMENT)
    vm0, cpu0 = _vmstat(), daemons_cpu_s()
    out = subprocess.run([*HUGELAB, "run", "e.toml", "--store", "s.db"], cwd=tmp_path,
                         capture_output=True, text=True)
    vm1, cpu1 = _vmstat(), daemons_cpu_s()
    assert out.returncode == 0, out.stderr + out.stdout
    assert host_state() == before_host
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT arm, status, evidence, monitors FROM trials").fetchall()
    assert len(rows) == 6 and all(r[1] == "ok" for r in rows)
    totals: dict[str, float] = {}
    for arm, _s, ev_text, mon_text in rows:
        ev, c = json.loads(ev_text), json.loads(mon_text)["costs"]
        for k in ("thp_fault_alloc", "compact_stall", "khugepaged_cpu_s", "kcompactd_cpu_s"):
            totals[k] = totals.get(k, 0.0) + c[k]
        assert c["pss_peak_kb"] <= c["rss_peak_kb"] + 4
        if arm == "2M":  # hugetlb memory is in no RSS: the pool's pages are counted apart
            assert c["hugetlb_faulted_kb"] == ev["Private_Hugetlb_kB"] == 64 * MIB
            assert c["pool_held_kb"] == 64 * MIB and c["pool_unused_kb"] == 0
            assert c["rss_peak_kb"] < 8 * MIB
            assert c["footprint_kb"] == pytest.approx(c["rss_peak_kb"] + 64 * MIB)
            continue
        # the buffer's own smaps (hugelab-mem read it itself) lies inside the tree's peak
        assert ev["Rss_kB"] <= c["rss_peak_kb"] <= ev["Rss_kB"] + 16 * MIB
        assert c["anon_huge_peak_kb"] >= ev["AnonHugePages_kB"]
        assert c["footprint_kb"] == c["rss_peak_kb"] and c["pool_held_kb"] == 0
        if arm == "thp":
            assert ev["AnonHugePages_kB"] >= 60 * MIB
            assert c["thp_fault_alloc"] >= 30  # 64 MiB in 2 MiB faults, host-wide counter
        else:
            assert c["anon_huge_peak_kb"] <= 4 * MIB
            assert c["pte_peak_kb"] >= 64 * MIB // 4 * 8 // 1024  # a PTE per 4 KiB page
    # the trials' host-wide deltas fit inside the test's own deltas around the whole run
    assert totals["thp_fault_alloc"] <= vm1["thp_fault_alloc"] - vm0["thp_fault_alloc"]
    assert totals["compact_stall"] <= vm1["compact_stall"] - vm0["compact_stall"]
    for name in ("khugepaged", "kcompactd"):
        assert totals[f"{name}_cpu_s"] <= cpu1[name] - cpu0[name] + 0.02
    report = subprocess.run([*HUGELAB, "report", "--store", "s.db", "--json"], cwd=tmp_path,
                            capture_output=True, text=True)
    costs = json.loads(report.stdout)["costs"]
    assert {s["series"] for s in costs["series"]} == {"4k", "thp", "2M"}
    assert any(e["cost"] == "footprint_kb" for e in costs["entries"])


def _sampled(code: str, seconds: float) -> tuple[dict, dict[str, int], str]:
    """A child running `code` (it prints "ready" once its memory is touched) sampled by the
    tree sampler for `seconds`: the sampler's summary, then this test's own read of the
    child's smaps_rollup and status."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        sampler = procscan.TreeSampler(lambda: [child.pid], interval_s=0.05).start()
        time.sleep(seconds)
        tree = sampler.stop()
        rollup = procscan.parse_kb_fields(Path(f"/proc/{child.pid}/smaps_rollup").read_text())
        return tree, rollup, Path(f"/proc/{child.pid}/status").read_text()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def test_the_tree_samplers_pss_and_page_tables_are_the_processs_own():
    """A child holding 48 MiB: the sampler's Rss, Pss and VmPTE against this test's own
    read of the child's smaps_rollup and status."""
    code = ("import signal, sys; b = bytearray(48 << 20)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "print('ready', flush=True); signal.pause()")
    tree, rollup, status = _sampled(code, 0.3)
    assert tree["samples"] >= 2
    assert tree["rss_kb"] == pytest.approx(rollup["Rss"], abs=256)
    # Pss splits each shared page among its sharers: other Pythons starting and ending
    # beside the test (the suite's Python lane) move it, by at most the shared pages
    shared = rollup.get("Shared_Clean", 0) + rollup.get("Shared_Dirty", 0)
    assert tree["pss_kb"] == pytest.approx(rollup["Pss"], abs=256 + shared)
    assert tree["pss_kb"] >= rollup.get("Private_Dirty", 0) + rollup.get("Private_Clean", 0)
    assert tree["pte_kb"] == procscan.page_table_kb(status) > 0
    assert tree["rss_kb_mean"] == pytest.approx(rollup["Rss"], abs=512)
    assert rollup["Rss"] >= 48 * MIB


def test_a_sampler_over_its_walk_budget_still_reads_the_counters_at_every_sample(monkeypatch):
    """With a walk budget of nothing, the sampler walks the child's page tables only at its
    first look and its last (stop), yet reads its status at every sample: the RSS peak and
    page tables are the child's own, and the walks' CPU is its own clock's."""
    code = ("import signal, mmap\n"
            "m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
            "m.madvise(mmap.MADV_NOHUGEPAGE)\n"
            "for i in range(0, len(m), 4096): m[i] = 1\n"
            "print('ready', flush=True); signal.pause()")
    monkeypatch.setattr(walks, "FREE_S", 0.0)
    monkeypatch.setattr(walks, "SHARE", 0.0)
    tree, rollup, status = _sampled(code, 0.6)
    assert tree["samples"] >= 6 and tree["walks"] == 2, tree  # the first and the last
    assert 0 < tree["walk_cpu_s"] < 1
    assert tree["rss_kb"] == pytest.approx(rollup["Rss"], abs=256) and rollup["Rss"] >= 64 * MIB
    assert tree["anon_kb"] >= 64 * MIB and tree["pss_kb"] <= tree["rss_kb"]
    assert tree["pte_kb"] == procscan.page_table_kb(status) >= 64 * MIB // 4 * 8 // 1024
    assert tree["rss_kb_mean"] == pytest.approx(rollup["Rss"], abs=512)


SHARED = """\
import mmap, os, signal
m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
def touch(a, b):
    for i in range(a, b, 4096): m[i] = 1
touch(0, 16 << 20)
pid = os.fork()
if pid == 0:  # a sharer that fills 32 MiB more and exits: its pages stay in the object
    touch(16 << 20, 48 << 20); os._exit(0)
os.waitpid(pid, 0)
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        touch(0, 16 << 20); signal.pause()
    kids.append(pid)
print("ready", *kids, flush=True); signal.pause()
"""


def _shmem_kb() -> int:
    return procscan.parse_kb_fields(Path("/proc/meminfo").read_text())["Shmem"]


def test_a_shared_memory_object_is_counted_once_with_the_pages_no_live_process_maps():
    """Four processes share one 64 MiB anonymous shared mapping: 16 MiB touched by each, 32
    MiB more by a fifth that exited. Their RSS counts the 16 MiB four times and the 32 MiB
    not at all; the tree's `unique_kb` counts the object once at its 48 MiB, which the
    kernel's own Shmem count (/proc/meminfo, read by this test before and after) agrees with,
    and the footprint is built on it."""
    before = _shmem_kb()
    child = subprocess.Popen([sys.executable, "-c", SHARED], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()
        assert line[:1] == ["ready"]
        grown = _shmem_kb() - before
        pids = [child.pid, *map(int, line[1:])]
        tree = procscan.TreeSampler(lambda: pids, interval_s=0.05).start()
        time.sleep(0.3)
        tree_sum = tree.stop()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert grown == pytest.approx(48 * MIB, abs=8 * MIB)  # the kernel's count
    assert tree_sum["shmem_objects_kb"] == 48 * MIB  # one object, its 48 MiB
    assert tree_sum["rss_kb"] >= 4 * 16 * MIB  # each sharer's 16 MiB in its RSS
    private = tree_sum["rss_kb"] - 4 * 16 * MIB  # four Pythons' own pages
    assert tree_sum["unique_kb"] == pytest.approx(private + 48 * MIB, abs=2 * MIB)
    c = costs.record(tree_sum, {}, pool_held_kb=0)
    assert c["footprint_kb"] == tree_sum["unique_kb"] and c["shmem_objects_peak_kb"] == 48 * MIB


PRIVATE_TMPFS = """\
import mmap, os, signal, sys
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"x" * (8 << 20))
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 8 << 20, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
total = sum(m[i] for i in range(0, 8 << 20, 4096))
print("ready", flush=True); signal.pause()
"""


def test_a_tmpfs_file_mapped_privately_is_counted_once_not_subtracted(tmp_path):
    """A file on a tmpfs (/dev/shm) mapped MAP_PRIVATE and read: the kernel counts its pages
    as the reader's RssShmem, so the tree takes them out of its RSS and adds the file back at
    its own allocated size (this test's stat of it); the footprint stays the RSS."""
    path = Path("/dev/shm") / f"hugelab-test-{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", PRIVATE_TMPFS, str(path)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        status = procscan.parse_kb_fields(Path(f"/proc/{child.pid}/status").read_text())
        tree = procscan.TreeSampler(lambda: [child.pid], interval_s=0.05).start()
        time.sleep(0.3)
        tree_sum = tree.stop()
        allocated = path.stat().st_blocks // 2
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        path.unlink(missing_ok=True)
    assert allocated == 8 * MIB and status["RssShmem"] >= 8 * MIB
    assert tree_sum["shmem_objects_kb"] == allocated
    assert tree_sum["unique_kb"] == pytest.approx(tree_sum["rss_kb"], abs=MIB)
