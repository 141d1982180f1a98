"""What a server keeper's read costs, by page size: the keeper (hugelab.workloads.serverkeep)
reads a kept server's memory picture (`servermem.process_memory`: smaps_rollup, the full smaps
and status) every half second in hugelab's own guests, where the stop comes through the
server's own protocol. Both smaps files walk the process's page tables, whose size depends on
the page size: the read is itself a treatment if it costs one arm more than the other.

    .venv/bin/python bench/keeper_cost.py [--sizes 256,1024] [--reads 30] [--json]

For each size and backing (4 KiB: MADV_NOHUGEPAGE; THP: MADV_HUGEPAGE, host THP madvise or
always), a child process maps and touches that much anonymous memory and waits; this process
reads its picture `--reads` times and prints the median wall time of one read, the THP the
picture saw (the backing checked) and the share of one CPU that reads every 0.5 s take;
beside it, one read of smaps_rollup alone, which the trial scope's tree sampler makes for
every member every 0.25 s while a paired native trial runs (hugelab.trial.contain.TrialScope);
and the tree sampler itself (procscan.TreeSampler over the child alone, without the scan of
/proc for the trial's members that a trial's sampler also makes, the same for either arm) for
`--sampler-s` seconds: its samples, how many of them walked the page tables, the RSS peak it
read and the share of one CPU it took; then the keeper's picture as shipped
(serverkeep.Picture, a look every half second) as long: its walks and its CPU.
Read only (the host's THP mode is not changed: under `never` the THP rows say so).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from hugelab.trial import procscan
from hugelab.workloads.serverkeep import InPlace, Picture
from hugelab.workloads.servermem import process_memory

CHILD = r"""
import mmap, sys
n = int(sys.argv[1]) << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_HUGEPAGE if sys.argv[2] == "thp" else mmap.MADV_NOHUGEPAGE)
for off in range(0, n, 4096):
    m[off] = 1
print("ready", flush=True)
sys.stdin.read()
"""
INTERVAL_S = 0.5  # the keeper's, in hugelab's own guests
SAMPLER_S = 0.25  # the trial scope's tree sampler's


def sampled(pid: int, seconds: float) -> dict[str, float]:
    """The tree sampler over `pid` for `seconds`: its samples and its own CPU share (this
    process's CPU time while the main thread sleeps: the sampler thread's)."""
    cpu0, t0 = time.process_time(), time.monotonic()
    tree = procscan.TreeSampler(lambda: [pid]).start()
    time.sleep(seconds)
    out = tree.stop()
    share = (time.process_time() - cpu0) / (time.monotonic() - t0)
    # walks: samples that read smaps_rollup (every one before the walk budget, 2026-12-02)
    return {"samples": float(str(out["samples"])),
            "walks": float(str(out.get("walks", out["samples"]))),
            "rss_peak_mib": float(str(out["rss_kb"])) / 1024, "sampler_cpu_share": share}


def kept(pid: int, seconds: float) -> dict[str, float]:
    """The keeper's picture of `pid` as shipped (serverkeep.Picture: a look every half second,
    its walks within their budget) for `seconds`: its walks and the share of one CPU its
    looks took."""
    picture, cpu, t0 = Picture(InPlace(), pid), 0.0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        c0 = time.thread_time()
        picture.look()
        cpu += time.thread_time() - c0
        time.sleep(INTERVAL_S)
    return {"keeper_walks": float(picture.walks.count),
            "keeper_cpu_share": cpu / (time.monotonic() - t0)}


def one(size_mib: int, backing: str, reads: int, sampler_s: float) -> dict[str, object]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(size_mib), backing],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        times, rollup, picture = [], [], {}
        for _ in range(reads):
            t0 = time.perf_counter()
            picture = process_memory(child.pid)
            t1 = time.perf_counter()
            with open(f"/proc/{child.pid}/smaps_rollup") as f:
                f.read()
            rollup.append(time.perf_counter() - t1)
            times.append(t1 - t0)
        tree = {**sampled(child.pid, sampler_s), **kept(child.pid, sampler_s)}
    finally:
        child.kill()
        child.wait()
    ms, rms = 1000 * statistics.median(times), 1000 * statistics.median(rollup)
    return {"size_mib": size_mib, "backing": backing, "read_ms": ms,
            "cpu_share_at_2_per_s": ms / 1000 / INTERVAL_S, "rollup_ms": rms,
            "rollup_cpu_share_at_4_per_s": rms / 1000 / SAMPLER_S,
            "anon_thp_mib": int(str(picture.get("anon_huge_kb") or 0)) // 1024, **tree}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,1024", help="MiB per child (default 256,1024)")
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--sampler-s", type=float, default=4.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [one(int(s), b, args.reads, args.sampler_s) for s in args.sizes.split(",")
            for b in ("4k", "thp")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'size':>8s} {'backing':8s} {'keeper ms':>9s} {'CPU at 2/s':>10s} "
          f"{'rollup ms':>9s} {'CPU at 4/s':>10s} {'THP seen':>9s} {'sampler':>8s} "
          f"{'walks':>6s} {'RSS peak':>9s} {'its CPU':>8s} {'keeper walks':>12s} "
          f"{'its CPU':>8s}")
    for r in rows:
        print(f"{r['size_mib']:6d}Mi {r['backing']:8s} {r['read_ms']:9.2f} "
              f"{r['cpu_share_at_2_per_s']:10.2%} {r['rollup_ms']:9.2f} "
              f"{r['rollup_cpu_share_at_4_per_s']:10.2%} {r['anon_thp_mib']:7d}Mi "
              f"{r['samples']:8.0f} {r['walks']:6.0f} {r['rss_peak_mib']:7.0f}Mi "
              f"{r['sampler_cpu_share']:8.2%} {r['keeper_walks']:12.0f} "
              f"{r['keeper_cpu_share']:8.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
