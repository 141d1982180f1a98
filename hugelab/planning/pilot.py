"""The blocks a verdict needs, from a pilot run's paired blocks (and, where its boots ran
several trials, the trials per boot its costs recommend; where it ran several repeats, the
repeats). Pure: the pilot's run, values and boots are passed in. `opts`: effect, confidence,
power (fractions) and budget (blocks, or None)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hugelab.errors import UsageError


def baselines(run: dict[str, Any], arms: list[str], baseline: str) -> dict[str, str]:
    """Per arm, the arm it is compared with: in a factorial, its scenario's baseline cell."""
    exp = run["experiment"]
    if not exp.get("factors"):
        return dict.fromkeys(arms, baseline)
    from hugelab.experiment import Experiment
    model = Experiment.from_dict(exp)
    known = {a.name for a in model.arms}
    return {a: model.baseline_of(a) if a in known else baseline for a in arms}


def pilot_pairs(rows: list[tuple[Any, ...]], baseline: str, arm: str) -> dict[str, Any]:
    """Paired log-ratios log(arm / baseline), one per (block, target) with both arms ok."""
    cells: dict[tuple[int, str], dict[str, float]] = {}
    for block, _pos, a, target, status, value in rows:
        if a in (baseline, arm) and status == "ok" and value is not None and value > 0:
            cells.setdefault((block, target), {})[a] = float(value)
    keys = sorted(k for k, v in cells.items() if baseline in v and arm in v)
    d = [math.log(cells[k][arm] / cells[k][baseline]) for k in keys]
    return {"d": np.asarray(d, dtype=float), "targets": sorted({k[1] for k in keys}),
            "blocks": np.asarray([k[0] for k in keys], dtype=np.int64)}


def plan_repeats(run: dict[str, Any], pairs: dict[str, Any], unit_sd: float,
                  opts: dict[str, Any]) -> dict[str, Any] | None:
    """A pilot of several repeats: the spread between them (tau), and when it dominates the
    repeats' own variance, the repeats a verdict needs (each of the pilot's blocks per repeat).
    A pilot of one repeat whose blocks fall into two regimes: advice to plan with repeats."""
    from hugelab.stats import StatsInputError, regimes
    from hugelab.stats import repeats as rp
    exp = run.get("experiment") or {}
    reps, per = int(exp.get("repeats") or 1), int(exp.get("blocks") or 0)
    d = pairs["d"]
    if reps < 2 or per < 1:
        if d.size < regimes.MIN_BLOCKS:
            return None
        g = regimes.detect(d[np.argsort(pairs["blocks"])])
        return {"pilot_repeats": 1, "regimes": g.to_dict(), "reading": (
            g.reading() + ": plan from a pilot of 3 or more repeats (hugelab run --repeats 3) "
            "to see how much the effect moves between runs" if g.split else None)}
    which = pairs["blocks"] // per
    try:
        comb = rp.combine([d[which == r] for r in range(reps)])
    except StatsInputError as exc:
        return {"pilot_repeats": reps, "error": exc.message}
    tau2 = comb.pooled.tau2 if np.isfinite(comb.pooled.tau2) else 0.0
    v = unit_sd**2 / per
    need = rp.repeats_needed(tau2, v, opts["effect"], confidence=opts["confidence"],
                             power=opts["power"])
    out = {"pilot_repeats": comb.pooled.k, "blocks_per_repeat": per, "tau_pct": comb.tau_pct,
           "i2": comb.pooled.i2, "between_dominates": comb.between_dominates,
           "repeats_needed": need, "replication": comb.reading()}
    if comb.between_dominates:
        out["reading"] = (
            f"between-repeat variation dominates (I^2 {comb.pooled.i2:.0%}, tau "
            f"{comb.tau_pct:.1f}%): more blocks per run cannot narrow the machine's interval; "
            + (f"run {need} repeats of {per} blocks (hugelab run --repeats {need})"
               if need else "no number of repeats detects this effect against that spread"))
    else:
        out["reading"] = (f"the repeats agree within their own intervals (I^2 "
                          f"{comb.pooled.i2:.0%}): plan blocks; repeats add little")
    return out


def too_short(run: dict[str, Any], arm: str, baseline: str, n: int) -> Exception:
    from hugelab.stats import StatsInputError
    from hugelab.stats.plan import MIN_PILOT
    more = MIN_PILOT - n
    how = (f"import at least {more} more block(s) of both arms (the i-th trial of each arm "
           "forms block i when the input has no block numbers)"
           if run["experiment"].get("imported") else
           f"run a pilot of at least {MIN_PILOT} blocks (hugelab run EXPERIMENT --blocks "
           f"{MIN_PILOT}), then plan on that run")
    return StatsInputError(
        f"run {run['id']} has {n} paired block(s) of '{arm}' and baseline '{baseline}'; a plan "
        f"needs at least {MIN_PILOT}: run {more} more block(s)", hint=how)


def plan_reps(boots: dict[tuple[str, str], list[Any]], baseline: str, arm: str,
               targets: list[str], unit_sd: float, opts: dict[str, Any]) -> dict[str, Any] | None:
    """Where the pilot's boots ran several trials: variance between and within boots per arm,
    the trials per boot its measured costs recommend, and the boots needed at that k (the
    paired SD rescaled by `components.scale_pair_sd` from the two arms' pooled components)."""
    from hugelab.stats import StatsInputError
    from hugelab.stats import components as comp
    from hugelab.stats.plan import blocks_for
    mine = {a: [b for t in targets for b in boots.get((a, t), [])] for a in (arm, baseline)}
    mine = {a: b for a, b in mine.items() if b}
    if not mine:
        return None
    try:
        per_arm = {a: comp.repetitions(b) for a, b in mine.items()}
    except StatsInputError as exc:
        return {"error": exc.message}
    every = [b for bs in mine.values() for b in bs]
    both = comp.pooled([r.components for r in per_arm.values()])
    k0 = float(np.median([len(b.values) for b in every]))
    cost = comp.costs(every)
    out: dict[str, Any] = {"k_pilot": k0, "arms": {a: r.to_dict() for a, r in per_arm.items()},
                           "pooled": both.to_dict()}
    if cost is None:
        out["notes"] = ["the pilot recorded no boot or trial wall times: no recommended k"]
        return out
    choice = both.choose_k(*cost)
    sd_k = comp.scale_pair_sd(unit_sd, both, k0, choice.k)
    boots_k = blocks_for(sd_k, opts["effect"], opts["confidence"], opts["power"])
    boots_k0 = blocks_for(unit_sd, opts["effect"], opts["confidence"], opts["power"])
    per_block = len(mine)  # the arms of this pair whose boots ran repetitions
    out.update({"recommended_k": choice.k, **{k: v for k, v in choice.to_dict().items()
                                              if k != "k"},
                "unit_sd_at_k": sd_k, "boots_needed": boots_k,
                "guest_s_at_k": boots_k * per_block * (cost[0] + choice.k * cost[1]),
                "guest_s_at_pilot_k": boots_k0 * per_block * (cost[0] + k0 * cost[1])})
    return out


def plan_one(run: dict[str, Any], rows: list[tuple[Any, ...]], baseline: str, arm: str,
              opts: dict[str, Any], boots: dict[tuple[str, str], list[Any]] | None = None
              ) -> dict[str, Any]:
    from hugelab.stats.plan import MIN_PILOT, detectable_effect, plan
    pairs = pilot_pairs(rows, baseline, arm)
    n = int(pairs["d"].size)
    if n < MIN_PILOT:
        raise too_short(run, arm, baseline, n)
    p = plan(pairs["d"], effect=opts["effect"], confidence=opts["confidence"],
             power=opts["power"])
    out: dict[str, Any] = {"arm": arm, "baseline": baseline, "targets": pairs["targets"],
                           **p.to_dict(), "more_blocks": max(0, p.blocks_needed - n)}
    repeats = plan_repeats(run, pairs, p.unit_sd, opts)
    if repeats is not None:
        out["repeats"] = repeats
    reps = plan_reps(boots or {}, baseline, arm, pairs["targets"], p.unit_sd, opts)
    if reps is not None:
        out["reps"] = reps
    if opts["budget"] is not None:
        det = detectable_effect(pairs["d"], opts["budget"], confidence=opts["confidence"],
                                power=opts["power"])
        out["budget"] = {"blocks": det.blocks, "effect_pct": det.to_dict()["effect_pct"],
                         "notes": list(det.notes)}
    return out


def plan_pilot(run: dict[str, Any], rows: list[tuple[Any, ...]], arms: list[str],
               baseline: str, opts: dict[str, Any], boots: dict[tuple[str, str], list[Any]],
               arm: str | None = None) -> dict[str, Any]:
    """The plan of every non-baseline arm of the pilot (or of `arm`): the blocks the most
    demanding one needs, and each arm's plan."""
    base_of = baselines(run, arms, baseline)  # a factorial: each scenario has its own
    if arm:
        if arm not in arms or arm == base_of[arm]:
            raise UsageError(f"arm {arm!r} is not a non-baseline arm of run {run['id']}",
                             hint=f"arms: {', '.join(arms)}; baseline: {baseline}")
        todo = [arm]
    else:
        todo = [a for a in arms if a != base_of[a]]
    if not todo:
        raise UsageError(f"run {run['id']} has only the baseline arm: nothing to plan against")
    plans = [plan_one(run, rows, base_of[a], a, opts, boots) for a in todo]
    return {"blocks_needed": max(p["blocks_needed"] for p in plans), "arms": plans}
