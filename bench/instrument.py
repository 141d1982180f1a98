"""Instrument quality: does hugelab-mem see what huge pages buy, where sysbench does not?

Measures, on this host (root needed: it grows hugetlb pools and always restores them):
  1. pointer-chase latency on a large working set with 4k / THP / hugetlb-2M / hugetlb-1G
     backing (hugelab-mem `chase`), next to `sysbench memory --memory-access-mode=rnd`
     with --memory-hugetlb=off/on (SysV SHM_HUGETLB, 2 MiB pages);
  2. sequential read bandwidth, hugelab-mem `seq-read` vs sysbench `--memory-oper=read
     --memory-access-mode=seq`, same working set, 4 KiB pages for both.
Repetitions are interleaved and summarised by medians because the host is shared.

Usage: .venv/bin/python bench/instrument.py [--reps 5] [--size 2G] [--duration 2]
                                            [--only all|latency|seq] [--json F]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from hugelab.errors import CommandError, WorkloadError
from hugelab.host.paths import REAL, parse_selected
from hugelab.proc import run, which
from hugelab.trial.native import NativeTarget
from hugelab.units import parse_size
from hugelab.workloads.build import ensure_hugelab_mem
from hugelab.workloads.hugelab_mem import HugelabMem
from hugelab.workloads.hugelab_mem.evidence import backing_problem

CHASE_BACKINGS = ("4k", "thp", "hugetlb-2M", "hugetlb-1G")
SYSBENCH_RE = re.compile(r"([\d.]+) MiB transferred \(([\d.]+) MiB/sec\)")
SEQ_BLOCKS = 16  # sysbench seq: passes over the block per run
POOL_FAILURE = re.compile(r"exited with 3|HugeTLB|Cannot allocate memory")


class Pools:
    """Hugetlb pools grown to at least `want` pages and put back as found on exit.

    Pools are never shrunk (other users of this host may hold pages), and `top_up`
    re-grows a pool that someone else lowered between runs.
    """

    def __init__(self, want: dict[int, int]) -> None:
        self.want = want
        self.original = {kb: int(REAL.pool_file(kb).read_text()) for kb in want}
        self.disturbed = 0

    def top_up(self) -> None:
        for kb, pages in self.want.items():
            path = REAL.pool_file(kb)
            if self.free(kb) >= pages:
                continue
            self.disturbed += 1
            missing = pages - self.free(kb)
            path.write_text(f"{int(path.read_text()) + missing}\n")
            free = self.free(kb)
            if free < pages:
                raise SystemExit(f"could not reserve {pages} free {kb} kB pages ({free} free)")

    @staticmethod
    def free(kb: int) -> int:
        return int(REAL.pool_file(kb, "free_hugepages").read_text())

    def restore(self) -> None:
        for kb, pages in self.original.items():
            REAL.pool_file(kb).write_text(f"{pages}\n")


@contextmanager
def reserved_pools(want: dict[int, int]) -> Iterator[Pools]:
    pools = Pools(want)
    try:
        pools.top_up()
        pools.disturbed = 0
        yield pools
    finally:
        pools.restore()


def hugelab_run(workload: str, backing: str, size: int, duration: float) -> float:
    """One hugelab-mem trial; its primary metric. Fails loudly if the backing was not real."""
    res = HugelabMem(workload=workload, size_bytes=size, duration_s=duration).run(
        NativeTarget(), backing)
    problem = backing_problem(backing, res.evidence)
    if problem:
        raise SystemExit(f"hugelab-mem {workload}/{backing}: {problem}")
    return res.value


def sysbench_argv(size: int, mode: str, hugetlb: bool, total: int) -> list[str]:
    return [which("sysbench"), "memory", f"--memory-block-size={size}",
            f"--memory-total-size={total}", "--memory-oper=read",
            f"--memory-access-mode={mode}", f"--memory-hugetlb={'on' if hugetlb else 'off'}",
            "--threads=1", "--time=0", "run"]


def sysbench_mib_s(argv: list[str]) -> float:
    out = run(argv, timeout=600).stdout
    m = SYSBENCH_RE.search(out)
    if m is None:
        raise SystemExit(f"unexpected sysbench output:\n{out}")
    return float(m.group(2))


def sysbench_rnd_ns(size: int, hugetlb: bool) -> float:
    """ns per access of sysbench's random reads (one 4-byte int load per 4 bytes 'moved')."""
    mib_s = sysbench_mib_s(sysbench_argv(size, "rnd", hugetlb, size))
    return 4.0 / (mib_s * 2**20) * 1e9


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def with_pool_retry(pools: Pools, fn: Callable[[], float], tries: int = 4) -> float:
    """Run fn with the pools topped up; retry when another user shrank a pool meanwhile."""
    for attempt in range(tries):
        pools.top_up()
        try:
            return fn()
        except (WorkloadError, CommandError) as exc:
            if attempt == tries - 1 or not POOL_FAILURE.search(exc.message):
                raise
            print(f"  pool shrunk under us, retrying: {exc.message.splitlines()[-1]}",
                  file=sys.stderr)
    raise AssertionError("unreachable")


def latency_round(size: int, duration: float, samples: dict[str, list[float]],
                  pools: Pools) -> None:
    for backing in CHASE_BACKINGS:
        key = f"hugelab chase {backing}"
        samples[key].append(with_pool_retry(
            pools, partial(hugelab_run, "chase", backing, size, duration)))
        print(f"  {key}: {samples[key][-1]:.2f} ns", file=sys.stderr)
    for hugetlb in (False, True):
        key = f"sysbench rnd hugetlb={'on' if hugetlb else 'off'}"
        samples[key].append(with_pool_retry(
            pools, partial(sysbench_rnd_ns, size, hugetlb)))
        print(f"  {key}: {samples[key][-1]:.2f} ns", file=sys.stderr)


def bandwidth_round(size: int, duration: float, samples: dict[str, list[float]],
                    rep: int) -> None:
    """One pair; the order alternates between repetitions so drift hits both sides."""
    argv = sysbench_argv(size, "seq", False, size * SEQ_BLOCKS)
    steps = [("hugelab seq-read 4k", partial(hugelab_run, "seq-read", "4k", size, duration)),
             ("sysbench seq read", partial(sysbench_mib_s, argv))]
    for key, fn in steps if rep % 2 == 0 else steps[::-1]:
        samples[key].append(fn())
        print(f"  {key}: {samples[key][-1]:.0f} MiB/s", file=sys.stderr)


RATIOS = {  # name: (numerator, denominator)
    "hugelab chase 4k / hugetlb-1G": ("hugelab chase 4k", "hugelab chase hugetlb-1G"),
    "hugelab chase 4k / hugetlb-2M": ("hugelab chase 4k", "hugelab chase hugetlb-2M"),
    "hugelab chase 4k / thp": ("hugelab chase 4k", "hugelab chase thp"),
    "sysbench rnd hugetlb off / on": ("sysbench rnd hugetlb=off", "sysbench rnd hugetlb=on"),
    "seq read hugelab / sysbench": ("hugelab seq-read 4k", "sysbench seq read"),
}


def summarise(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per ratio: ratio of the medians, and the median of the per-repetition ratios."""
    out = {}
    for name, (num, den) in RATIOS.items():
        if samples[num] and samples[den]:
            paired = [a / b for a, b in zip(samples[num], samples[den], strict=True)]
            out[name] = {"of_medians": median(samples[num]) / median(samples[den]),
                         "median_paired": median(paired)}
    return out


def report(samples: dict[str, list[float]], ratios: dict[str, dict[str, float]]) -> str:
    lines = ["| measurement | unit | median | all repetitions |", "|---|---|---|---|"]
    for key, vals in samples.items():
        if not vals:
            continue
        unit = "MiB/s" if "seq" in key else "ns/access"
        lines.append(f"| {key} | {unit} | {median(vals):.1f} | "
                     f"{', '.join(f'{v:.1f}' for v in vals)} |")
    lines += ["", "| ratio | of medians | median of per-repetition ratios |", "|---|---|---|"]
    lines += [f"| {k} | **{v['of_medians']:.2f}×** | {v['median_paired']:.2f}× |"
              for k, v in ratios.items()]
    return "\n".join(lines)


def host_line() -> str:
    thp = parse_selected(REAL.thp_enabled.read_text())
    load = os.getloadavg()
    return (f"kernel {os.uname().release}, {os.cpu_count()} CPUs, THP '{thp}', "
            f"load average at end {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--size", type=parse_size, default=2 << 30)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", choices=("all", "latency", "seq"), default="all")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench/instrument.py needs root (it grows hugetlb pools)")
    print(f"hugelab-mem: {ensure_hugelab_mem()}", file=sys.stderr)
    size = args.size
    # hugelab-mem and sysbench (which rounds its SHM segment up) each take one set at a time
    want = {1048576: math.ceil(size / 2**30), 2048: math.ceil(size / 2**21) + 2}
    samples: dict[str, list[float]] = {}
    for key in [f"hugelab chase {b}" for b in CHASE_BACKINGS] + [
            "sysbench rnd hugetlb=off", "sysbench rnd hugetlb=on",
            "hugelab seq-read 4k", "sysbench seq read"]:
        samples[key] = []
    with reserved_pools(want) as pools:
        for rep in range(args.reps):
            print(f"repetition {rep + 1}/{args.reps}", file=sys.stderr)
            if args.only in ("all", "latency"):
                latency_round(size, args.duration, samples, pools)
            if args.only in ("all", "seq"):
                bandwidth_round(size, args.duration, samples, rep)
        disturbed = pools.disturbed
    ratios = summarise(samples)
    print(report(samples, ratios))
    print(f"\n{host_line()}; pools topped up mid-run {disturbed} time(s)")
    if args.json:
        args.json.write_text(json.dumps({"samples": samples, "ratios": ratios,
                                         "size_bytes": size, "reps": args.reps}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
