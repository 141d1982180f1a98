"""Where an A/A twin's trial-to-trial spread comes from: the windows inside each trial, or the
server instances that differ from trial to trial (issue 39, item 1).

    .venv/bin/python bench/aa_floor.py STORE... [--json]

Each STORE is a request-interleaved run with an A/A twin (an arm named `X-again` beside `X`).
Every ok trial of the twin holds its within-trial effect against `X` (the paired windows'
Hodges-Lehmann shift, `window_hl_log_ratio`, which is the log-ratio of the recorded values) and
its standard error from those windows (`window_hl_se_log`); the mean-based pair
(`window_log_ratio`, `window_se_log`) is a second estimator of the same thing. Fresh servers
start every trial, so

    Var(trial effects) = E[within-trial SE^2] + Var(instance offsets)

and the instance part is what several instances per arm per trial could average away (k
instances: the spread becomes sqrt(between^2 - instance^2 (1 - 1/k))). If the within-trial part is
the spread, only more measured requests per minute lower the floor. Per run and pooled per kind
(each run's variance weighted by its degrees of freedom), with a 90% chi-square interval for
the between-trial SD (the within part is estimated from thousands of windows, taken as known).
Read only: it opens the stores and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

ESTIMATORS = {"hl": ("window_hl_log_ratio", "window_hl_se_log"),
              "mean": ("window_log_ratio", "window_se_log")}


def twin_trials(store: Path) -> tuple[str, list[dict[str, float]]]:
    """The twin's name and its ok trials' metrics (read only)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        arms = [r[0] for r in db.execute("SELECT DISTINCT arm FROM trials")]
        twins = [a for a in arms if a.endswith("-again") and a[:-len("-again")] in arms]
        if not twins:
            raise SystemExit(f"{store}: no A/A twin (an arm X-again beside X)")
        rows = db.execute("SELECT metrics FROM trials WHERE arm = ? AND status = 'ok' "
                          "ORDER BY block", (twins[0],)).fetchall()
    return twins[0], [json.loads(m) for (m,) in rows]


def split(effects: list[float], ses: list[float]) -> dict[str, float]:
    """Between-trial SD, within-trial RMS SE and the instance SD left over, in %."""
    n = len(effects)
    mean = sum(effects) / n
    between = sum((e - mean) ** 2 for e in effects) / (n - 1)
    within = sum(s * s for s in ses) / n
    lo, hi = (between * (n - 1) / stats.chi2.ppf(q, n - 1) for q in (0.95, 0.05))
    return {"n": n, "between_sd": 100 * math.sqrt(between),
            "between_sd_lo": 100 * math.sqrt(lo), "between_sd_hi": 100 * math.sqrt(hi),
            "within_se": 100 * math.sqrt(within),
            "instance_sd": 100 * math.sqrt(max(between - within, 0.0)),
            "instance_sd_hi": 100 * math.sqrt(max(hi - within, 0.0)),
            "instance_share": max(between - within, 0.0) / between if between else 0.0,
            "df": n - 1, "between_var": between, "within_var": within}


def one_store(store: Path) -> dict[str, Any]:
    twin, trials = twin_trials(store)
    out: dict[str, Any] = {"store": str(store), "twin": twin}
    for name, (eff, se) in ESTIMATORS.items():
        have = [m for m in trials if eff in m and se in m]
        if len(have) < 3:
            raise SystemExit(f"{store}: fewer than 3 trials of {twin} carry {eff}")
        out[name] = split([m[eff] for m in have], [m[se] for m in have])
        out[name]["pairs"] = [(m[eff], m[se]) for m in have]
    return out


def weighting(runs: list[dict[str, Any]], name: str) -> dict[str, float]:
    """Whether a trial's own SE says how far its effect strays (pooled over runs): the slope of
    each trial's squared deviation from its run's median on its squared SE (1: the SE is
    calibrated; the intercept is the instance variance), and by how much inverse-variance
    weights 1/v, v the fitted line at the trial's SE^2, would cut the variance of a run's mean
    against equal weights (the mean over runs of mean(v) x mean(1/v), true where the line is):
    a candidate, not what hugelab's tests do."""
    x, y, gains = [], [], []
    for r in runs:
        d = np.array([e for e, _s in r[name]["pairs"]])
        se2 = np.array([s * s for _e, s in r[name]["pairs"]])
        x += list(se2)
        y += list((d - np.median(d)) ** 2)
    fit = np.polyfit(np.array(x), np.array(y), 1)
    tau2, slope = max(float(fit[1]), 0.0), max(float(fit[0]), 0.0)
    for r in runs:
        v = tau2 + slope * np.array([s * s for _e, s in r[name]["pairs"]])
        gains.append(float(np.mean(v) * np.mean(1 / v)))
    return {"se_slope": float(fit[0]), "tau": 100 * math.sqrt(tau2),
            "variance_gain": float(np.mean(gains)), "gain_max": max(gains)}


def pooled(runs: list[dict[str, Any]], name: str) -> dict[str, float]:
    df = sum(r[name]["df"] for r in runs)
    between = sum(r[name]["between_var"] * r[name]["df"] for r in runs) / df
    within = sum(r[name]["within_var"] * r[name]["n"] for r in runs) / \
        sum(r[name]["n"] for r in runs)
    lo, hi = (between * df / stats.chi2.ppf(q, df) for q in (0.95, 0.05))
    inst = max(between - within, 0.0)
    return {"runs": len(runs), "df": df, "between_sd": 100 * math.sqrt(between),
            "between_sd_lo": 100 * math.sqrt(lo), "between_sd_hi": 100 * math.sqrt(hi),
            "within_se": 100 * math.sqrt(within), "instance_sd": 100 * math.sqrt(inst),
            "instance_sd_hi": 100 * math.sqrt(max(hi - within, 0.0)),
            "instance_share": inst / between if between else 0.0,
            **{f"sd_with_{k}_instances": 100 * math.sqrt(between - inst * (1 - 1 / k))
               for k in (1, 2, 3)}}


def kind_of(store: Path) -> str:
    return store.stem.split("-")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    args = ap.parse_args()
    runs = [one_store(s) for s in args.stores]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        kinds.setdefault(kind_of(Path(r["store"])), []).append(r)
    result = {"runs": runs, "pooled": {k: {e: pooled(v, e) for e in ESTIMATORS}
                                      for k, v in kinds.items()},
              "weighting": {k: weighting(v, "hl") for k, v in kinds.items()}}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'run':34s} {'n':>3s}  {'between SD [90%]':>19s}  {'within SE':>9s}  "
          f"{'instance SD':>11s} {'(<=)':>6s}  share   (% of the effect, HL; mean)")
    for r in runs:
        h, m = r["hl"], r["mean"]
        print(f"{Path(r['store']).stem:34s} {h['n']:3d}  {h['between_sd']:5.2f} "
              f"[{h['between_sd_lo']:.2f}, {h['between_sd_hi']:.2f}]  {h['within_se']:9.2f}  "
              f"{h['instance_sd']:11.2f} {h['instance_sd_hi']:6.2f}  {h['instance_share']:4.0%}"
              f"   mean: {m['between_sd']:.2f} vs {m['within_se']:.2f}")
    for k, est in result["pooled"].items():
        for e, p in est.items():
            print(f"pooled {k} ({e}, {p['runs']} runs, df {p['df']}): between SD "
                  f"{p['between_sd']:.2f} [{p['between_sd_lo']:.2f}, {p['between_sd_hi']:.2f}],"
                  f" within SE {p['within_se']:.2f}, instance SD {p['instance_sd']:.2f} "
                  f"(at most {p['instance_sd_hi']:.2f}), share {p['instance_share']:.0%}; "
                  f"predicted SD with 1/2/3 instances per arm: "
                  f"{p['sd_with_1_instances']:.2f}/{p['sd_with_2_instances']:.2f}/"
                  f"{p['sd_with_3_instances']:.2f}")
    for k, v in kinds.items():
        w = weighting(v, "hl")
        print(f"weights {k} (hl): a trial's deviation on its SE^2, slope {w['se_slope']:.2f}, "
              f"instance SD {w['tau']:.2f}; weights 1/(instance^2 + slope SE^2) would divide a mean's "
              f"variance by {w['variance_gain']:.2f} (at most {w['gain_max']:.2f} in a run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
