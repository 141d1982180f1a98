"""Does averaging several server instances per arm per trial lower the A/A floor, per minute
(issue 39, item 1)? Reads stores that bench/quiet_floor.py made, mode `kK[wN]` (every arm
copied as NAME-2 ... NAME-K, all alternated by one client) beside a shipped-shape mode, and
gives per mode: the A/A twin's between-trial SD with one instance per arm (`X-again` against
`X`) and with the K instances pooled (the mean log-rate of the twin's copies against the mean of
the baseline's), the `on`-style arms' pooled effect, and the median seconds a block took, so
that the SDs can be compared at one budget (SD x sqrt(block s / 300): the SD of a 5-minute
run's mean, looks and t-quantiles aside).

    PYTHONPATH=bench .venv/bin/python bench/quiet_floor.py --out DIR --seeds S1,S2,... \\
        --examples postgres-interleaved --blocks 12 --modes w20,k2w20
    .venv/bin/python bench/instances_floor.py DIR/*.db [--json]

Per trial, every arm's recorded `window_hl_log_ratio` is its log-ratio to the baseline arm
(the baseline's own is 0), so the pooled A/A of a block is mean(twin copies) - mean(baseline
copies) of those. A block counts only when every arm's trial in it is ok. Runs are pooled per
mode (the store name's part before `_`) by their degrees of freedom around each run's own mean.
Read only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

KEY = "window_hl_log_ratio"


def blocks_of(store: Path) -> tuple[str, dict[int, dict[str, float]], list[float]]:
    """The baseline's name, each complete block's log-ratios by arm, and the blocks' spans (s)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        baseline = json.loads(db.execute("SELECT experiment FROM runs").fetchone()[0]
                              )["baseline"]
        rows = db.execute("SELECT block, arm, status, metrics, started, ended FROM trials"
                          ).fetchall()
    by: dict[int, dict[str, float]] = {}
    bad: set[int] = set()
    spans: dict[int, list[float]] = {}
    for block, arm, status, metrics, started, ended in rows:
        spans.setdefault(block, []).extend(t for t in (started, ended) if t is not None)
        m = json.loads(metrics)
        if status != "ok" or (arm != baseline and KEY not in m):
            bad.add(block)
            continue
        by.setdefault(block, {})[arm] = 0.0 if arm == baseline else float(m[KEY])
    good = {b: v for b, v in by.items() if b not in bad}
    return baseline, good, [max(s) - min(s) for s in spans.values() if len(s) >= 2]


def groups(arms: set[str]) -> dict[str, list[str]]:
    """Each arm with its copies (NAME, NAME-2, ...): {NAME: [NAME, NAME-2, ...]}."""
    out: dict[str, list[str]] = {}
    for a in sorted(arms):
        m = re.fullmatch(r"(.+)-([2-9])", a)
        base = m.group(1) if m and m.group(1) in arms else a
        out.setdefault(base, []).append(a)
    return out


def effects(store: Path) -> dict[str, Any]:
    """Per block: the twin's single-instance and pooled A/A, and every other arm's pooled effect."""
    baseline, blocks, spans = blocks_of(store)
    arms = set().union(*(set(v) for v in blocks.values())) if blocks else set()
    g = groups(arms)
    twin = next((a for a in g if a == f"{baseline}-again"), None)
    if twin is None:
        raise SystemExit(f"{store}: no A/A twin {baseline}-again")
    out: dict[str, Any] = {"store": store.name, "k": len(g[baseline]), "blocks": len(blocks),
                           "block_s": statistics.median(spans) if spans else math.nan,
                           "aa_one": [], "aa_pooled": [], "effects": {}}
    for b in sorted(blocks):
        v = blocks[b]
        base = statistics.fmean(v[a] for a in g[baseline])
        out["aa_one"].append(v[twin])
        out["aa_pooled"].append(statistics.fmean(v[a] for a in g[twin]) - base)
        for name, copies in g.items():
            if name not in (baseline, twin):
                out["effects"].setdefault(name, []).append(
                    statistics.fmean(v[a] for a in copies) - base)
    return out


def pooled_sd(runs: list[list[float]]) -> tuple[float, int]:
    """SD around each run's own mean, pooled by degrees of freedom (log units), and the df."""
    df = sum(len(r) - 1 for r in runs if len(r) > 1)
    ss = sum(statistics.variance(r) * (len(r) - 1) for r in runs if len(r) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def mode_of(store: Path) -> str:
    return store.stem.split("_")[0]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    one, df = pooled_sd([r["aa_one"] for r in runs])
    pool, _ = pooled_sd([r["aa_pooled"] for r in runs])
    block_s = statistics.median(r["block_s"] for r in runs)
    scale = math.sqrt(block_s / 300.0)
    eff = {}
    for name in runs[0]["effects"]:
        vals = [x for r in runs for x in r["effects"].get(name, [])]
        sd, _ = pooled_sd([r["effects"].get(name, []) for r in runs])
        eff[name] = {"mean_pct": 100 * (math.exp(statistics.fmean(vals)) - 1),
                     "se_pct": 100 * statistics.stdev(vals) / math.sqrt(len(vals)),
                     "between_sd_pct": 100 * sd}
    return {"runs": len(runs), "k": runs[0]["k"], "df": df, "block_s": block_s,
            "aa_one_sd_pct": 100 * one, "aa_pooled_sd_pct": 100 * pool,
            "aa_pooled_mean_pct": 100 * statistics.fmean(x for r in runs for x in r["aa_pooled"]),
            "aa_pooled_sd_at_5min_pct": 100 * pool * scale, "effects": eff}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", type=Path, nargs="+", metavar="STORE")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    args = ap.parse_args()
    modes: dict[str, list[dict[str, Any]]] = {}
    for s in args.stores:
        modes.setdefault(mode_of(s), []).append(effects(s))
    result = {m: summary(r) for m, r in modes.items()}
    if args.json:
        json.dump({"modes": result, "runs": modes}, sys.stdout, indent=1)
        print()
        return 0
    for m, s in result.items():
        eff = "; ".join(f"{n} {e['mean_pct']:+.2f}% (se {e['se_pct']:.2f}, SD {e['between_sd_pct']:.2f})"
                        for n, e in s["effects"].items())
        print(f"{m}: {s['runs']} runs, k {s['k']}, df {s['df']}, block {s['block_s']:.1f} s; "
              f"A/A SD one instance {s['aa_one_sd_pct']:.2f}%, pooled {s['aa_pooled_sd_pct']:.2f}% "
              f"(mean {s['aa_pooled_mean_pct']:+.2f}%), pooled at 5 min "
              f"{s['aa_pooled_sd_at_5min_pct']:.3f}%; {eff}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
