"""Per-arm summary of a run against its baseline arm. Pure: values in, rows out."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any


def arm_summary(rows: list[tuple[int, int, str, str, str, float | None]], arms: list[str],
                baseline: str | Mapping[str, str], better: str | None) -> list[dict[str, Any]]:
    """rows: (block, position, arm, target, status, value). Ratios are of medians; the paired
    per-block analysis with intervals and verdicts is `hugelab report`. `baseline`: one arm,
    or per arm the arm it is compared with (a factorial's cell: its scenario's baseline)."""
    values: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"ok": 0, "flagged": 0, "failed": 0})
    for _b, _p, arm, _t, status, value in rows:
        counts[arm][status] += 1
        if status == "ok" and value is not None:
            values[arm].append(value)
    base_of = baseline if isinstance(baseline, Mapping) else dict.fromkeys(arms, baseline)
    out = []
    for arm in arms:
        b_arm = base_of.get(arm, arm)
        base = statistics.median(values[b_arm]) if values.get(b_arm) else None
        v = values.get(arm, [])
        med = statistics.median(v) if v else None
        row: dict[str, Any] = {"arm": arm, "n": len(v), **{k: counts[arm][k] for k in ("flagged", "failed")},
                               "median": med, "mean": statistics.fmean(v) if v else None,
                               "min": min(v) if v else None, "max": max(v) if v else None,
                               "baseline": arm == b_arm}
        if med is not None and base:
            ratio = med / base
            row["ratio"] = ratio
            if better == "lower":
                row["speedup"] = base / med
            elif better == "higher":
                row["speedup"] = ratio
        out.append(row)
    return out


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no reason recorded"


def arm_problems(trials: Iterable[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm with trials that are not ok: counts and the commonest reason, in plain words
    ("all 2 vm-1G trials failed: guest boot failed; the 1G pool had 0 of 0 pages free: ...")."""
    by_arm: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        by_arm[t["arm"]].append(t)
    out = []
    for arm in arms:
        mine = by_arm.get(arm, [])
        bad = [t for t in mine if t["status"] != "ok"]
        if not bad:
            continue
        reason, _ = Counter(_first_line(t["error"] or t["flag"]) for t in bad).most_common(1)[0]
        failed = sum(t["status"] == "failed" for t in bad)
        what = ("failed" if failed == len(bad) else "were flagged" if not failed
                else "failed or were flagged")
        head = f"all {len(mine)}" if len(bad) == len(mine) else f"{len(bad)} of {len(mine)}"
        out.append({"arm": arm, "trials": len(mine), "not_ok": len(bad), "failed": failed,
                    "no_ok_trial": len(bad) == len(mine), "reason": reason,
                    "text": f"{head} {arm} trials {what}: {reason}"})
    return out


def retried(trials: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials that took more than one attempt, with their earlier errors."""
    return [{"block": t["block"], "arm": t["arm"], "target": t["target"],
             "attempts": t.get("attempts", 1), "status": t["status"],
             "earlier": [_first_line(e.get("error")) for e in
                         (t.get("provenance") or {}).get("earlier_attempts", [])]}
            for t in trials if (t.get("attempts") or 1) > 1]
