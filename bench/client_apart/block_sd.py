"""Per-block log-ratios of each arm against its baseline within the same scenario (the
`[scenario]` suffix of a cell's name; `X-again` against `X`): n, mean, median and SD in %,
and the blocks a ±2-point 95% interval would take at that SD. Read only.

    .venv/bin/python bench/client_apart/block_sd.py STORE [--baseline off]
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import statistics


def scenario(arm: str) -> str:
    return arm[arm.index(" ["):] if " [" in arm else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--baseline", default="off")
    args = ap.parse_args()
    with sqlite3.connect(f"file:{args.store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT block, arm, value FROM trials WHERE status = 'ok' AND "
                          "value > 0").fetchall()
    by: dict[int, dict[str, float]] = {}
    for block, arm, value in rows:
        by.setdefault(block, {})[arm] = value
    arms = sorted({a for d in by.values() for a in d})
    for arm in arms:
        base = args.baseline + scenario(arm)
        if arm == base or base not in arms:
            continue
        d = [100 * math.log(v[arm] / v[base]) for v in by.values() if arm in v and base in v]
        sd = statistics.stdev(d)
        print(f"{arm} vs {base}: n {len(d)}, mean {statistics.mean(d):+.2f}%, median "
              f"{statistics.median(d):+.2f}%, per-block SD {sd:.2f}%, blocks for ±2 points "
              f"{math.ceil((1.96 * sd / 2) ** 2)}")


if __name__ == "__main__":
    main()
