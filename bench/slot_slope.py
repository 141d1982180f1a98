"""The start-slot slope of request-interleaved runs, from their stores (issue 39).

    .venv/bin/python bench/slot_slope.py STORE.db [STORE.db ...]
    PYTHONPATH=bench .venv/bin/python bench/slot_slope.py --pool STORE.db [STORE.db ...]

Per store: the OLS fit of every ok trial's 100 x log(value) on block + arm + start slot (the
trial's position in its block, the order its server started in), printing the slot's
coefficient (% per slot) with its standard error and the fit's residual SD, and the A/A twin's
(`<baseline>-again`, here `off-again` against `off`) per-block log-ratio: its mean and SD, in %.
With --pool, also the blocks flagged under high load per store, and over all the stores given:
the inverse-variance mean of their slopes (se, z), the root mean square of the twins' per-block
SDs, and the twin's start-order split (second minus first, Welch) on every store's blocks
together (heldout_examples.start_order_split's rule).
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys

import numpy as np


def fit(store: str, baseline: str = "off") -> dict[str, float]:
    """The slot slope, its se, the residual SD and the twin's per-block log-ratios' mean and SD."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT block, position, arm, value FROM trials "
                          "WHERE status = 'ok' AND value > 0").fetchall()
    arms, blocks = sorted({r[2] for r in rows}), sorted({r[0] for r in rows})
    x = np.array([[float(b == bb) for bb in blocks] + [float(arm == a) for a in arms[1:]]
                  + [float(pos)] for b, pos, arm, _v in rows])
    y = np.array([100 * math.log(v) for *_, v in rows])
    beta, _res, rank, _sv = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    s2 = float(resid @ resid) / (len(y) - rank)
    se = math.sqrt(s2 * np.linalg.pinv(x.T @ x)[-1, -1])
    by: dict[int, dict[str, float]] = {}
    for b, _pos, arm, v in rows:
        by.setdefault(b, {})[arm] = v
    d = [100 * math.log(a[f"{baseline}-again"] / a[baseline]) for a in by.values()
         if baseline in a and f"{baseline}-again" in a]
    return {"blocks": len(blocks), "slope": float(beta[-1]), "se": se,
            "resid_sd": math.sqrt(s2), "twin_mean": float(np.mean(d)),
            "twin_sd": float(np.std(d, ddof=1))}


def slope(store: str, baseline: str = "off") -> str:
    f = fit(store, baseline)
    return (f"{store}: {f['blocks']} blocks, slot {f['slope']:+.2f}% per slot (se {f['se']:.2f}), "
            f"residual SD {f['resid_sd']:.2f}%, twin per-block {f['twin_mean']:+.2f}% "
            f"(SD {f['twin_sd']:.2f}%, within-trial SE {within_se(store, baseline):.2f}%)")


def within_se(store: str, baseline: str = "off") -> float:
    """The twin's within-trial standard error of its log-ratio to the baseline, in % (root mean
    square over its trials of the recorded `window_hl_se_log`): the per-block SD the windows
    alone would give; the rest of the twin's per-block SD is between trials."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT metrics FROM trials WHERE arm = ? AND status = 'ok'",
                          (f"{baseline}-again",)).fetchall()
    se = [x for (m,) in rows if (x := json.loads(m).get("window_hl_se_log")) is not None]
    return 100 * math.sqrt(float(np.mean(np.square(se)))) if se else float("nan")


def pooled(stores: list[str], baseline: str = "off") -> str:
    """Over the stores: inverse-variance slope, RMS twin SD, and the pooled start-order split."""
    from pathlib import Path

    from heldout_examples import _flagged_blocks
    from scipy import stats
    fits = [fit(s, baseline) for s in stores]
    for s in stores:
        print(f"  {s}: {'/'.join(map(str, _flagged_blocks(Path(s))))} blocks under high load")
    w = np.array([1 / f["se"] ** 2 for f in fits])
    b = float(np.sum(w * np.array([f["slope"] for f in fits])) / w.sum())
    se = 1 / math.sqrt(w.sum())
    rms = math.sqrt(float(np.mean([f["twin_sd"] ** 2 for f in fits])))
    se_in = math.sqrt(float(np.nanmean([within_se(s, baseline) ** 2 for s in stores])))
    first: list[float] = []
    second: list[float] = []
    for s in stores:
        with sqlite3.connect(s) as db:
            rows = db.execute("SELECT block, position, arm, value FROM trials WHERE arm IN "
                              "(?, ?) AND status = 'ok' AND value > 0",
                              (baseline, f"{baseline}-again")).fetchall()
        by: dict[int, dict[str, tuple[int, float]]] = {}
        for block, pos, arm, v in rows:
            by.setdefault(block, {})[arm] = (pos, v)
        for a in by.values():
            if len(a) == 2:
                (tp, tv), (bp, bv) = a[f"{baseline}-again"], a[baseline]
                (first if tp < bp else second).append(100 * math.log(tv / bv))
    t = stats.ttest_ind(second, first, equal_var=False)
    ci = t.confidence_interval(0.95)
    return (f"pooled over {len(stores)} stores ({sum(int(f['blocks']) for f in fits)} blocks): "
            f"slot {b:+.2f}% per slot (se {se:.2f}, z {b / se:+.1f}), twin per-block SD rms "
            f"{rms:.2f}% (within-trial SE rms {se_in:.2f}%, stores that record it), second - first {np.mean(second) - np.mean(first):+.2f} "
            f"[{ci.low:+.2f}, {ci.high:+.2f}] (n {len(second)}/{len(first)}), p {t.pvalue:.3g}")


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if a != "--pool"]
    for path in paths:
        print(slope(path))
    if "--pool" in sys.argv[1:]:
        print(pooled(paths))
