"""The start-slot slope of request-interleaved runs, from their stores (issue 39).

    .venv/bin/python bench/slot_slope.py STORE.db [STORE.db ...]

Per store: the OLS fit of every ok trial's 100 x log(value) on block + arm + start slot (the
trial's position in its block, the order its server started in), printing the slot's
coefficient (% per slot) with its standard error and the fit's residual SD, and the A/A twin's
(`<baseline>-again`, here `off-again` against `off`) per-block log-ratio: its mean and SD, in %.
"""

from __future__ import annotations

import math
import sqlite3
import sys

import numpy as np


def slope(store: str, baseline: str = "off") -> str:
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
    return (f"{store}: {len(blocks)} blocks, slot {beta[-1]:+.2f}% per slot (se {se:.2f}), "
            f"residual SD {math.sqrt(s2):.2f}%, twin per-block {np.mean(d):+.2f}% "
            f"(SD {np.std(d, ddof=1):.2f}%)")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(slope(path))
