"""Pool reach and THP on a fresh host against a fragmented one (issue 38).

    sudo .venv/bin/python -m bench.pool_reach [--target 0.95] [--pool-gib 4] [--thp-gib 2]

For each host state, in turn:

- `fresh`: memory compacted (/proc/sys/vm/compact_memory), nothing held;
- `fragmented`: `hugelab.host.fragment.Fragmenter` at `--target` (the unusable free space
  index for 2 MiB, measured from /proc/buddyinfo), seed 1, held while the probes run.

it measures, with the kernel's own counters:

1. THP (enabled = madvise, defrag = madvise: faults may compact directly; the 2 MiB size
   inheriting, all put back after): a `--thp-gib` anonymous mapping with MADV_HUGEPAGE faulted in (MADV_POPULATE_WRITE):
   its AnonHugePages (its own smaps_rollup) over its size, and /proc/vmstat's thp_fault_alloc
   and thp_fault_fallback deltas, compact_stall and the time it took;
2. pools: a 2 MiB pool, then a 1 GiB pool, asked for `--pool-gib`: nr_hugepages written, then
   compaction and a retry every 0.2 s until the pool is whole or `--deadline` passes; how far it
   got and when. Each pool goes back to its size found before the next probe, through a host
   session (journaled: `hugelab recover` puts it back after a kill).

Takes the shared host lock, so it never races the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import mmap
import os
import time
from collections.abc import Iterator
from typing import Any

from hugelab.host import buddyinfo
from hugelab.host.fragment import Fragmenter, FragmentTarget
from hugelab.host.paths import REAL, parse_vmstat
from hugelab.recovery import run_session

LOCK = "/run/lock/hugelab-tests-host.lock"
MADV_POPULATE_WRITE = 23
VMSTAT = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_fail",
          "compact_success")


def vmstat() -> dict[str, int]:
    return parse_vmstat(REAL.vmstat.read_text())


def thp_probe(gib: float) -> dict[str, Any]:
    """THP modes set for the probe (enabled and defrag madvise, the 2 MiB size inheriting),
    journaled and put back after."""
    with run_session(lock_wait_s=60) as control:
        control.set_thp("madvise", "madvise")
        if REAL.mthp_enabled(2048).exists():
            control.set_mthp(2048, "inherit")
        return _thp_fault_in(gib)


def _thp_fault_in(gib: float) -> dict[str, Any]:
    size = int(gib * (1 << 30))
    v0, t0 = vmstat(), time.monotonic()
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        m.madvise(MADV_POPULATE_WRITE)
        seconds = time.monotonic() - t0
        rollup = open("/proc/self/smaps_rollup").read()
        anon_huge_kb = next(int(line.split()[1]) for line in rollup.splitlines()
                            if line.startswith("AnonHugePages:"))
    finally:
        m.close()
    d = {k: vmstat().get(k, 0) - v0.get(k, 0) for k in VMSTAT}
    faults = d["thp_fault_alloc"] + d["thp_fault_fallback"]
    return {"seconds": round(seconds, 2), "thp_coverage": round(anon_huge_kb / (size >> 10), 3),
            "fallback_share": round(d["thp_fault_fallback"] / faults, 3) if faults else None,
            **d}


def pool_probe(size_kb: int, gib: float, deadline_s: float) -> dict[str, Any]:
    pages = int(gib * (1 << 20)) // size_kb
    path = REAL.pool_file(size_kb)
    with run_session(lock_wait_s=60) as control:
        start = int(path.read_text())
        control.write(path, str(start))  # journaled as found: restored after, and by recover
        t0 = time.monotonic()
        control.writer(path, str(start + pages))
        got = int(path.read_text()) - start
        first = got
        while got < pages and time.monotonic() - t0 < deadline_s:
            with contextlib.suppress(OSError):
                control.writer(REAL.compact_memory, "1")
            time.sleep(0.2)
            control.writer(path, str(start + pages))
            got = int(path.read_text()) - start
        seconds = time.monotonic() - t0
    return {"asked": pages, "first_write": first, "reached": got,
            "reached_share": round(got / pages, 3), "seconds": round(seconds, 2),
            "whole": got >= pages}


@contextlib.contextmanager
def host_state(state: str, target: float) -> Iterator[dict[str, Any]]:
    if state == "fresh":
        t0 = time.monotonic()
        REAL.compact_memory.write_text("1")
        yield {"state": "fresh", "compact_s": round(time.monotonic() - t0, 2),
               "unusable": buddyinfo.read().unusable()}
        return
    with Fragmenter(FragmentTarget(target, seed=1)) as frag:
        rep = frag.report
        yield {"state": "fragmented", "target": target, "made": rep["after"]["unusable"],
               "before": rep["before"]["unusable"], "touched_kb": rep["touched_kb"],
               "held_kb": rep["held_kb"], "seconds": rep["seconds"],
               "missed": frag.measure()["missed"]}


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for state in ("fresh", "fragmented"):
        with host_state(state, args.target) as cond:
            row = {"condition": cond, "thp": thp_probe(args.thp_gib)}
            row["unusable_after_thp"] = buddyinfo.read().unusable()
            row["pool_2M"] = pool_probe(2048, args.pool_gib, args.deadline)
            row["pool_1G"] = pool_probe(1 << 20, args.pool_gib, args.deadline)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--pool-gib", type=float, default=4.0)
    p.add_argument("--thp-gib", type=float, default=2.0)
    p.add_argument("--deadline", type=float, default=10.0)
    args = p.parse_args()
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        measure(args)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
