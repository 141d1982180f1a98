"""`hugelab import`, `hugelab compare` (two runs, unpaired) and `hugelab plan` (blocks needed)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from hugelab.errors import StoreError, UsageError
from hugelab.store import SqlStore
from hugelab.store.importers import (
    FORMATS,
    ImportResult,
    import_files,
    parse_fraction,
    split_inputs,
)
from hugelab.store.locate import display, open_store, same, shown

AddOpt = Callable[[argparse.ArgumentParser], None]

UNPAIRED_WARNING = (
    "WARNING: this is an unpaired comparison of two runs made at different times. Its interval "
    "sees only the trial-to-trial noise inside each run, not what changed between the runs "
    "(drift, reboots, kernel or firmware updates, other load, thermal state), so a "
    "'significant' difference may be the machine rather than the arm, and a real one may be "
    "hidden. It is much weaker than a paired run: for a verdict, run both settings as arms of "
    "one experiment (hugelab run), where every block holds one trial of each arm.")


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    p = sub.add_parser(
        "import", help="bring existing results (CSV, sysbench, stress-ng, iperf3) into a store",
        description="Imports results that exist into a store as one run, so the same reports "
        "apply. CSV: one row per trial with a header; columns arm, value required; block, "
        "order, timestamp, unit, better optional. Raw tool outputs (sysbench memory text, "
        "stress-ng --metrics-brief text or --yaml, iperf3 -J JSON) hold no arm: name it with "
        "--arm ARM or pass ARM=FILE. Without block numbers the i-th trial of each arm is paired "
        "with the i-th of every other. Every row is validated first: if any is bad, all bad rows "
        "are listed with their line numbers and nothing is imported.")
    p.add_argument("files", nargs="+", metavar="FILE", help="FILE or ARM=FILE")
    add_store(p)
    add_json(p)
    p.add_argument("--name", help="name of the imported run (default: from the file names)")
    p.add_argument("--format", choices=FORMATS, help="input format (default: guessed per file)")
    p.add_argument("--arm", help="arm of every FILE not given as ARM=FILE (raw tool outputs)")
    p.add_argument("--baseline", help="baseline arm (default: the first arm in the input)")
    p.set_defaults(func=cmd_import)

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

    q = sub.add_parser(
        "plan", help="blocks needed for a verdict, from a pilot run (>= 10 blocks)",
        description="From a pilot run's paired blocks (baseline arm against ARM) estimates the "
        "noise and prints the blocks needed to detect --effect at --confidence with --power; "
        "with --budget N also the smallest effect N blocks can detect. When the pilot's guest "
        "boots ran several trials (trials_per_boot), also the share of variance between and "
        "within boots, the trials per boot that the pilot's measured boot and trial costs "
        "recommend, and the boots needed at that k. Percentages may be written 1% or 0.01.")
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


def _print_json(data: Any) -> None:
    from hugelab.cli.output import print_json
    print_json(data)


def _console() -> Any:
    from rich.console import Console
    return Console()


# --- import --------------------------------------------------------------------------------------

def cmd_import(args: argparse.Namespace) -> int:
    items = split_inputs(args.files, args.arm)
    result = import_files(args.store, items, name=args.name, fmt=args.format,
                          baseline=args.baseline)
    if args.json:
        _print_json(result.to_dict())
    else:
        _print_import(result)
    return 0


def _print_import(r: ImportResult) -> None:
    con = _console()
    arms = ", ".join(f"{a} ({n})" for a, n in r.arms.items())
    con.print(f"imported {r.trials} trial(s) into run {r.run_id} of {r.store} ('{r.name}'), "
              f"{r.blocks} block(s); arms: {arms}; baseline '{r.baseline}'", markup=False)
    for n in r.notes:
        con.print(f"note: {n}", markup=False)
    for w in r.warnings:
        con.print(f"warning: {w}", style="yellow", markup=False)
    con.print(f"trials: hugelab show {r.run_id} --store {r.store}", markup=False)


# --- reading runs --------------------------------------------------------------------------------

def _open_run(path: str, run_id: int | None) -> tuple[SqlStore, dict[str, Any]]:
    store = open_store(path, must_exist=True)
    try:
        return store, store.run(run_id)
    except BaseException:
        store.close()
        raise


def _arms_of(run: dict[str, Any], rows: list[tuple[Any, ...]]) -> tuple[list[str], str]:
    exp = run["experiment"]
    names = [a["name"] for a in exp.get("arms", []) if isinstance(a, dict) and "name" in a]
    for r in rows:
        if r[2] not in names:
            names.append(r[2])
    if not names:
        raise StoreError(f"run {run['id']} has no trials")
    return names, str(exp.get("baseline") or names[0])


def _baselines(run: dict[str, Any], arms: list[str], baseline: str) -> dict[str, str]:
    """Per arm, the arm it is compared with: in a factorial, its scenario's baseline cell."""
    exp = run["experiment"]
    if not exp.get("factors"):
        return dict.fromkeys(arms, baseline)
    from hugelab.experiment import Experiment
    model = Experiment.from_dict(exp)
    known = {a.name for a in model.arms}
    return {a: model.baseline_of(a) if a in known else baseline for a in arms}


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


# --- compare: unpaired two-sample shift ------------------------------------------------------------

def _u_null_cdf(m: int, n: int) -> NDArray[np.float64]:
    """Exact CDF of the Mann-Whitney U statistic (no ties) for samples of m and n: P(U <= u)."""
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0: U is 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]
        for j in range(1, n + 1):
            p = np.zeros(i * j + 1)
            p[j:j + prev[j].size] += i / (i + j) * prev[j]
            p[:cur[j - 1].size] += j / (i + j) * cur[j - 1]
            cur.append(p)
        prev = cur
    return np.asarray(np.cumsum(prev[n]), dtype=np.float64)


def _k_index(m: int, n: int, alpha: float) -> tuple[int, str]:
    """Rank k of the lower interval end among the m*n sorted differences (0: unbounded)."""
    if m * n <= 2500:
        cdf = _u_null_cdf(m, n)
        ok = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]
        return (int(ok[-1]) + 1 if ok.size else 0), "exact"
    z = float(stats.norm.isf(alpha / 2))
    sd = math.sqrt(m * n * (m + n + 1) / 12.0)
    return max(0, math.floor(m * n / 2.0 - z * sd - 0.5) + 1), "normal"


def two_sample_shift(a: ArrayLike, b: ArrayLike, alpha: float) -> dict[str, Any]:
    """Hodges-Lehmann shift of log(b) - log(a) with its Moses interval; Mann-Whitney p."""
    la = np.log(np.asarray(a, dtype=float))
    lb = np.log(np.asarray(b, dtype=float))
    diffs = np.sort((lb[None, :] - la[:, None]).ravel())
    hl = float(np.median(diffs))
    k, method = _k_index(la.size, lb.size, alpha)
    if k == 0:
        lo, hi = -math.inf, math.inf
    else:
        lo, hi = float(diffs[k - 1]), float(diffs[diffs.size - k])
    p = float(stats.mannwhitneyu(lb, la, alternative="two-sided").pvalue)
    return {"hl": hl, "lo": lo, "hi": hi, "method": method, "p": p}


@dataclass(frozen=True)
class Unpaired:
    arm: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    unit: str | None
    better: str | None
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    ci_method: str
    confidence: float
    p_value: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def _verdict(p: float, hl: float, alpha: float, better: str | None) -> str:
    if not p < alpha or hl == 0:
        return "inconclusive"
    if better not in ("lower", "higher"):
        return "B higher" if hl > 0 else "B lower"
    b_better = (hl > 0) == (better == "higher")
    return "B faster" if b_better else "B slower"


def compare_values(arm: str, a: list[float], b: list[float], *, confidence: float,
                   unit: str | None, better: str | None) -> Unpaired:
    """Unpaired comparison of run B's values of one arm against run A's (percent: B vs A)."""
    alpha = 1.0 - confidence
    r = two_sample_shift(a, b, alpha)
    def pct(x: float) -> float:  # an unbounded interval end stays unbounded (nan -> None)
        return 100.0 * math.expm1(x) if math.isfinite(x) else math.nan

    return Unpaired(arm, len(a), len(b), float(np.median(a)), float(np.median(b)), unit, better,
                    pct(r["hl"]), pct(r["lo"]), pct(r["hi"]), r["method"], confidence, r["p"],
                    _verdict(r["p"], r["hl"], alpha, better))


def _ok_values(rows: list[tuple[Any, ...]], arm: str) -> list[float]:
    return [float(v) for _b, _p, a, _t, status, v in rows
            if a == arm and status == "ok" and v is not None and v > 0]


def _compare_arms(arms: list[str], ra: list[tuple[Any, ...]], rb: list[tuple[Any, ...]],
                  ma: dict[str, Any], mb: dict[str, Any], confidence: float,
                  notes: list[str]) -> list[Unpaired]:
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
        res = compare_values(arm, va, vb, confidence=confidence, unit=ua or ub, better=better)
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
    sa, run_a = _open_run(args.store_a, args.run_a)
    with sa:
        sb, run_b = _open_run(args.store_b, args.run_b)
        with sb:
            ra, rb = sa.values(run_a["id"]), sb.values(run_b["id"])
            ma, mb = _meta(sa, run_a["id"]), _meta(sb, run_b["id"])
    arms_a, _ = _arms_of(run_a, ra)
    arms_b, _ = _arms_of(run_b, rb)
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
        import sys
        print(UNPAIRED_WARNING, file=sys.stderr)
        _print_json(data)
    else:
        _print_compare(data, results)
    return 0


def _run_ref(path: str, run: dict[str, Any]) -> dict[str, Any]:
    return {"store": display(path), "run": run["id"], "name": run["name"], "created": run["created"],
            "imported": bool(run["experiment"].get("imported"))}


def _fmt_pct(x: float) -> str:
    return "unbounded" if math.isnan(x) else f"{x:+.2f}%"


def _print_compare(data: dict[str, Any], results: list[Unpaired]) -> None:
    con = _console()
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


# --- plan ------------------------------------------------------------------------------------------

def pilot_pairs(rows: list[tuple[Any, ...]], baseline: str, arm: str) -> dict[str, Any]:
    """Paired log-ratios log(arm / baseline), one per (block, target) with both arms ok."""
    cells: dict[tuple[int, str], dict[str, float]] = {}
    for block, _pos, a, target, status, value in rows:
        if a in (baseline, arm) and status == "ok" and value is not None and value > 0:
            cells.setdefault((block, target), {})[a] = float(value)
    keys = sorted(k for k, v in cells.items() if baseline in v and arm in v)
    d = [math.log(cells[k][arm] / cells[k][baseline]) for k in keys]
    return {"d": np.asarray(d, dtype=float), "targets": sorted({k[1] for k in keys})}


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
    from hugelab.report.load import rep_boots
    store, run = _open_run(args.store, args.run)
    with store:
        rows = store.values(run["id"])
        # an interleaved run's windows are not boots: its within-trial variance holds drift
        # that cancels in the paired ratio, so no trials_per_boot is recommended from them
        interleaved = (run.get("experiment") or {}).get("design") == "interleaved"
        boots = {} if interleaved else rep_boots(store.rep_rows(run["id"]))
    arms, baseline = _arms_of(run, rows)
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
        _print_json(data)
    else:
        _print_plan(data, opts)
    return 0


def _print_plan(data: dict[str, Any], opts: dict[str, Any]) -> None:
    con = _console()
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
