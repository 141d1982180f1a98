"""Does where a buffer lands in physical memory change how fast it is read? (issue 39 item 1:
the last cause on its list of where fresh server instances' offsets come from)

    .venv/bin/python bench/placement/placement.py [--pages 256] [--groups 1,4,16,64] [--json]

Builds chase.c (-O2 -Wall -Wextra) and, under the host test lock with the 2 MiB pool raised to
PAGES for the bench and put back after (checked), runs it for each group size on hugetlb 2 MiB
pages and on 4 KiB pages (THP off for them): per group of GROUP consecutive 2 MiB pieces, a
chase over one line in each of its 4 KiB pages, in ROUNDS rounds over every group. If where a
group lies set its speed, the groups' means would differ by more than the rounds' noise
allows, and a group fast in the first half of the rounds would be fast in the second.
Prints, per backing and group size: the groups' spread of round means (median ns per step,
max/min), the placement SD (% of the median: the groups' SD left after the rounds' noise) and
the split-half correlation of the groups' speeds.

Then, whether fresh processes land where an earlier one was: PROCESSES processes (`--processes`,
default 6) one after another each touch 128 MiB of 4 KiB private anonymous pages (THP off for
them) and read their page frame numbers; printed, for each one after the first, the largest
share of its frames that any earlier one had held. A process started fresh gets a new layout
only where that share is low. (A server's shared memory is allocated otherwise; this shows
what the page allocator does for a fresh process, not for a given server.)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
POOL = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
LOCK = "/run/lock/hugelab-tests-host.lock"


def build(out: Path) -> Path:
    exe = out / "chase"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(HERE / "chase.c")], check=True)
    return exe


def chase(exe: Path, pages: int, group: int, small: bool, rounds: int) -> list[list[float]]:
    """Each group's ns per step, one value per round."""
    out = subprocess.run([str(exe), str(pages), str(rounds), "400000", str(group),
                          str(int(small))], check=True, capture_output=True, text=True).stdout
    return [[float(v) for v in line.split()[1:-2]] for line in out.splitlines()]


def placement(groups: list[list[float]]) -> dict[str, float | None]:
    """The groups' spread of means, the SD their placement adds beyond the rounds' noise
    (one-way random effects), and the split-half correlation of their speeds."""
    means = [statistics.fmean(g) for g in groups]
    rounds = len(groups[0])
    within = statistics.fmean(statistics.variance(g) for g in groups)
    med = statistics.median(means)
    between = statistics.variance(means) if len(means) > 1 else 0.0
    half = rounds // 2
    corr = (statistics.correlation([statistics.fmean(g[:half]) for g in groups],
                                   [statistics.fmean(g[half:]) for g in groups])
            if len(groups) > 2 else None)
    return {"groups": len(groups), "median": med, "max_over_min": max(means) / min(means),
            "noise_sd_pct": 100 * within ** 0.5 / med,
            "placement_sd_pct": 100 * max(between - within / rounds, 0.0) ** 0.5 / med,
            "split_half_corr": corr}


def measure(exe: Path, pages: int, groups: list[int], rounds: int) -> list[dict[str, object]]:
    return [{"backing": "4k" if small else "hugetlb-2M", "group_mib": 2 * g,
             **placement(chase(exe, pages, g, small, rounds))}
            for g in groups for small in (False, True)]


TOUCH = r"""
import ctypes, mmap, struct, sys
n = 128 << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_NOHUGEPAGE)
for off in range(0, n, 4096):
    m[off] = 1
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
with open("/proc/self/pagemap", "rb") as f:
    f.seek(addr // 4096 * 8)
    raw = f.read(n // 4096 * 8)
print(" ".join(str(e & ((1 << 55) - 1)) for (e,) in struct.iter_unpack("<Q", raw)))
"""


def frames_reused(processes: int = 6) -> list[float]:
    """Per fresh process after the first: the largest share of its 4 KiB frames that any
    earlier process held."""
    sets = [set(subprocess.run([sys.executable, "-c", TOUCH], check=True, capture_output=True,
                               text=True).stdout.split()) for _ in range(processes)]
    return [max(len(now & before) / len(now) for before in sets[:i])
            for i, now in enumerate(sets) if i]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=256, help="2 MiB pieces mapped (default 256)")
    ap.add_argument("--groups", default="1,4,16,64", help="pieces per chase (default 1,4,16,64)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds over every group (default 6)")
    ap.add_argument("--processes", type=int, default=6,
                    help="fresh processes for the frames' reuse (default 6)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    with tempfile.TemporaryDirectory() as tmp, open(LOCK, "w") as lock:
        exe = build(Path(tmp))
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = POOL.read_text().strip()
        try:
            POOL.write_text(str(max(int(before), args.pages)))  # never lower another's pool
            if int(POOL.read_text()) < args.pages:
                raise SystemExit(f"the 2 MiB pool reached {POOL.read_text().strip()} of "
                                 f"{args.pages} pages")
            rows = measure(exe, args.pages, groups, args.rounds)
            reused = frames_reused(args.processes)
        finally:
            POOL.write_text(before)
        if POOL.read_text().strip() != before:
            raise SystemExit(f"the 2 MiB pool is {POOL.read_text().strip()}, was {before}")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "?")
    if args.json:
        print(json.dumps({"cpu": cpu, "rows": rows, "frames_reused": reused}, indent=1))
        return 0
    print(f"{cpu}; ns per step of a chase over one line in each 4 KiB page of a group, "
          f"{args.rounds} rounds")
    print(f"{'backing':11s} {'group':>7s} {'groups':>6s} {'median':>7s} {'max/min':>7s} "
          f"{'noise SD%':>9s} {'placement SD%':>13s} {'split-half r':>12s}")
    for r in rows:
        corr = r["split_half_corr"]
        print(f"{r['backing']:11s} {r['group_mib']:5d}Mi {r['groups']:6d} {r['median']:7.2f} "
              f"{r['max_over_min']:7.2f} {r['noise_sd_pct']:9.2f} {r['placement_sd_pct']:13.2f} "
              f"{'' if corr is None else f'{corr:+12.2f}'}")
    print("fresh processes touching 128 MiB one after another: the largest share of each "
          "one's 4 KiB frames an earlier one held: " + ", ".join(f"{r:.0%}" for r in reused))
    return 0


if __name__ == "__main__":
    sys.exit(main())
