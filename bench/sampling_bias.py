"""Does sampling a paired trial's process tree favour one backing? A native trial's tree is
sampled every 0.25 s while its workload runs (smaps_rollup walks each process's page tables,
longer for 4 KiB mappings than for huge ones); Varnish's keeper, reading smaps and running
varnishstat every half second, had made jemalloc's THP look 3-6% faster (docs/benchmarks.md,
"Varnish request by request"). This runs a paired example both ways on the same seeds,
alternating which goes first, and prints every arm's effect against the baseline.

    PYTHONPATH=bench .venv/bin/python bench/sampling_bias.py --out DIR \
        [--example memcached-large-pages] [--seeds 701,702,703] [--blocks 10]

Mode `shipped` is hugelab as it is; mode `sparse` the same code with the tree sampler's
interval set to 5 s in that process (its first look still comes early, so a trial has one or
two samples instead of a dozen). Each run is `hugelab run COPY --blocks N --store
DIR/<mode>-<seed>.db` on the example with only its seed and name changed, under the host test
lock. Per store: each arm's effect, the median of its per-block log-ratios to the baseline, in
percent; then, per arm, the mean over seeds of sparse minus shipped.
"""

from __future__ import annotations

import argparse
import json
import math
import runpy
import sqlite3
import sys
from pathlib import Path
from statistics import mean, median
from typing import Any

from heldout_examples import ROOT, held_out, run_copy

SPARSE_INTERVAL_S = 5.0


def sparse_run(argv: list[str]) -> None:
    """`hugelab ARGV` in this process with the tree sampler's interval SPARSE_INTERVAL_S."""
    from hugelab.trial import procscan
    init = procscan.TreeSampler.__init__

    def sparse(self: Any, members: Any, interval_s: float = 0.25, proc: str = "/proc") -> None:
        init(self, members, max(interval_s, SPARSE_INTERVAL_S), proc)
    procscan.TreeSampler.__init__ = sparse  # type: ignore[method-assign]
    sys.argv = ["hugelab", *argv]
    runpy.run_module("hugelab.cli", run_name="__main__")


def effects(store: Path) -> dict[str, float]:
    """Each arm's median per-block log-ratio to the run's baseline (first arm), in %."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT block, arm, value FROM trials WHERE status = 'ok' "
                          "AND value > 0 ORDER BY id").fetchall()
    by_block: dict[int, dict[str, float]] = {}
    arms: list[str] = []
    for block, arm, value in rows:
        by_block.setdefault(block, {})[arm] = value
        if arm not in arms:
            arms.append(arm)
    return {arm: 100 * median(math.log(b[arm] / b[base]) for b in by_block.values()
                              if arm in b and base in b)
            for base in [baseline(store)] for arm in arms if arm != base}


def baseline(store: Path) -> str:
    """The run's baseline arm, from its experiment as stored."""
    with sqlite3.connect(store) as db:
        text = db.execute("SELECT experiment FROM runs ORDER BY id LIMIT 1").fetchone()[0]
    return str(json.loads(text).get("baseline"))


def one(example: str, seed: int, mode: str, blocks: int, out: Path) -> dict[str, float]:
    text = held_out((ROOT / "examples" / f"{example}.toml").read_text(), example, seed)
    store = out / f"{mode}-{seed}.db"
    store.unlink(missing_ok=True)
    run, _ = run_copy(text, out, ["--blocks", str(blocks), "--store", str(store)],
                      lambda args: [sys.executable, __file__, "--sparse-run", *args]
                      if mode == "sparse" else [sys.executable, "-m", "hugelab.cli", *args])
    if run.returncode != 0:
        raise SystemExit(f"{store.name}: rc {run.returncode}: {(run.stdout + run.stderr)[-600:]}")
    eff = effects(store)
    print(f"{store.name}: " + ", ".join(f"{a} {e:+.2f}%" for a, e in eff.items()), flush=True)
    return eff


def main() -> int:
    if sys.argv[1:2] == ["--sparse-run"]:
        sparse_run(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where the stores go")
    ap.add_argument("--example", default="memcached-large-pages")
    ap.add_argument("--seeds", default="701,702,703")
    ap.add_argument("--blocks", type=int, default=10)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    diffs: dict[str, list[float]] = {}
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        modes = ("shipped", "sparse") if i % 2 == 0 else ("sparse", "shipped")
        got = {m: one(args.example, seed, m, args.blocks, args.out) for m in modes}
        for arm, e in got["sparse"].items():
            diffs.setdefault(arm, []).append(e - got["shipped"][arm])
    for arm, d in diffs.items():
        print(f"{arm}: sparse - shipped, mean over {len(d)} seeds {mean(d):+.2f} points "
              f"({', '.join(f'{x:+.2f}' for x in d)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
