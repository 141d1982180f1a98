"""`hugelab plan`: the blocks a verdict needs, from a pilot run's paired blocks (and, where its
boots ran several trials, the trials per boot its costs recommend): hugelab.planning.pilot's
plan, printed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from hugelab.cli.output import print_json
from hugelab.cli.runs import arms_of, open_run
from hugelab.errors import UsageError
from hugelab.planning.pilot import plan_pilot
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
        "regimes is told to plan from repeats. The confidence is the verdicts' own unless "
        "given: 1 - the run's --until-verdict alpha, else 1 - the report's default alpha "
        "(0.05): 95%; the plan says which it used. Percentages may be written 1% or 0.01.")
    q.add_argument("run", nargs="?", type=int, help="pilot run id (default: the latest run)")
    add_store(q)
    add_json(q)
    q.add_argument("--arm", help="arm to plan for (default: every non-baseline arm)")
    q.add_argument("--effect", default="1%", help="effect to detect (default 1%%)")
    level = q.add_mutually_exclusive_group()
    level.add_argument("--confidence", help="confidence, e.g. 99%% (default: the verdicts' "
                       "own, 1 - alpha: 95%%, or the run's --until-verdict alpha)")
    level.add_argument("--alpha", help="false-positive rate, the report's --alpha: the same "
                       "as --confidence 1 - ALPHA")
    q.add_argument("--power", default="90%", help="power (default 90%%)")
    q.add_argument("--budget", type=int, metavar="N",
                   help="blocks you can afford: also print the smallest effect N blocks detect")
    q.set_defaults(func=cmd_plan)


def confidence(args: argparse.Namespace, run: dict[str, Any]) -> tuple[float, str]:
    """The plan's confidence and where it came from: --confidence, --alpha, the run's
    --until-verdict alpha, else the report's default alpha (the verdicts' own)."""
    if args.confidence is not None:
        return parse_fraction(args.confidence, "--confidence"), "--confidence"
    if args.alpha is not None:
        alpha = parse_fraction(args.alpha, "--alpha")
        if not 0 < alpha < 0.5:
            raise UsageError(f"--alpha must lie between 0 and 0.5, got {alpha:g}")
        return 1 - alpha, f"--alpha {alpha:g}"
    seq = (run.get("sequential") or {}).get("family_alpha")
    if seq:
        return 1 - float(seq), f"alpha {float(seq):g}, the run's --until-verdict alpha"
    from hugelab.report.analysis import Options
    alpha = Options().alpha
    return 1 - alpha, f"alpha {alpha:g}, the report's default for its verdicts"


def cmd_plan(args: argparse.Namespace) -> int:
    opts = {"effect": parse_fraction(args.effect, "--effect"),
            "power": parse_fraction(args.power, "--power"), "budget": args.budget}
    if args.budget is not None and args.budget < 1:
        raise UsageError("--budget must be at least 1 block")
    from hugelab.report.runload import rep_boots
    store, run = open_run(args.store, args.run)
    with store:
        opts["confidence"], opts["confidence_from"] = confidence(args, run)
        rows = store.values(run["id"])
        # an interleaved run's windows are not boots: its within-trial variance holds drift
        # that cancels in the paired ratio, so no trials_per_boot is recommended from them
        interleaved = (run.get("experiment") or {}).get("design") == "interleaved"
        boots = {} if interleaved else rep_boots(store.rep_rows(run["id"]))
    arms, baseline = arms_of(run, rows)
    planned = plan_pilot(run, rows, arms, baseline, opts, boots, args.arm)
    data = {"run": run["id"], "store": shown(args.store), "name": run["name"],
            "confidence": opts["confidence"], "confidence_from": opts["confidence_from"],
            **planned}
    if args.json:
        print_json(data)
    else:
        _print_plan(data, opts)
    return 0


def _print_plan(data: dict[str, Any], opts: dict[str, Any]) -> None:
    con = Console()
    con.print(f"plan from pilot run {data['run']} '{data['name']}' in {data['store']}: detect "
              f"{100 * opts['effect']:g}% at {100 * opts['confidence']:.10g}% confidence "
              f"({opts['confidence_from']}) with {100 * opts['power']:g}% power", markup=False)
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
