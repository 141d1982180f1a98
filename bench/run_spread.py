"""Does a run's interval for an effect cover what other runs of the same experiment read?
(issue 39: a verdict in minutes is worth what it predicts for the next run)

    .venv/bin/python bench/run_spread.py STORE... [--k 3,5] [--json]

Each run in the STOREs is one request-interleaved run (the held-out series keep one store per
run: heldout_examples.py --keep; a store with several runs counts each); the runs are repeats
of one experiment on other seeds, minutes to hours apart. Per arm beside the baseline, from
each ok trial's within-trial effect (`window_hl_log_ratio`, the log-ratio of its windows
against the baseline's):
- each run's mean effect (log scale; printed as a percentage, 100 (e^x - 1)) and its standard
  error as if its blocks were independent (what a run's interval assumes), and the lag-1
  autocorrelation of its blocks' effects, in block order;
- between runs: the SD of the run means (log scale x 100, about a percentage) against the
  median within-run SE, and how many runs' 95% intervals (t, and Newey-West with n^(1/3) lags)
  hold the mean of the other runs (about 95% of them should if a run's interval covered what
  the next run reads; the others' mean is itself an estimate, so somewhat fewer);
- pooled over K runs (`--k 3,5`), with hugelab's random-effects pooling (hugelab.stats.meta:
  Paule-Mandel tau, HKSJ interval) of these run means and SEs: over every K-run subset, how
  often the pooled 95% interval holds the mean of the runs left out. (`hugelab report --across`
  pools each run's Hodges-Lehmann shift with its signed-rank SE instead: the same model, other
  per-run inputs.)
A between-run SD well above the within-run SE is a part of the effect that changes from run to
run and that no single run's interval can show. Read only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from hugelab.stats import meta

EFFECT = "window_hl_log_ratio"


def arm_series(store: Path) -> list[dict[str, list[float]]]:
    """Per run in the store: each non-baseline arm's within-trial effects, in block order."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT run_id, arm, metrics FROM trials WHERE status = 'ok' "
                          "ORDER BY run_id, block, position").fetchall()
    runs: dict[int, dict[str, list[float]]] = {}
    for run_id, arm, metrics in rows:
        m = json.loads(metrics)
        if EFFECT in m:
            runs.setdefault(run_id, {}).setdefault(arm, []).append(m[EFFECT])
    return list(runs.values())


def autocov(xs: list[float], lag: int) -> float:
    mu = statistics.fmean(xs)
    return sum((a - mu) * (b - mu) for a, b in zip(xs, xs[lag:], strict=False)) / len(xs)


def one_run(xs: list[float]) -> dict[str, float]:
    n = len(xs)
    lags = max(1, round(n ** (1 / 3)))
    nw = autocov(xs, 0) + 2 * sum((1 - k / (lags + 1)) * autocov(xs, k)
                                  for k in range(1, lags + 1))
    return {"n": n, "mean": statistics.fmean(xs), "se": statistics.stdev(xs) / math.sqrt(n),
            "se_nw": math.sqrt(max(nw, 0.0) / n), "lag1": autocov(xs, 1) / autocov(xs, 0)}


def pct(log_ratio: float) -> float:
    return 100 * math.expm1(log_ratio)


def across(runs: list[dict[str, float]]) -> dict[str, Any]:
    means = [r["mean"] for r in runs]
    covered = {"t": 0, "newey_west": 0}
    for i, r in enumerate(runs):
        others = statistics.fmean(m for j, m in enumerate(means) if j != i)
        t = stats.t.ppf(0.975, r["n"] - 1)
        covered["t"] += abs(r["mean"] - others) <= t * r["se"]
        covered["newey_west"] += abs(r["mean"] - others) <= t * r["se_nw"]
    lag1 = [r["lag1"] for r in runs]
    return {"runs": len(runs), "run_effects_pct": [pct(m) for m in means],
            "between_run_sd": 100 * statistics.stdev(means),
            "within_run_se": 100 * statistics.median(r["se"] for r in runs),
            "covered": covered, "mean_lag1": statistics.fmean(lag1),
            "lag1_positive": sum(v > 0 for v in lag1)}


def pooled_coverage(runs: list[dict[str, float]], k: int) -> dict[str, float] | None:
    """Over every k-run subset (with at least two runs left out): the share whose pooled 95%
    interval holds the mean of the runs left out."""
    if len(runs) < k + 2:
        return None
    y = np.array([r["mean"] for r in runs])
    v = np.array([r["se"] ** 2 for r in runs])
    subsets = np.array(list(itertools.combinations(range(len(runs)), k)))
    left = np.array([[i for i in range(len(runs)) if i not in s] for s in subsets])
    got = meta.pool_rows(y[subsets], v[subsets], alpha=0.05)
    others = y[left].mean(axis=1)
    held = (got["lo"] <= others) & (others <= got["hi"])
    return {"k": k, "subsets": len(subsets), "ci_holds_others": float(held.mean())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    ap.add_argument("--k", default="3,5", help="runs pooled in the subsets (default 3,5)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    per_arm: dict[str, list[dict[str, float]]] = {}
    for store in args.stores:
        for run in arm_series(store):
            for arm, xs in run.items():
                if len(xs) >= 3:
                    per_arm.setdefault(arm, []).append(one_run(xs))
    ks = [int(k) for k in args.k.split(",")]
    result = {arm: {**across(runs), "pooled": [c for k in ks
                                               if (c := pooled_coverage(runs, k)) is not None]}
              for arm, runs in per_arm.items() if len(runs) >= 3}
    if not result:
        raise SystemExit("run_spread: no arm has within-trial effects in 3 or more runs")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for arm, a in result.items():
        print(f"{arm}: {a['runs']} runs, effects {min(a['run_effects_pct']):+.2f} to "
              f"{max(a['run_effects_pct']):+.2f}%; between-run SD {a['between_run_sd']:.2f} "
              f"against a run's SE {a['within_run_se']:.2f} (median; log x 100); 95% intervals "
              f"holding the other runs' mean: {a['covered']['t']}/{a['runs']} "
              f"(Newey-West {a['covered']['newey_west']}/{a['runs']}); lag-1 autocorrelation "
              f"of the blocks' effects {a['mean_lag1']:+.2f} (mean; positive in "
              f"{a['lag1_positive']} of {a['runs']})")
        for c in a["pooled"]:
            print(f"  pooled over {c['k']} runs (every one of {c['subsets']} subsets): the 95% "
                  f"interval holds the other runs' mean in {c['ci_holds_others']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
