"""The run summary (`RunSummary`): per arm its counts and medians against its baseline arm,
the report's comparisons, and what went wrong. `run_summary` reads it from the store; the
rest is pure: values in, typed rows out."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from hugelab.experiment import Experiment
from hugelab.report.model.runsummary import ArmProblem, ArmRow, Retry, RunSummary
from hugelab.report.poolnotes import pool_warnings, shared_pools
from hugelab.store import SqlStore


def run_summary(store: SqlStore, exp: Experiment, run_id: int, skipped: dict[str, str],
                pool_holders: list[dict[str, Any]] | None = None) -> RunSummary:
    """What the run summary (and `hugelab run --json`) says about run `run_id`: per arm
    counts and medians, the report's comparisons, factorial answer, options and warnings, and
    what went wrong (`pool_holders`: who else held the run's hugetlb pools). The command's
    own fields (`run` aside) are left at their defaults for it to set."""
    from hugelab.report.analysis import Options, analyse
    from hugelab.report.runload import load_run
    arms = [a.name for a in exp.arms]
    rows = arm_summary(store.values(run_id), arms, {a: exp.baseline_of(a) for a in arms},
                       store.first_of(run_id, "better"))
    found = analyse(load_run(store, run_id), Options()).result
    trials = list(store.trials(run_id))
    return RunSummary(run=run_id, skipped=skipped, arms=rows, comparisons=found.comparisons,
                      unit=store.first_of(run_id, "unit"), factorial=found.factorial,
                      replication=found.replication, costs=found.costs, options=found.options,
                      warnings=found.warnings,
                      problems=arm_problems(trials, [a for a in arms if a not in skipped]),
                      retried=retried(trials),
                      pool_warnings=_pool_warnings(pool_holders or [], trials))


def _pool_warnings(holders: list[dict[str, Any]], trials: list[dict[str, Any]]) -> list[str]:
    """The run's hugetlb pools shared with other users (hugelab.report.poolnotes)."""
    failed = Counter(t["arm"] for t in trials if t["status"] == "failed" and t["cause"] == "pool")
    return pool_warnings(holders, shared_pools(t["monitors"] or {} for t in trials), failed)


def arm_summary(rows: list[tuple[int, int, str, str, str, float | None]], arms: list[str],
                baseline: str | Mapping[str, str], better: str | None) -> list[ArmRow]:
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
        row = ArmRow(arm, len(v), counts[arm]["flagged"], counts[arm]["failed"], med,
                     statistics.fmean(v) if v else None, min(v) if v else None,
                     max(v) if v else None, arm == b_arm)
        if med is not None and base:
            row.ratio = med / base
            if better == "lower":
                row.speedup = base / med
            elif better == "higher":
                row.speedup = row.ratio
        out.append(row)
    return out


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no reason recorded"


def arm_problems(trials: Iterable[dict[str, Any]], arms: list[str]) -> list[ArmProblem]:
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
        out.append(ArmProblem(arm, len(mine), len(bad), failed, len(bad) == len(mine), reason,
                              f"{head} {arm} trials {what}: {reason}"))
    return out


def retried(trials: Iterable[dict[str, Any]]) -> list[Retry]:
    """Trials that took more than one attempt, with their earlier errors."""
    return [Retry(t["block"], t["arm"], t["target"], t.get("attempts", 1), t["status"],
                  [_first_line(e.get("error")) for e in
                   (t.get("provenance") or {}).get("earlier_attempts", [])])
            for t in trials if (t.get("attempts") or 1) > 1]
