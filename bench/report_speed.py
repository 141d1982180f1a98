"""Time `hugelab report` on a store of 1,000,000 trials (250,000 blocks x 4 arms).

    .venv/bin/python bench/report_speed.py [--blocks 250000] [--store /tmp/hugelab-report-bench.db]

Builds the store once with a direct executemany into the store's tables (a few seconds), then
times `hugelab report --json` and `--html` (`python -m hugelab.cli report`) in
fresh processes, best of --repeat, with the child's CPU time: wall time on a shared machine
depends on its load, CPU time much less. Effects injected: thp -5%, hugetlb-2M -6%, hugetlb-1G -6.5% (times, lower is better),
0.5% of trials flagged, 0.1% failed, rare 20x stalls.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hugelab.store import Store  # noqa: E402

ARMS = (("4k", "4k", 1.0), ("thp", "thp", 0.95), ("hugetlb-2M", "hugetlb-2M", 0.94),
        ("hugetlb-1G", "hugetlb-1G", 0.935))
PAGE_KB = {"4k": 4, "thp": 4, "hugetlb-2M": 2048, "hugetlb-1G": 1048576}


def _json_cols(backing: str, rng: np.random.Generator) -> tuple[str, str, str, str]:
    huge = backing == "thp"
    alloc = int(rng.integers(480, 512)) if huge else 0
    evidence = {"KernelPageSize_kB": PAGE_KB[backing], "Rss_kB": 1048576,
                "AnonHugePages_kB": 1048576 if huge else 0, "check": "ok", "reason": ""}
    monitors = {"vmstat": {"thp_fault_alloc": alloc, "thp_fault_fallback": 512 - alloc if huge else 0,
                           "pgfault": 262144 if backing == "4k" else 2048},
                "meminfo_before": {}, "meminfo_after": {}}
    prov = {"hugelab": "0.1.0", "kernel": "6.1.0", "accel": "native", "target": "native",
            "backing": backing, "thp": None, "thp_defrag": None}
    return (json.dumps({"ns_per_load": 1.0}), json.dumps(evidence), json.dumps(monitors),
            json.dumps(prov))


def build_store(path: Path, blocks: int, seed: int = 1) -> int:
    """Write one run of `blocks` blocks x 4 arms; returns the run id."""
    rng = np.random.default_rng(seed)
    exp = {"name": "report-bench", "baseline": "4k", "blocks": blocks, "seed": seed,
           "arms": [{"name": a, "backing": b, "thp": None, "thp_defrag": None, "pools": [],
                     "description": ""} for a, b, _ in ARMS],
           "workload": {"kind": "hugelab-mem"}}
    with Store(path) as store:
        run_id, _ = store.get_or_create_run(f"bench-{blocks}-{seed}", "report-bench", exp, {})
        store.set_run_status(run_id, "finished", {})
        block_effect = np.exp(rng.normal(0, 0.02, blocks))
        drift = np.exp(np.linspace(0, 0.03, blocks))
        cols = {b: _json_cols(b, rng) for _, b, _ in ARMS}
        rows = []
        for a_idx, (arm, backing, factor) in enumerate(ARMS):
            noise = np.exp(rng.normal(0, 0.03, blocks))
            stall = rng.random(blocks) < 0.0005
            value = 100.0 * factor * block_effect * drift * noise * np.where(stall, 20.0, 1.0)
            u = rng.random(blocks)
            status = np.where(u < 0.001, "failed", np.where(u < 0.006, "flagged", "ok"))
            metrics, evidence, monitors, prov = cols[backing]
            for blk in range(blocks):
                st = str(status[blk])
                rows.append((run_id, blk, (blk + a_idx) % 4, arm, "native", st,
                             None if st == "failed" else float(value[blk]), "ns_per_load", "ns",
                             "lower", metrics, evidence, monitors, prov,
                             "asked for thp, but only 3% of the mapping is in huge pages"
                             if st == "flagged" else None,
                             "workload exited 1" if st == "failed" else None,
                             float(blk), float(blk) + 1.0))
        with store.db:
            store.db.executemany(
                """INSERT INTO trials (run_id, block, position, arm, target, status, value,
                   metric, unit, better, metrics, evidence, monitors, provenance, flag, error,
                   started, ended) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                rows)
    return run_id


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def _best(argv: list[str], repeat: int) -> str:
    runs = [_time(argv) for _ in range(repeat)]
    walls = ", ".join(f"{w:.2f}" for w, _ in runs)
    best = min(runs)
    return f"best {best[0]:.2f} s wall ({best[1]:.2f} s CPU); all runs: {walls} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=250_000)
    ap.add_argument("--store", type=Path,
                    default=Path(tempfile.gettempdir()) / "hugelab-report-bench.db")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the store even if present")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (best is kept)")
    args = ap.parse_args()
    if args.rebuild and args.store.exists():
        args.store.unlink()
    if not args.store.exists():
        t0 = time.perf_counter()
        build_store(args.store, args.blocks)
        with Store(args.store) as store:  # as a store written trial by trial would be
            store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        print(f"built {args.store} ({4 * args.blocks:,} trials) in {time.perf_counter() - t0:.1f} s")
    base = [sys.executable, "-m", "hugelab.cli", "report", "--store", str(args.store)]
    html = Path(tempfile.gettempdir()) / "hugelab-report-bench.html"
    print(f"trials: {4 * args.blocks:,}  cores: {os.cpu_count()}  "
          f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"report --json: {_best([*base, '--json'], args.repeat)}")
    print(f"report --html: {_best([*base, '--html', str(html)], args.repeat)}  "
          f"({html.stat().st_size / 1e6:.2f} MB, 9 figures)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
