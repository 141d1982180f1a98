"""Time the statistics that dominate a large report, at 250,000 pairs.

    .venv/bin/python bench/stats_speed.py [--n 250000] [--skip-tails]

Times `paired.compare` (no blocks: exact Hodges-Lehmann and signed-rank intervals over every
pair), `paired.compare` with 1,000 block labels, `tails.compare_tails` (default n_boot=2000)
and `blocks.variance_components` with n/4 blocks of 4, on log-normal data with a -1% shift.
Best of --repeat runs, wall and process CPU seconds; prints the load average alongside.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH, if set, wins

from hugelab.stats import blocks, paired, tails  # noqa: E402


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0, time.process_time() - c0))
    return min(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-tails", action="store_true", help="skip compare_tails (slow before)")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(7)
    b = 100 * np.exp(rng.normal(0, 0.03, n))
    c = 99 * np.exp(rng.normal(0, 0.03, n)) * np.where(rng.random(n) < 0.0005, 20.0, 1.0)
    groups = np.arange(n) * 1000 // n
    quads = np.arange(n) // 4
    print(f"n = {n:,}  cores: {os.cpu_count()}  load average before: {os.getloadavg()[0]:.2f}")
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("compare (every pair)", lambda: paired.compare(b, c)),
        ("compare (1,000 blocks)", lambda: paired.compare(b, c, blocks=groups)),
        (f"variance_components ({n // 4:,} blocks)",
         lambda: blocks.variance_components(np.log(c / b), quads)),
    ]
    if not args.skip_tails:
        cases.append(("compare_tails (n_boot=2000)", lambda: tails.compare_tails(b, c)))
    for name, fn in cases:
        wall, cpu = _best(fn, args.repeat)
        print(f"{name:<38} {wall:8.2f} s wall  {cpu:8.2f} s CPU", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
