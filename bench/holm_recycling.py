"""Why `--until-verdict` does not pass a decided comparison's alpha on (issue 39, item 2).

The idea: a run with k comparisons tests each at alpha / k (Bonferroni); once one is decided,
Holm's step-down carried over the looks (Maurer & Bretz 2013's graphical approach) would test
the open ones at alpha / (k - r). For an A/A twin beside an arm that differs, that doubles the
twin's alpha after the other arm's verdict and decides it sooner.

It does not hold here, because each comparison makes two claims whose nulls are exclusive (no
difference; a difference of at least the margin). A decided comparison has rejected one of
them; the other may still be true (an arm `slower` by exactly the margin has a true
non-equivalence null), and closed testing keeps its share in every intersection that holds it.
Passing the share on then lets a false claim through more often than alpha. The replay below
measures it: arm 1 at exactly +margin (so `equivalent` is its false claim) beside an A/A arm 2
(`faster`/`slower` its false claim), 30 blocks, looks as `--looks auto` places them, alpha 0.01.

Run: .venv/bin/python bench/holm_recycling.py [--sims 40000] [--seed 7]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from hugelab.stats import sequential_plan, signedrank
from hugelab.stats.sequential import SequentialPlan, look_schedule

N, ALPHA, MARGIN = 30, 0.01, 0.01


def replay(ds: list[np.ndarray], plans: list[SequentialPlan], recycle: bool) -> np.ndarray:
    """Each run's decision per comparison: plans[r] once r comparisons are decided (recycle),
    else plans[0] throughout (Bonferroni). Futility is not replayed."""
    k, rows, first = len(ds), ds[0].shape[0], plans[0]
    decision = np.full((rows, k), "inconclusive", dtype=object)
    live = np.ones((rows, k), dtype=bool)
    c = np.array([p.bounds for p in plans])
    e = np.array([p.equivalence_bounds for p in plans])
    delta = math.log1p(MARGIN)
    for look, size in enumerate(first.look_sizes):
        z = [signedrank.z_statistic(d[:, :size]) for d in ds]
        tost = [np.minimum(signedrank.z_statistic(d[:, :size] + delta),
                           -signedrank.z_statistic(d[:, :size] - delta)) for d in ds]
        while True:  # a decision raises the others' level at this same look
            level = np.minimum(k - live.sum(axis=1), k - 1) if recycle else np.zeros(rows, int)
            found = False
            for j in range(k):
                hit = np.abs(z[j]) >= c[level, look]
                verdict = np.where(hit, np.where(z[j] < 0, "faster", "slower"),
                                   np.where(tost[j] >= e[level, look], "equivalent", ""))
                now = live[:, j] & (verdict != "")
                if now.any():
                    found = True
                    decision[now, j], live[now, j] = verdict[now], False
            if not found or not recycle:
                break
    return decision


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sizes = look_schedule(N, ALPHA / 2)
    plans = [sequential_plan(N, alpha=a, margin=MARGIN, look_sizes=sizes)
             for a in (ALPHA / 2, ALPHA)]
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.sims)
    print(f"looks {sizes}, alpha {ALPHA}, {args.sims} runs a row (the rate's SE at alpha: "
          f"{se:.4f})")
    print("arm 1 SD | arm 1 slower | design | false equivalent (arm 1) | false difference "
          "(arm 2) | family-wise")
    for sd in (0.006, 0.010, 0.015):
        rng = np.random.default_rng(args.seed)
        edge = rng.normal(math.log1p(MARGIN), sd, (args.sims, N))
        twin = rng.normal(0.0, 0.012, (args.sims, N))
        for name, recycle in (("Bonferroni", False), ("Holm carried over", True)):
            d = replay([edge, twin], plans, recycle)
            eq1 = d[:, 0] == "equivalent"
            diff2 = np.isin(d[:, 1], ["faster", "slower"])
            print(f"{sd:.3f} | {np.mean(d[:, 0] == 'slower'):.3f} | {name} | {eq1.mean():.4f} | "
                  f"{diff2.mean():.4f} | {(eq1 | diff2).mean():.4f}")


if __name__ == "__main__":
    main()
