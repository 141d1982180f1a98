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

With `--stores A.db ...` (kept request-interleaved runs whose trials recorded all three values)
it prints per store and non-baseline arm the SD of d_b under the old value (`ops_per_s_mean`),
the median (`window_median_log_ratio`) and the recorded HL value (`ops_per_s`), the
within-trial SE (root mean square of the recorded SEs), what is left between trials, and the
signed-rank HL 95% interval over all blocks (plain, no start-slot adjustment); then per kind
the root mean square of the per-block SDs over the stores.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from slot_adjust_sim import ALPHA, MARGIN, replay

from hugelab.stats import sequential_plan
from hugelab.stats.sequential import look_schedule
from hugelab.stats.signedrank import hl_and_interval
from hugelab.stats.windows import block_arm_means, paired_shifts
from hugelab.store.locate import open_store

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


def store_values(path: str) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per non-baseline arm and value: (d_b, within-trial SEs) over the complete blocks."""
    trials = [t for t in open_store(path).trials(1) if t["status"] == "ok"]
    by: dict[Any, dict[str, Any]] = defaultdict(dict)
    for t in trials:
        by[t["block"]][t["arm"]] = t
    names = sorted({t["arm"] for t in trials})
    base = next(a for a in names if a in ("off", "thp", "plain"))
    out = {}
    for arm in (a for a in names if a != base):
        rows: dict[str, tuple[list[float], list[float]]] = {
            "mean (old)": ([], []), "median": ([], []), "HL (new)": ([], [])}
        for v in (v for v in by.values() if arm in v and base in v):
            ma, mb = v[arm]["metrics"], v[base]["metrics"]
            for name, d, se in (
                    ("mean (old)", math.log(ma["ops_per_s_mean"] / mb["ops_per_s_mean"]),
                     ma.get("window_se_log", math.nan)),
                    ("median", ma.get("window_median_log_ratio", math.nan),
                     ma.get("window_median_se_log", math.nan)),
                    ("HL (new)", math.log(v[arm]["value"] / v[base]["value"]),
                     ma.get("window_hl_se_log", math.nan))):
                rows[name][0].append(d)
                rows[name][1].append(se)
        out[arm] = {k: (np.array(d), np.array(se)) for k, (d, se) in rows.items()}
    return out


def stores(paths: list[str]) -> None:
    print("| store | arm | blocks | value | SD d_b | within | between | HL of d_b [95%] |")
    print("|---|---|---|---|---|---|---|---|")
    pool: dict[tuple[str, bool, str], list[float]] = defaultdict(list)
    for path in paths:
        name = path.rsplit("/", 1)[-1].removesuffix(".db")
        for arm, values in store_values(path).items():
            for value, (d, se) in values.items():
                var, within = float(d.var(ddof=1)), float(np.nanmean(se ** 2))
                est, lo, hi = (100 * np.expm1(x[0]) for x in hl_and_interval(d[None, :], 0.05)[:3])
                pool[(name.split("-")[0], arm.endswith("-again"), value)].append(var)
                print(f"| {name} | {arm} | {d.size} | {value} | {100 * math.sqrt(var):.2f}% | "
                      f"{100 * math.sqrt(within):.2f}% | "
                      f"{100 * math.sqrt(max(0.0, var - within)):.2f}% | "
                      f"{est:+.2f}% [{lo:+.2f}, {hi:+.2f}] |")
    for (kind, twin, value), v in sorted(pool.items()):
        print(f"{kind} {'A/A' if twin else 'other arms'} {value}: root mean square per-block SD "
              f"{100 * math.sqrt(float(np.mean(v))):.2f}% over {len(v)} stores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--stores", nargs="+", metavar="STORE")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.stores:
        stores(args.stores)
        return
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
