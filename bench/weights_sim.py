"""What weighting each trial by its own standard error buys an A/A verdict (issue 39): the
signed-rank sequential design against two weighted ones on the same simulated runs, built from
real held-out stores.

    .venv/bin/python bench/weights_sim.py STORE... [--blocks 41] [--sims 4000] [--seed 1]

Each STORE is a request-interleaved run with an A/A twin (bench/aa_floor.py reads the same).
Two ways to make a run of `--blocks` A/A trials from them, each a row pair:
- `model`: a real run's trials' SEs in their order (cycled, from a random start), each trial's
  effect Gaussian with variance instance^2 + slope x SE^2 (bench/aa_floor.weighting's fit over
  the stores): steal's clustering kept, its size from the fit;
- `resampled`: a real run's own (effect - its median, SE) pairs drawn with replacement, each
  deviation's sign flipped at random (so that every test's null centre is 0): the effects'
  own tails and their own relation to their SEs, nothing fitted.
Designs, both `--alpha 0.01` over two claims (0.005 each), margin ±1%, hugelab's `auto` looks
and boundaries (hugelab.stats.sequential) for `--blocks` most blocks, no futility stop:
- `signed-rank`: run_sequential, every trial weighted alike (hugelab's test where trials carry
  no SE);
- `Knapp-Hartung`: at each look a random-effects mean with weights 1/(tau^2 + SE^2) (tau^2 by
  DerSimonian-Laird from the trials so far) and a Knapp-Hartung interval (its variance not
  below the fixed-effect one), t with n-1 df at the boundaries' own tail probabilities (tried,
  exceeds alpha);
- `weighted`: hugelab's test where trials carry an SE (hugelab.stats.weighted, run_weighted):
  the same weights, the self-normalised (sign-flip) z of each tested centre.
Per row: the false `faster`/`slower` share (α is 0.005), the `equivalent` share, mean blocks.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from aa_floor import one_store, weighting
from scipy import stats

from hugelab.stats import run_sequential, sequential_plan, weighted
from hugelab.stats.sequential import SequentialPlan, look_schedule, replay, run_weighted

ALPHA, MARGIN = 0.005, 0.01


def knapp_hartung(d: np.ndarray, se2: np.ndarray, plan: SequentialPlan
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The plan replayed (hugelab.stats.sequential.replay) with the weighted statistic on
    rows of d (effects) and se2 (their squared SEs): its t with n-1 df carried to the z scale
    by its tail probability, so that the plan's bounds apply as they are."""
    delta = math.log1p(plan.margin)

    def weighted(n: int, e: float) -> tuple[np.ndarray, np.ndarray]:
        m, sd = random_effects(d[:, :n], se2[:, :n])
        et = stats.t.ppf(stats.norm.cdf(e), n - 1)
        z = stats.norm.ppf(stats.t.cdf(m / sd, n - 1))
        return z, ((m + delta) / sd >= et) & ((m - delta) / sd <= -et)

    return replay(d.shape[0], plan, weighted)


def random_effects(x: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the DerSimonian-Laird random-effects mean (hugelab.stats.weighted's weights)
    and its Knapp-Hartung SD."""
    n = x.shape[1]
    w = weighted.weights(x, s2)
    m = (w * x).sum(1) / w.sum(1)
    kh = (w * (x - m[:, None]) ** 2).sum(1) / (n - 1)
    return m, np.sqrt(np.maximum(kh, 1.0) / w.sum(1))


def simulated(runs: list[list[tuple[float, float]]], fit: dict[str, float], how: str,
              n: int, sims: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`sims` A/A runs of n trials each: (effects, squared SEs)."""
    d, se2 = np.empty((sims, n)), np.empty((sims, n))
    tau2, slope = (fit["tau"] / 100) ** 2, max(fit["se_slope"], 0.0)
    for i in range(sims):
        pairs = runs[rng.integers(len(runs))]
        if how == "model":
            start = rng.integers(len(pairs))
            s = np.array([pairs[(start + j) % len(pairs)][1] for j in range(n)])
            se2[i] = s ** 2
            d[i] = rng.normal(0.0, np.sqrt(tau2 + slope * s ** 2))
        else:
            eff = np.array([p[0] for p in pairs])
            pick = rng.integers(len(pairs), size=n)
            d[i] = (eff - np.median(eff))[pick] * rng.choice((-1.0, 1.0), size=n)
            se2[i] = np.array([p[1] for p in pairs])[pick] ** 2
    return d, se2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    ap.add_argument("--blocks", type=int, default=41)
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    found = [one_store(s) for s in args.stores]
    fit = weighting(found, "hl")
    runs = [r["hl"]["pairs"] for r in found]
    plan = sequential_plan(args.blocks, alpha=ALPHA, margin=MARGIN,
                           look_sizes=look_schedule(args.blocks, ALPHA))
    rng = np.random.default_rng(args.seed)
    print(f"{len(runs)} runs; fit: slope {fit['se_slope']:.2f}, instance SD {fit['tau']:.2f}%; "
          f"{args.blocks} blocks at most, looks {list(plan.look_sizes)}\n")
    print("| runs made | design | false faster/slower | `equivalent` | mean blocks |")
    print("|---|---|---|---|---|")
    for how in ("model", "resampled"):
        d, se2 = simulated(runs, fit, how, args.blocks, args.sims, rng)
        for name, (decision, stop) in (("signed-rank", run_sequential(d, plan)),
                                       ("Knapp-Hartung", knapp_hartung(d, se2, plan)),
                                       ("weighted", run_weighted(d, np.sqrt(se2), plan))):
            blocks = np.array(plan.look_sizes)[stop.astype(int) - 1]
            wrong = float(np.isin(decision, ("faster", "slower")).mean())
            print(f"| {how} | {name} | {wrong:.4f} | "
                  f"{float((decision == 'equivalent').mean()):.3f} | {blocks.mean():.1f} |")


if __name__ == "__main__":
    main()
