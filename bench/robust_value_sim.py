"""A request-interleaved arm's trial value, plain vs robust, checked on real windows (issue 39):
the A/A per-block SD and mean, the sequential decision's false `faster`/`slower` and
`equivalent` shares, and, with one arm's windows shifted by +3%, bias and power.

A trial value was the geometric mean of the arm's window rates, so a block's d_b (the log-ratio
of two arms' trial values) was the mean of the trial's per-ABBA-block log-ratios; now it is
their Hodges-Lehmann shift (stats.windows.robust_arm_rates, `hl`). Their median is shown
beside them (`median`; the first version of the change), all three from
stats.windows.paired_shifts, arm 1 against arm 0.

Data, real: JSON files of trials, each either a list of per-block log-ratios of an A/A pair
(two servers; /tmp/win/redis16.json) or {"arms", "blocks", "ops", "ns"} of every window
(three identical servers; bench run with /tmp/win2/exp3.py). A simulated run draws, per
experiment block, one real trial (its instance) and resamples its ABBA blocks with
replacement (its within-trial noise, heavy tails kept), then gives the run's d_b to the
stopper of `--until-verdict --alpha 0.01 --margin 0.01` (alpha 0.005 a claim, `auto` looks,
futility; slot_adjust_sim.replay). A/A: arm 1 against arm 0, the two servers' labels swapped
at random per draw (they are identical, so which one is the twin is chance; without the swap
the 16 trials' own mean, +0.5% for redis16, would be taken for the truth). Effect: arm 1's
windows' rates times 1.03 (every window, before the estimators).

Run: PYTHONPATH=bench:. .venv/bin/python bench/robust_value_sim.py FILE.json [...] [--sims 2000]
     [--blocks 30] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np
from slot_adjust_sim import ALPHA, MARGIN, replay

from hugelab.stats import sequential_plan
from hugelab.stats.sequential import look_schedule
from hugelab.stats.signedrank import hl_and_interval
from hugelab.stats.windows import block_arm_means, paired_shifts

Trial = np.ndarray  # (blocks, arms) mean log rate per complete block; 2 arms: col 1 the d


def load(path: str) -> list[Trial]:
    """Each trial's y[k, a]; a file of per-block log-ratios gives (0, d) rows."""
    out = []
    for t in json.load(open(path)):
        if isinstance(t, dict):
            _, y = block_arm_means(t["arms"], t["blocks"], t["ops"], t["ns"])
        else:
            d = np.asarray(t, dtype=np.float64)
            y = np.column_stack([np.zeros_like(d), d])
        out.append(y)
    return out


ESTIMATORS: dict[str, Callable[[np.ndarray], float]] = {
    how: (lambda y, how=how: float(paired_shifts(y, 0, how)[1]))
    for how in ("mean", "median", "hl")}


def draws(trials: list[Trial], sims: int, blocks: int, shift: float, seed: int
          ) -> dict[str, np.ndarray]:
    """(sims, blocks) d_b per estimator: a real trial per block, its blocks resampled."""
    rng = np.random.default_rng(seed)
    out = {k: np.empty((sims, blocks)) for k in ESTIMATORS}
    pick = rng.integers(0, len(trials), size=(sims, blocks))
    for s in range(sims):
        for b in range(blocks):
            y = trials[pick[s, b]]
            y = y[rng.integers(0, y.shape[0], size=y.shape[0])].copy()
            if rng.random() < 0.5:  # identical servers: which is "arm 0" is the draw's
                y[:, [0, 1]] = y[:, [1, 0]]
            y[:, 1] += shift
            for name, f in ESTIMATORS.items():
                out[name][s, b] = f(y)
    return out


def table(path: str, trials: list[Trial], args: argparse.Namespace) -> list[str]:
    plan = sequential_plan(args.blocks, alpha=ALPHA, margin=MARGIN, better="higher",
                           look_sizes=look_schedule(args.blocks, ALPHA))
    aa = draws(trials, args.sims, args.blocks, 0.0, args.seed)
    real = draws(trials, args.sims, args.blocks, math.log(1.03), args.seed + 1)
    name = path.rsplit("/", 1)[-1]
    nblk = [t.shape[0] for t in trials]
    rows = []
    for est in ESTIMATORS:
        d, r = aa[est], real[est]
        decision, stop = replay(lambda n, d=d: d[:, :n], args.sims, plan)
        power, pstop = replay(lambda n, r=r: r[:, :n], args.sims, plan)
        fp = np.mean(np.isin(decision, ["faster", "slower"]))
        est_hl, _, _, _ = hl_and_interval(r, 0.05)
        rows.append(
            f"| {name} ({len(trials)} trials, {min(nblk)}-{max(nblk)} blocks) | {est} | "
            f"{100 * d.std(axis=1, ddof=1).mean():.2f}% | {100 * d.mean():+.3f}% | {fp:.4f} | "
            f"{np.mean(decision == 'equivalent'):.3f} | {stop.mean():.1f} | "
            f"{100 * (np.mean(np.expm1(est_hl)) - 0.03):+.3f} | "
            f"{100 * r.std(axis=1, ddof=1).mean():.2f}% | {np.mean(power == 'faster'):.3f} | "
            f"{pstop.mean():.1f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.time()
    print(f"{args.sims} runs a row, {args.blocks}-block budget, alpha {ALPHA} a claim, "
          f"margin {MARGIN}")
    print("| data | trial value | A/A per-block SD | A/A mean d_b | false faster/slower | "
          "`equivalent` | blocks used | +3%: bias (points) | +3%: per-block SD | power +3% | "
          "+3%: blocks used |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.files:
        for line in table(path, load(path), args):
            print(line, flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
