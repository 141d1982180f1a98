"""Power of a factorial's verdicts: how many blocks does a 2x2 or a 2x4x2 design need?

Simulates hugelab's factorial analysis (hugelab.stats.factorial.design_power: within-block
contrasts of log values, signed-rank verdicts, Holm across every main effect and interaction
of the design) with per-trial noise SD 3.3% (the Red Hat table in the references) and a shared
2% block effect, for a true 3% main effect of factor A and a true 3% A x B interaction, all
other effects zero. Prints, per design and number of blocks, the share of simulated
experiments in which each claim gets a verdict in the right direction (power), and the
largest false-positive share among the claims whose true effect is zero.

The report's Holm family also holds every cell-vs-baseline comparison, so a report needs a
little more than this; the figures are for the factor claims alone.

Run: .venv/bin/python bench/factorial_power.py [--sims 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

from hugelab.stats import factorial as fx

SIGMA = 0.033
EFFECT = math.log(1.03)


def layout(shape: tuple[int, ...]) -> fx.Layout:
    names = "ABC"[: len(shape)]
    levels = tuple(tuple(f"{n}{i}" for i in range(k)) for n, k in zip(names, shape, strict=True))
    cells = tuple(itertools.product(*(range(k) for k in shape)))
    return fx.Layout(tuple(names), levels, (True,) * len(shape), cells)


def row(shape: tuple[int, ...], blocks: int, sims: int, seed: int) -> str:
    lay = layout(shape)
    main = fx.EffectSpec("main", 0, 1)
    inter = fx.EffectSpec("interaction", 0, 1, by=1, by_level=1)
    power = fx.design_power(lay, effects={main: EFFECT, inter: EFFECT}, sigma=SIGMA,
                            n_blocks=blocks, n_sim=sims, seed=seed)
    nulls = [v for s, v in power.items() if s not in (main, inter)
             and not (s.kind == "main" and s.factor == 1)]  # B's main effect is 0 too
    b_main = power.get(fx.EffectSpec("main", 1, 1), 0.0)
    design = "x".join(map(str, shape))
    return (f"| {design} | {len(power)} | {blocks} | {power[main]:.2f} | {power[inter]:.2f} | "
            f"{max([b_main, *nulls]):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.monotonic()
    print("| design | claims | blocks | power: A main 3% | power: A x B 3% | worst false positive |")
    print("|---|---|---|---|---|---|")
    for shape, blocks in [((2, 2), 10), ((2, 2), 20), ((2, 2), 40), ((2, 2), 80),
                          ((2, 4, 2), 12), ((2, 4, 2), 24), ((2, 4, 2), 48)]:
        print(row(shape, blocks, args.sims, args.seed))
    print(f"\n({args.sims} simulated experiments per row, {time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
