"""What a time budget buys an A/A at a measured floor (issue 39, item 2): `--until-verdict`
with 30 blocks (the default most) against the blocks a 5-minute budget holds, and against a
plan cut short by the budget (its last look moved earlier, spending the alpha left).

Each simulated run is `--until-verdict --alpha 0.01 --margin 0.01` with two claims (alpha
0.005 each) and `auto` looks; a block's A/A log-ratio is Gaussian with the between-trial SD
given (`--sd`, percent: PostgreSQL's held-out floor was 1.57%). Per row: the false
`faster`/`slower` share (alpha is 0.005), the `equivalent` share, mean blocks. No futility
stop (it only ends runs sooner without a claim). The last rows find the blocks an
`equivalent` in 9 of 10 runs needs at that floor.

Run: .venv/bin/python bench/budget_blocks.py [--sims 4000] [--seed 1] [--sd 1.57]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from hugelab.stats import run_sequential, sequential_plan
from hugelab.stats.sequential import SequentialPlan, look_schedule, truncated

ALPHA, MARGIN = 0.005, 0.01


def plan(n: int) -> SequentialPlan:
    return sequential_plan(n, alpha=ALPHA, margin=MARGIN, look_sizes=look_schedule(n, ALPHA))


def row(name: str, p: SequentialPlan, d: np.ndarray) -> None:
    decision, stop = run_sequential(d[:, :p.max_blocks], p)
    blocks = np.array(p.look_sizes)[stop.astype(int) - 1]
    wrong = float(np.isin(decision, ("faster", "slower")).mean())
    print(f"| {name} | {list(p.look_sizes)} | {wrong:.4f} | "
          f"{float((decision == 'equivalent').mean()):.3f} | {blocks.mean():.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sd", type=float, default=1.57, help="between-trial SD, percent")
    args = ap.parse_args()
    d = np.random.default_rng(args.seed).normal(0.0, args.sd / 100, (args.sims, 80))
    print(f"A/A at a between-trial SD of {args.sd}%, {args.sims} runs a row\n")
    print("| design | looks (blocks) | false faster/slower | `equivalent` | mean blocks |")
    print("|---|---|---|---|---|")
    row("30 blocks (the default most)", plan(30), d)
    row("38 blocks (5 min at 7.6 s)", plan(38), d)
    for cut in (33, 35):
        full = plan(38)
        done = sum(1 for n in full.look_sizes if n < cut)
        row(f"38 planned, cut at {cut}", truncated(full, done, cut), d)
    for n in (45, 50, 55, 60, 70, 80):
        row(f"{n} blocks", plan(n), d)
    # both one-sided tests pass 9 times in 10: |mean| <= delta - e se with P 0.9, a z of 1.645
    # on each side; the signed-rank test's efficiency 3/pi against the mean's
    need = ((2.67 + 1.645) * args.sd / 100 / math.log1p(MARGIN)) ** 2 / (3 / math.pi)
    print(f"\n(a fixed-sample rule of thumb for 9 in 10: about {need:.0f} blocks)")


if __name__ == "__main__":
    main()
