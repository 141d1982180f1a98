"""`hugelab compare`: two runs made at different times, unpaired (weaker than a paired run);
the statistics are hugelab.stats.unpaired's."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

from hugelab.cli.output import print_json
from hugelab.cli.runs import arms_of, open_run
from hugelab.errors import UsageError
from hugelab.store import SqlStore
from hugelab.store.importers import parse_fraction
from hugelab.store.locate import display, same

if TYPE_CHECKING:  # scipy: loaded by `compare` itself, not by every command's start
    from hugelab.stats import Unpaired

AddOpt = Callable[[argparse.ArgumentParser], None]

UNPAIRED_WARNING = (
    "WARNING: this is an unpaired comparison of two runs made at different times. Its interval "
    "sees only the trial-to-trial noise inside each run, not what changed between the runs "
    "(drift, reboots, kernel or firmware updates, other load, thermal state), so a "
    "'significant' difference may be the machine rather than the arm, and a real one may be "
    "hidden. It is much weaker than a paired run: for a verdict, run both settings as arms of "
    "one experiment (hugelab run), where every block holds one trial of each arm.")


def register(sub: argparse._SubParsersAction, add_json: AddOpt) -> None:
    c = sub.add_parser(
        "compare", help="compare two runs made at different times (unpaired, weaker)",
        description="Unpaired comparison of the arms two runs have in common: Mann-Whitney test "
        "and Hodges-Lehmann two-sample shift of log values with its distribution-free interval. "
        "Runs made at different times differ by more than the arm: prefer a paired run.")
    c.add_argument("store_a", metavar="STORE_A", help="store holding run A (path or URL)")
    c.add_argument("store_b", metavar="STORE_B",
                   help="store holding run B (may be STORE_A again)")
    c.add_argument("--run-a", type=int, metavar="N", help="run in STORE_A (default: its latest)")
    c.add_argument("--run-b", type=int, metavar="N", help="run in STORE_B (default: its latest)")
    c.add_argument("--arm", help="compare only this arm (default: every arm both runs have)")
    c.add_argument("--confidence", default="95%", help="confidence of the interval (default 95%%)")
    add_json(c)
    c.set_defaults(func=cmd_compare)


def _meta(store: SqlStore, run_id: int) -> dict[str, dict[str, Any]]:
    """Per arm: unit, better, metric and kernels, from the first trials that say."""
    out: dict[str, dict[str, Any]] = {}
    for t in store.trials(run_id):
        m = out.setdefault(t["arm"], {"unit": None, "better": None, "metric": None,
                                      "kernels": set()})
        for k in ("unit", "better", "metric"):
            m[k] = m[k] or t[k]
        if t["provenance"].get("kernel"):
            m["kernels"].add(t["provenance"]["kernel"])
    return out


def _ok_values(rows: list[tuple[Any, ...]], arm: str) -> list[float]:
    return [float(v) for _b, _p, a, _t, status, v in rows
            if a == arm and status == "ok" and v is not None and v > 0]


def _compare_arms(arms: list[str], ra: list[tuple[Any, ...]], rb: list[tuple[Any, ...]],
                  ma: dict[str, Any], mb: dict[str, Any], confidence: float,
                  notes: list[str]) -> list[Unpaired]:
    from hugelab.stats import compare_unpaired

    out = []
    for arm in arms:
        va, vb = _ok_values(ra, arm), _ok_values(rb, arm)
        ua, ub = ma.get(arm, {}).get("unit"), mb.get(arm, {}).get("unit")
        if ua and ub and ua != ub:
            notes.append(f"{arm}: skipped, units differ ({ua} in A, {ub} in B)")
            continue
        if len(va) < 2 or len(vb) < 2:
            notes.append(f"{arm}: skipped, too few ok trials ({len(va)} in A, {len(vb)} in B)")
            continue
        better = ma.get(arm, {}).get("better") or mb.get(arm, {}).get("better")
        res = compare_unpaired(arm, va, vb, confidence=confidence, unit=ua or ub, better=better)
        if math.isnan(res.ci_low_pct):
            notes.append(f"{arm}: too few trials for a bounded {100 * confidence:g}% interval")
        out.append(res)
        ka, kb = ma.get(arm, {}).get("kernels", set()), mb.get(arm, {}).get("kernels", set())
        if ka and kb and ka != kb:
            notes.append(f"{arm}: kernels differ ({', '.join(sorted(ka))} in A; "
                         f"{', '.join(sorted(kb))} in B)")
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    confidence = parse_fraction(args.confidence, "--confidence")
    if not 0.5 < confidence < 1:
        raise UsageError(f"--confidence must lie between 50% and 100%, got {args.confidence}")
    sa, run_a = open_run(args.store_a, args.run_a)
    with sa:
        sb, run_b = open_run(args.store_b, args.run_b)
        with sb:
            ra, rb = sa.values(run_a["id"]), sb.values(run_b["id"])
            ma, mb = _meta(sa, run_a["id"]), _meta(sb, run_b["id"])
    arms_a, _ = arms_of(run_a, ra)
    arms_b, _ = arms_of(run_b, rb)
    common = [a for a in arms_a if a in arms_b]
    if args.arm:
        if args.arm not in common:
            raise UsageError(f"arm {args.arm!r} is not in both runs",
                             hint=f"A has {', '.join(arms_a)}; B has {', '.join(arms_b)}")
        common = [args.arm]
    if not common:
        raise UsageError("the two runs have no arm in common",
                         hint=f"A has {', '.join(arms_a)}; B has {', '.join(arms_b)}")
    notes: list[str] = []
    if same(args.store_a, args.store_b) and run_a["id"] == run_b["id"]:
        notes.append(f"A and B are the same run ({run_a['id']}): pick others with --run-a/--run-b")
    results = _compare_arms(common, ra, rb, ma, mb, confidence, notes)
    data = {"warning": UNPAIRED_WARNING,
            "a": _run_ref(args.store_a, run_a), "b": _run_ref(args.store_b, run_b),
            "method": "Mann-Whitney test and Hodges-Lehmann two-sample shift on log values "
                      "(percent: B relative to A)",
            "arms": [r.to_dict() for r in results], "notes": notes}
    if args.json:
        print(UNPAIRED_WARNING, file=sys.stderr)
        print_json(data)
    else:
        _print_compare(data, results)
    return 0


def _run_ref(path: str, run: dict[str, Any]) -> dict[str, Any]:
    return {"store": display(path), "run": run["id"], "name": run["name"], "created": run["created"],
            "imported": bool(run["experiment"].get("imported"))}


def _fmt_pct(x: float) -> str:
    return "unbounded" if math.isnan(x) else f"{x:+.2f}%"


def _print_compare(data: dict[str, Any], results: list[Unpaired]) -> None:
    con = Console()
    con.print(UNPAIRED_WARNING, style="bold yellow", markup=False)
    for side in ("a", "b"):
        r = data[side]
        con.print(f"{side.upper()}: run {r['run']} '{r['name']}' in {r['store']}"
                  f"{' (imported)' if r['imported'] else ''}", markup=False)
    con.print("B against A, per arm (unpaired: Hodges-Lehmann shift, Mann-Whitney p):",
              markup=False)
    for r in results:
        unit = f" {r.unit}" if r.unit else ""
        con.print(f"  {r.arm}: {_fmt_pct(r.effect_pct)} ({100 * r.confidence:g}% interval "
                  f"{_fmt_pct(r.ci_low_pct)} .. {_fmt_pct(r.ci_high_pct)}), p = "
                  f"{r.p_value:.2g}: {r.verdict}  [n {r.n_a}/{r.n_b}, median "
                  f"{r.median_a:.4g} -> {r.median_b:.4g}{unit}]", markup=False)
    for n in data["notes"]:
        con.print(f"note: {n}", markup=False)
