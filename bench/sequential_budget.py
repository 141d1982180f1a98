"""Stopping that does not waste the budget (issue 39 item 2): today's five even looks against
`--looks auto` (a look every few blocks from the first that can decide) with the "cannot
reach the margin" statement and its futility stop, on simulated A/A runs of server instances.

Each simulated run is `--until-verdict --alpha 0.01 --margin 0.01` on an example with two
claims (alpha 0.005 each, Bonferroni) and the default budget of 30 blocks. A block's A/A
log-ratio: the fresh instances' offset (SD tau, the field's "SD of trial effects" 1.2-1.9%;
Gaussian or Student t3 with that SD) plus the trial's own window noise (SD 0.6%, the field's
request-window SE), and optionally a constant lean of the twin (-0.5%, the developers' runs);
the last rows are real differences (-3% and -2%: `faster` is then the right verdict).

Per row: `faster`/`slower` (false on an A/A: alpha is 0.005), `equivalent` share, mean blocks, the share
stopped before the budget, the share stopped as futile, the share that said "cannot reach
±1%", how often that statement was wrong (the run, continued with the same plan and no
futility stop, ended `equivalent` after all), and how often the margin it named as reachable
held (that margin's TOST passed on all 30 blocks).

Run: .venv/bin/python bench/sequential_budget.py [--sims 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hugelab.stats import run_sequential, sequential_plan
from hugelab.stats.reach import replay
from hugelab.stats.sequential import SequentialPlan, look_schedule

N, ALPHA, MARGIN, WINDOW_SD = 30, 0.005, 0.01, 0.006


def runs(rng: np.random.Generator, sims: int, tau: float, kind: str, lean: float) -> np.ndarray:
    between = rng.normal(0, tau, (sims, N)) if kind == "normal" else \
        rng.standard_t(3, (sims, N)) * tau / math.sqrt(3)
    return math.log1p(lean) + between + rng.normal(0, WINDOW_SD, (sims, N))


def row(name: str, d: np.ndarray, plan: SequentialPlan, futility: bool) -> str:
    if futility:
        r = replay(d, plan)
        decision, blocks, futile = r.decision, r.blocks, r.futile.mean()
        said = ~np.isnan(r.said_at)
        wrong = f"{np.mean(r.plain[said] == 'equivalent'):.3f}" if said.any() else "-"
        kept = f"{r.kept[said].mean():.2f}" if said.any() else "-"
        said_s = f"{said.mean():.2f}"
    else:
        decision, look = run_sequential(d, plan)
        blocks = np.asarray(plan.look_sizes, dtype=float)[look.astype(int) - 1]
        futile, said_s, wrong, kept = 0.0, "-", "-", "-"
    fp = np.mean(np.isin(decision, ["faster", "slower"]))
    return (f"| {name} | {fp:.3f} | {np.mean(decision == 'equivalent'):.3f} | "
            f"{blocks.mean():.1f} | {np.mean(blocks < N):.2f} | {futile:.2f} | {said_s} | "
            f"{wrong} | {kept} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.time()
    five = sequential_plan(N, looks=5, alpha=ALPHA, margin=MARGIN)
    auto = sequential_plan(N, alpha=ALPHA, margin=MARGIN, look_sizes=look_schedule(N, ALPHA))
    dense = sequential_plan(N, alpha=ALPHA, margin=MARGIN,
                            look_sizes=look_schedule(N, ALPHA, every=1))
    print(f"{args.sims} simulated runs per row, seed {args.seed}; budget {N} blocks, alpha "
          f"{ALPHA} per claim, margin ±{100 * MARGIN:g}%, window noise SD {100 * WINDOW_SD:g}%")
    print(f"looks: five {five.look_sizes}, auto {auto.look_sizes}, every block "
          f"{dense.look_sizes[0]}..{N}")
    print()
    print("| A/A (SD of trial effects, noise, lean or effect) | design | faster/slower | "
          "equivalent | mean blocks | stopped early | futile | said 'cannot reach' | "
          "said wrongly | named margin held |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    cases = [(0.003, "normal", 0.0), (0.006, "normal", 0.0), (0.012, "normal", 0.0),
             (0.015, "normal", 0.0), (0.019, "normal", 0.0), (0.015, "t3", 0.0),
             (0.019, "t3", 0.0), (0.012, "normal", -0.005), (0.015, "normal", -0.005),
             (0.0, "normal", -0.03), (0.019, "normal", -0.02)]
    for tau, kind, lean in cases:
        d = runs(rng, args.sims, tau, kind, lean)
        case = f"{100 * tau:.1f}%, {kind}" + (f", lean {100 * lean:+.1f}%" if lean else "")
        for name, plan, fut in [("five looks (before)", five, False),
                                ("auto + reach", auto, True),
                                ("every block + reach", dense, True)]:
            print(row(f"{case} | {name}", d, plan, fut))
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
