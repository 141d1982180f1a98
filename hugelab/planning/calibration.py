"""A duet's calibration (`hugelab run DUET --calibrate`): what its comparison can and cannot
claim.

A duet runs every arm of a block at the same time (two guests side by side, as the Red Hat study
ran them), so each arm's value is measured beside a neighbour. The calibration runs the baseline
arm twice, as `A` and its twin `A-twin` (identical settings), in two runs of the same store:

- together (design duet): A and A-twin at the same time. Their paired comparison is an A/A
  check of the two slots: `equivalent` means the slots are symmetric, and its interval is the
  smallest difference between arms the duet can tell apart;
- alone (design paired): A and A-twin one after the other, as a paired run would.

The two runs grow a block at a time in ABBA order (together, alone, alone, together, ...), so
drift hits both alike; per block, the mean log value of both copies together minus alone, in
the usual paired analysis, says how much the neighbour disturbs each guest: what a duet cannot
claim is how fast one VM would run alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from hugelab.errors import UsageError
from hugelab.experiment import Experiment
from hugelab.store import SqlStore

TWIN = "A-twin"
# runs one calibration experiment (resumed) up to this many blocks: (run id, its comparisons)
RunOne = Callable[[Experiment, SqlStore, int], tuple[int, list[dict[str, Any]]]]


def experiments(exp: Experiment) -> tuple[Experiment, Experiment]:
    """(together, alone): the baseline arm and its twin, as a duet and as a paired run. The
    twin sits where the duet's other arm sits (its cpu_pin and numa_node), so the slot check
    compares the duet's two slots, not one slot with itself."""
    if exp.design != "duet":
        raise UsageError(f"--calibrate measures a duet (design = \"duet\"); '{exp.name}' is "
                         f"design = \"{exp.design}\"",
                         hint="a paired design measures one arm at a time: there is no "
                         "neighbour to calibrate against")
    base = next(a for a in exp.arms if a.name == exp.baseline_arm)
    other = next((a for a in exp.arms if a.name != base.name), base)
    a = replace(base, name="A", description=f"the baseline arm '{base.name}'", levels=())
    twin_vm = a.vm if a.vm is None or other.vm is None else replace(
        a.vm, cpu_pin=other.vm.cpu_pin, numa_node=other.vm.numa_node)
    b = replace(a, name=TWIN, description=f"a second copy of '{base.name}', placed as "
                f"'{other.name}'", vm=twin_vm)
    pair = replace(exp, arms=(a, b), baseline="A", factors=())
    return (replace(pair, name=f"{exp.name} calibration: together", design="duet"),
            replace(pair, name=f"{exp.name} calibration: alone", design="paired"))


def block_order(blocks: int) -> list[str]:
    """Which run each step adds a block to: together and alone alternate in ABBA order, so
    slow drift of the machine hits both alike and cancels in the per-block comparison."""
    pattern = ("together", "alone", "alone", "together")
    return [pattern[i % 4] for i in range(2 * blocks)]


def interference(store: SqlStore, together_id: int, alone_id: int, margin: float = 0.01
                 ) -> dict[str, Any]:
    """Per block: the mean log value of both copies together minus alone; the paired
    analysis of those (Hodges-Lehmann shift, signed-rank interval and test)."""
    from hugelab.stats.paired import analyse, decide

    def per_block(run_id: int) -> dict[int, float]:
        vals: dict[int, list[float]] = {}
        for block, _p, _a, _t, status, v in store.values(run_id):
            if status == "ok" and v is not None and v > 0:
                vals.setdefault(block, []).append(math.log(v))
        return {b: float(np.mean(v)) for b, v in vals.items() if len(v) == 2}

    tog, alone = per_block(together_id), per_block(alone_id)
    d = np.array([tog[b] - alone[b] for b in sorted(set(tog) & set(alone))])
    if d.size < 6:
        return {"error": f"{d.size} block(s) with both copies ok together and alone: the "
                         "comparison needs at least 6", "blocks": int(d.size)}
    r = analyse(d, alpha=0.05, margin=margin)
    pct = [100.0 * math.expm1(float(r[k][0])) for k in ("hl", "lo", "hi")]
    verdict = decide(float(r["p"][0]), float(r["tost_p"][0]), float(r["hl"][0]), 0.05,
                     "two-sided")
    return {"shift_pct": pct[0], "ci_pct": pct[1:], "blocks": int(d.size), "verdict": verdict}


def summary(store: SqlStore, together_id: int, alone_id: int, comparison: dict[str, Any] | None
            ) -> dict[str, Any]:
    """The calibration's claims from the two runs."""
    out: dict[str, Any] = {"together_run": together_id, "alone_run": alone_id,
                           "slots": comparison,
                           "interference": interference(store, together_id, alone_id)}
    out["claims"] = claims(out)
    return out


def claims(c: dict[str, Any]) -> list[str]:
    """What the duet comparison can and cannot claim, in sentences."""
    out = []
    slots = c.get("slots") or {}
    ci = slots.get("ci_pct")
    if slots.get("verdict") == "equivalent" and ci:
        out.append(f"the two slots are symmetric: A and its twin side by side differ by "
                   f"{slots['effect_pct']:+.2f}% [{ci[0]:+.2f}, {ci[1]:+.2f}] (equivalent)")
    elif ci:
        out.append(f"the two slots are not shown symmetric ({slots.get('verdict')}: "
                   f"{slots['effect_pct']:+.2f}% [{ci[0]:+.2f}, {ci[1]:+.2f}]); run more "
                   "blocks, or pin the guests (cpu_pin, numa_node) to balance them")
    if ci:
        width = max(abs(ci[0]), abs(ci[1]))
        out.append(f"can claim: differences between arms well beyond ±{width:.2g}% (the A/A "
                   "interval), measured while both guests run")
    inter = c.get("interference") or {}
    if "shift_pct" in inter:
        lo, hi = inter["ci_pct"]
        out.append(f"cannot claim: how fast one VM runs alone; beside its twin each guest's "
                   f"value moves {inter['shift_pct']:+.2f}% [{lo:+.2f}, {hi:+.2f}] against "
                   f"running alone ({inter.get('verdict')}, {inter.get('blocks')} blocks)")
    return out


def calibrate(exp: Experiment, store: SqlStore, run_one: RunOne) -> dict[str, Any]:
    """Run the two calibration experiments in `store` a block at a time in ABBA order with
    `run_one(exp, store, blocks_done) -> (run_id, comparisons)` (each call adds one block,
    resuming the run); what the duet can claim, from both runs."""
    together, alone = experiments(exp)
    runs = {"together": together, "alone": alone}
    ids: dict[str, int] = {}
    comps: list[dict[str, Any]] = []
    done = {"together": 0, "alone": 0}
    for which in block_order(exp.blocks):
        done[which] += 1
        ids[which], got = run_one(runs[which], store, done[which])
        if which == "together":
            comps = got
    slot = next((c for c in comps if str(c.get("candidate")).split("@")[0] == TWIN), None)
    return summary(store, ids["together"], ids["alone"], slot_check(slot))


def slot_check(comp: dict[str, Any] | None) -> dict[str, Any] | None:
    """The A/A comparison of the together run, as the claims read it."""
    if comp is None:
        return None
    lo, hi = comp.get("ci_low_pct"), comp.get("ci_high_pct")
    return {"verdict": comp.get("verdict"), "effect_pct": comp.get("effect_pct"),
            "ci_pct": [lo, hi] if lo is not None and hi is not None else None}
