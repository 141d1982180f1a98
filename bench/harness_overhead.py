"""Harness overhead: a 1-second hugelab-mem trial through `hugelab run` vs run directly.

Pairs alternate (direct, harness) with the order randomized per pair. Two figures, each the
median of paired ratios:
  * metric ratio: ns/access measured through hugelab run / measured directly (perturbation);
  * wall ratio: the trial's wall time inside hugelab run (committed started..ended, including
    monitors and evidence checks) / the direct process's wall time.
Needs root (hugelab run). Usage: .venv/bin/python bench/harness_overhead.py [--pairs 15]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hugelab.workloads.build import ensure_hugelab_mem

EXP = """\
name = "overhead"
blocks = 1
seed = {seed}
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "256M"
duration = 1.0
[[arms]]
name = "4k"
backing = "4k"
"""


def direct(binary: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = subprocess.run([str(binary), "--workload", "chase", "--backing", "4k", "--size", "256M",
                          "--duration", "1.0"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    return json.loads(out.stdout)["metrics"]["ns_per_access"], wall


def harness(tmp: Path, seed: int) -> tuple[float, float]:
    exp = tmp / f"e{seed}.toml"
    exp.write_text(EXP.format(seed=seed))
    db = tmp / f"s{seed}.db"
    subprocess.run([sys.executable, "-m", "hugelab.cli", "run", str(exp), "--store", str(db),
                    "--json"], capture_output=True, text=True, check=True)
    with sqlite3.connect(db) as c:
        value, started, ended = c.execute("SELECT value, started, ended FROM trials").fetchone()
    return value, ended - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=15)
    args = ap.parse_args()
    binary = ensure_hugelab_mem()
    rng = random.Random(1)
    metric, wall = [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.pairs):
            first_direct = rng.random() < 0.5
            if first_direct:
                dv, dw = direct(binary)
                hv, hw = harness(Path(d), i)
            else:
                hv, hw = harness(Path(d), i)
                dv, dw = direct(binary)
            metric.append(hv / dv)
            wall.append(hw / dw)
            print(f"pair {i + 1:2d}: ns/access direct {dv:7.1f} harness {hv:7.1f} | "
                  f"wall direct {dw:.3f}s harness trial {hw:.3f}s", flush=True)
    print(f"median metric ratio (harness/direct): {statistics.median(metric):.4f} "
          f"(min {min(metric):.4f}, max {max(metric):.4f})")
    print(f"median wall ratio per trial (harness/direct): {statistics.median(wall):.4f}")


if __name__ == "__main__":
    main()
