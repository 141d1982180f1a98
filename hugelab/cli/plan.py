"""`hugelab plan`: the blocks a verdict needs, from a pilot run's paired blocks (and, where its
boots ran several trials, the trials per boot its costs recommend)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.console import Console

from hugelab.cli.output import print_json
from hugelab.cli.runs import arms_of, open_run
from hugelab.errors import UsageError
from hugelab.store.importers import parse_fraction
from hugelab.store.locate import shown

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    q = sub.add_parser(
        "plan", help="blocks needed for a verdict, from a pilot run (>= 10 blocks)",
        description="From a pilot run's paired blocks (baseline arm against ARM) estimates the "
        "noise and prints the blocks needed to detect --effect at --confidence with --power; "
        "with --budget N also the smallest effect N blocks can detect. When the pilot's guest "
        "boots ran several trials (trials_per_boot), also the share of variance between and "
        "within boots, the trials per boot that the pilot's measured boot and trial costs "
        "recommend, and the boots needed at that k. When the pilot ran several repeats "
        "(run --repeats), also the spread of the effect between repeats and, when it "
        "dominates, the repeats a verdict needs; a one-repeat pilot whose blocks fall into two "
        "regimes is told to plan from repeats. Percentages may be written 1% or 0.01.")
    q.add_argument("run", nargs="?", type=int, help="pilot run id (default: the latest run)")
    add_store(q)
    add_json(q)
    q.add_argument("--arm", help="arm to plan for (default: every non-baseline arm)")
    q.add_argument("--effect", default="1%", help="effect to detect (default 1%%)")
    q.add_argument("--confidence", default="99.99%", help="confidence (default 99.99%%)")
    q.add_argument("--power", default="90%", help="power (default 90%%)")
    q.add_argument("--budget", type=int, metavar="N",
                   help="blocks you can afford: also print the smallest effect N blocks detect")
    q.set_defaults(func=cmd_plan)


def _baselines(run: dict[str, Any], arms: list[str], baseline: str) -> dict[str, str]:
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


def _plan_repeats(run: dict[str, Any], pairs: dict[str, Any], unit_sd: float,
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


def _too_short(run: dict[str, Any], arm: str, baseline: str, n: int) -> Exception:
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


def _plan_reps(boots: dict[tuple[str, str], list[Any]], baseline: str, arm: str,
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


def _plan_one(run: dict[str, Any], rows: list[tuple[Any, ...]], baseline: str, arm: str,
              opts: dict[str, Any], boots: dict[tuple[str, str], list[Any]] | None = None
              ) -> dict[str, Any]:
    from hugelab.stats import detectable_effect, plan
    from hugelab.stats.plan import MIN_PILOT
    pairs = pilot_pairs(rows, baseline, arm)
    n = int(pairs["d"].size)
    if n < MIN_PILOT:
        raise _too_short(run, arm, baseline, n)
    p = plan(pairs["d"], effect=opts["effect"], confidence=opts["confidence"],
             power=opts["power"])
    out: dict[str, Any] = {"arm": arm, "baseline": baseline, "targets": pairs["targets"],
                           **p.to_dict(), "more_blocks": max(0, p.blocks_needed - n)}
    repeats = _plan_repeats(run, pairs, p.unit_sd, opts)
    if repeats is not None:
        out["repeats"] = repeats
    reps = _plan_reps(boots or {}, baseline, arm, pairs["targets"], p.unit_sd, opts)
    if reps is not None:
        out["reps"] = reps
    if opts["budget"] is not None:
        det = detectable_effect(pairs["d"], opts["budget"], confidence=opts["confidence"],
                                power=opts["power"])
        out["budget"] = {"blocks": det.blocks, "effect_pct": det.to_dict()["effect_pct"],
                         "notes": list(det.notes)}
    return out


def cmd_plan(args: argparse.Namespace) -> int:
    opts = {"effect": parse_fraction(args.effect, "--effect"),
            "confidence": parse_fraction(args.confidence, "--confidence"),
            "power": parse_fraction(args.power, "--power"), "budget": args.budget}
    if args.budget is not None and args.budget < 1:
        raise UsageError("--budget must be at least 1 block")
    from hugelab.report.runload import rep_boots
    store, run = open_run(args.store, args.run)
    with store:
        rows = store.values(run["id"])
        # an interleaved run's windows are not boots: its within-trial variance holds drift
        # that cancels in the paired ratio, so no trials_per_boot is recommended from them
        interleaved = (run.get("experiment") or {}).get("design") == "interleaved"
        boots = {} if interleaved else rep_boots(store.rep_rows(run["id"]))
    arms, baseline = arms_of(run, rows)
    base_of = _baselines(run, arms, baseline)  # a factorial: each scenario has its own
    if args.arm:
        if args.arm not in arms or args.arm == base_of[args.arm]:
            raise UsageError(f"arm {args.arm!r} is not a non-baseline arm of run {run['id']}",
                             hint=f"arms: {', '.join(arms)}; baseline: {baseline}")
        todo = [args.arm]
    else:
        todo = [a for a in arms if a != base_of[a]]
    if not todo:
        raise UsageError(f"run {run['id']} has only the baseline arm: nothing to plan against")
    plans = [_plan_one(run, rows, base_of[arm], arm, opts, boots) for arm in todo]
    data = {"run": run["id"], "store": shown(args.store), "name": run["name"],
            "blocks_needed": max(p["blocks_needed"] for p in plans), "arms": plans}
    if args.json:
        print_json(data)
    else:
        _print_plan(data, opts)
    return 0


def _print_plan(data: dict[str, Any], opts: dict[str, Any]) -> None:
    con = Console()
    con.print(f"plan from pilot run {data['run']} '{data['name']}' in {data['store']}: detect "
              f"{100 * opts['effect']:g}% at {100 * opts['confidence']:g}% confidence with "
              f"{100 * opts['power']:g}% power", markup=False)
    for p in data["arms"]:
        con.print(f"  {p['arm']} vs {p['baseline']}: {p['n_pilot']} pilot blocks, robust SD of "
                  f"paired log-ratios {100 * p['robust_sd']:.3g}%, per-block SD of the shift "
                  f"{100 * p['unit_sd']:.3g}% -> {p['blocks_needed']} blocks "
                  f"(the pilot has {p['n_pilot']})", markup=False)
        if "budget" in p:
            eff = p["budget"]["effect_pct"]
            shown = "none (see note)" if eff is None else f"{eff:.3g}%"
            con.print(f"    with {p['budget']['blocks']} blocks the smallest detectable effect: "
                      f"{shown}", markup=False)
            for n in p["budget"]["notes"]:
                con.print(f"    note: {n}", markup=False)
        for n in p["notes"]:
            con.print(f"    note: {n}", markup=False)
        if "reps" in p:
            _print_reps(con, p["reps"])
        rep = p.get("repeats") or {}
        if rep.get("reading") or rep.get("error"):
            con.print(f"    repeats: {rep.get('reading') or rep.get('error')}", markup=False)
    if len(data["arms"]) > 1:
        con.print(f"every arm: {data['blocks_needed']} blocks", markup=False)


def _print_reps(con: Any, r: dict[str, Any]) -> None:
    if "error" in r:
        con.print(f"    repetitions within boots: {r['error']}", markup=False)
        return
    shares = "; ".join(f"{a} {100 * c['share_between']:.0f}% / {100 * c['share_within']:.0f}%"
                       for a, c in r["arms"].items())
    con.print(f"    repetitions within boots (pilot k = {r['k_pilot']:g}): variance of log "
              f"values between / within boots: {shares}", markup=False)
    if "recommended_k" in r:
        con.print(f"    recommended trials_per_boot = {r['recommended_k']} (a boot costs "
                  f"{r['cost_boot_s']:.3g} s beyond its workload, a trial "
                  f"{r['cost_trial_s']:.3g} s) -> {r['boots_needed']} boots per arm at k = "
                  f"{r['recommended_k']}: about {r['guest_s_at_k'] / 3600:.2g} h of guest time, "
                  f"against {r['guest_s_at_pilot_k'] / 3600:.2g} h at k = {r['k_pilot']:g}",
                  markup=False)
    notes = list(r.get("notes") or []) + list(r.get("pooled", {}).get("notes") or [])
    for n in dict.fromkeys(notes):
        con.print(f"    note: {n}", markup=False)
