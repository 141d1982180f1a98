"""Does a run's interval for an effect cover what other runs of the same experiment read?
(issue 39: a verdict in minutes is worth what it predicts for the next run)

    .venv/bin/python bench/run_spread.py STORE... [--json]

Each STORE is one request-interleaved run (the held-out series keep theirs: heldout_examples.py
--keep); the runs are repeats of one experiment on different seeds and hours. Per arm beside
the baseline, from each ok trial's within-trial effect (`window_hl_log_ratio`, the log-ratio of
its windows against the baseline's):
- each run's mean effect and its standard error as if its blocks were independent (what a
  run's interval assumes), and the lag-1 autocorrelation of its blocks' effects, in block order;
- between runs: the SD of the run means against the median within-run SE, and how many runs'
  95% intervals (t, and Newey-West with n^(1/3) lags) hold the mean of the other runs (about
  95% of them should if a run's interval covered the next run's reading).
- pooled over K runs (`--k 3,5`), as `hugelab report --across` pools them (hugelab.stats.meta:
  random effects, Paule-Mandel tau, HKSJ interval, prediction interval for a next run): over
  random K-run subsets, how often the pooled 95% interval holds the mean of the runs left out,
  and how often the prediction interval holds a left-out run's own mean.
A between-run SD well above the within-run SE is a part of the effect that changes from run to
run (hour, host state, where memory lands) and that no single run's interval can show.
Read only.
"""

from __future__ import annotations

import argparse
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


def arm_series(store: Path) -> dict[str, list[float]]:
    """Each non-baseline arm's within-trial effects, in block order (read only)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT arm, metrics FROM trials WHERE status = 'ok' "
                          "ORDER BY block, position").fetchall()
    out: dict[str, list[float]] = {}
    for arm, metrics in rows:
        m = json.loads(metrics)
        if EFFECT in m:
            out.setdefault(arm, []).append(m[EFFECT])
    return out


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


def across(runs: list[dict[str, float]]) -> dict[str, Any]:
    means = [r["mean"] for r in runs]
    covered = {"t": 0, "newey_west": 0}
    for i, r in enumerate(runs):
        others = statistics.fmean(m for j, m in enumerate(means) if j != i)
        t = stats.t.ppf(0.975, r["n"] - 1)
        covered["t"] += abs(r["mean"] - others) <= t * r["se"]
        covered["newey_west"] += abs(r["mean"] - others) <= t * r["se_nw"]
    lag1 = [r["lag1"] for r in runs]
    return {"runs": len(runs), "run_means_pct": [100 * m for m in means],
            "between_run_sd_pct": 100 * statistics.stdev(means),
            "within_run_se_pct": 100 * statistics.median(r["se"] for r in runs),
            "covered": covered, "mean_lag1": statistics.fmean(lag1),
            "lag1_positive": sum(v > 0 for v in lag1)}


def pooled_coverage(runs: list[dict[str, float]], k: int, draws: int = 2000,
                    seed: int = 1) -> dict[str, float] | None:
    """Over random k-run subsets: the share whose pooled 95% interval holds the mean of the
    runs left out, and whose prediction interval holds one left-out run's mean."""
    if len(runs) < k + 2:
        return None
    rng = np.random.default_rng(seed)
    y = np.array([r["mean"] for r in runs])
    v = np.array([r["se"] ** 2 for r in runs])
    picks = np.array([rng.permutation(len(runs)) for _ in range(draws)])
    inside, rest = picks[:, :k], picks[:, k:]
    got = meta.pool_rows(y[inside], v[inside], alpha=0.05)
    others = y[rest].mean(axis=1)
    one = y[rest[:, 0]]
    ci = (got["lo"] <= others) & (others <= got["hi"])
    pi = (got["pred_lo"] <= one) & (one <= got["pred_hi"])
    return {"k": k, "draws": draws, "ci_holds_others": float(ci.mean()),
            "pi_holds_next": float(pi.mean()) if k >= 3 else float("nan")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    ap.add_argument("--k", default="3,5", help="runs pooled in the subsets (default 3,5)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    per_arm: dict[str, list[dict[str, float]]] = {}
    for store in args.stores:
        for arm, xs in arm_series(store).items():
            if len(xs) >= 3:
                per_arm.setdefault(arm, []).append(one_run(xs))
    ks = [int(k) for k in args.k.split(",")]
    result = {arm: {**across(runs), "pooled": [c for k in ks
                                               if (c := pooled_coverage(runs, k)) is not None]}
              for arm, runs in per_arm.items() if len(runs) >= 3}
    if not result:
        raise SystemExit("run_spread: no arm has within-trial effects in 3 or more of the runs")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for arm, a in result.items():
        print(f"{arm}: {a['runs']} runs, run means {min(a['run_means_pct']):+.2f} to "
              f"{max(a['run_means_pct']):+.2f}%; between-run SD {a['between_run_sd_pct']:.2f}% "
              f"against a run's SE {a['within_run_se_pct']:.2f}% (median); 95% intervals "
              f"holding the other runs' mean: {a['covered']['t']}/{a['runs']} "
              f"(Newey-West {a['covered']['newey_west']}/{a['runs']}); lag-1 autocorrelation "
              f"of the blocks' effects {a['mean_lag1']:+.2f} (mean; positive in "
              f"{a['lag1_positive']} of {a['runs']})")
        for c in a["pooled"]:
            print(f"  pooled over {c['k']} runs ({c['draws']} random subsets): 95% interval "
                  f"holds the other runs' mean {c['ci_holds_others']:.0%}; prediction "
                  f"interval holds a next run's {c['pi_holds_next']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
