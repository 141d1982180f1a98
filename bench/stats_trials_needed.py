"""How many blocks does hugelab's paired design need for a verdict on a 2.4% effect?

Simulates the Red Hat sysbench-memory comparison (THP vs 1 GiB static huge pages: 2.4%
faster, per-trial SD 3.3% of the mean, heavy tails) at 99.99% confidence and finds the
smallest number of blocks (one trial of each arm per block) at which hugelab's verdict is
"faster" in at least 90% of simulated experiments. The study ran 5,000 trials per arm.

Noise models per trial, log scale, SD 3.3% in every case; in the first three the arms are
independent (no shared machine noise for pairing to cancel: the least favourable case):
  normal     Gaussian
  t3         Student t with 3 df (heavy tails), scaled to SD 3.3%
  stalls     Gaussian 3.3% plus 1% of trials slowed by 20 sigma (outliers like the GDB builds)
  shared     Gaussian 3.3%, half of its variance shared by the two trials of a block (machine
             state both arms see, e.g. the concurrent load in the study); pairing cancels it

Run: .venv/bin/python bench/stats_trials_needed.py [--sims 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from hugelab.stats import run_sequential, sequential_plan
from hugelab.stats.paired import verdicts
from hugelab.stats.plan import plan

SIGMA = 0.033
EFFECT = 0.024
CONFIDENCE = 0.9999
POWER = 0.90
ARTICLE_TRIALS = 5000


def noise(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.normal(0, SIGMA, shape)
    if kind == "t3":
        return rng.standard_t(3, shape) * SIGMA / math.sqrt(3)
    x = rng.normal(0, SIGMA, shape)
    return x + (rng.random(shape) < 0.01) * 20 * SIGMA


def arms(rng: np.random.Generator, sims: int, n: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "shared":
        common = rng.normal(0, SIGMA / math.sqrt(2), (sims, n))
        own_b = rng.normal(0, SIGMA / math.sqrt(2), (sims, n))
        own_c = rng.normal(0, SIGMA / math.sqrt(2), (sims, n))
        base = np.exp(math.log(131.55) + common + own_b)
        cand = np.exp(math.log(131.55) + math.log1p(-EFFECT) + common + own_c)
        return base, cand
    base = np.exp(math.log(131.55) + noise(rng, (sims, n), kind))
    cand = np.exp(math.log(131.55) + math.log1p(-EFFECT) + noise(rng, (sims, n), kind))
    return base, cand


def power(n: int, kind: str, sims: int, seed: int) -> float:
    base, cand = arms(np.random.default_rng(seed), sims, n, kind)
    return float(np.mean(verdicts(base, cand, alpha=1 - CONFIDENCE) == "faster"))


def blocks_for_power(kind: str, sims: int, seed: int) -> tuple[int, float]:
    """Smallest n with simulated power >= POWER (bisection; power rises with n)."""
    lo, hi = 15, 400
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(mid, kind, sims, seed) >= POWER:
            hi = mid
        else:
            lo = mid
    return hi, power(hi, kind, sims, seed)


def unpaired_t_per_arm() -> int:
    """Per-arm n for a two-sample t-test (normal noise), the article's style of analysis."""
    z = stats.norm.isf((1 - CONFIDENCE) / 2) + stats.norm.ppf(POWER)
    return math.ceil(2 * (z * SIGMA / abs(math.log1p(-EFFECT))) ** 2)


def sequential_row(n_max: int, kind: str, sims: int, seed: int) -> tuple[float, float]:
    sp = sequential_plan(n_max, looks=5, alpha=1 - CONFIDENCE)
    base, cand = arms(np.random.default_rng(seed + 1), sims, n_max, kind)
    decision, look = run_sequential(np.log(cand) - np.log(base), sp)
    sizes = np.array(sp.look_sizes)
    return float(np.mean(decision == "faster")), float(np.mean(sizes[look.astype(int) - 1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.time()
    print(
        f"effect {EFFECT:.1%} faster, per-trial SD {SIGMA:.1%}, confidence {CONFIDENCE:.2%}, "
        f"power {POWER:.0%}, {args.sims} simulated experiments per point, seed {args.seed}"
    )
    print(
        f"article: {ARTICLE_TRIALS} trials per arm; unpaired t-test would need "
        f"{unpaired_t_per_arm()} per arm under normal noise"
    )
    print()
    print(
        "| noise | blocks for 90% power (simulated) | power there | plan() from a 20-block pilot "
        "| 5-look sequential: power, mean blocks used | trials per arm vs article |"
    )
    print("|---|---|---|---|---|---|")
    for kind in ("normal", "t3", "stalls", "shared"):
        n, pw = blocks_for_power(kind, args.sims, args.seed)
        b, c = arms(np.random.default_rng(args.seed + 7), 1, 20, kind)
        planned = plan(
            np.log(c[0]) - np.log(b[0]), effect=EFFECT, confidence=CONFIDENCE, power=POWER
        ).blocks_needed
        n_max = 5 * math.ceil(n * 1.05 / 5)
        spw, used = sequential_row(n_max, kind, args.sims, args.seed)
        print(
            f"| {kind} | {n} | {pw:.3f} | {planned} | {spw:.3f}, {used:.0f} of {n_max} "
            f"| {n} vs {ARTICLE_TRIALS} ({ARTICLE_TRIALS / n:.0f}x fewer) |"
        )
    print()
    print(f"elapsed {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
