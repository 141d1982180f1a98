"""Do the paired and interleaved designs agree on a real difference, across separate runs?

    .venv/bin/python bench/design_agreement.py [--rounds 4] [--blocks 10] [--duration 2]
        [--size 512M] [--window-ms 20] [--warmup-ms MS] [--seed 77] [--json PATH]

Runs `hugelab run` on hugelab-mem chase, 4k vs hugetlb-2M, alternating the designs: round r
runs the paired design, then the interleaved one (each a separate run in its own store, seed
seed + r), as a user would run the same experiment again minutes later (issue 20). Per run: the
effect with its 95% interval and the wall time. Per design: the between-run SD of the runs'
effects and the effect across runs with the run as a random effect (hugelab.stats.repeats:
Paule-Mandel tau, HKSJ interval). The design difference (interleaved minus paired) is taken
round by round, with a t interval over the rounds, and compared with the between-run spread.

Prints Markdown for docs/benchmarks.md; --json writes the raw numbers. Root only (it changes the
host like any run, and restores it); it waits for the host lock behind other hugelab runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scipy import stats

from hugelab.stats import repeats
from hugelab.store import Store

ROOT = Path(__file__).resolve().parents[1]

HUGELAB = [sys.executable, "-m", "hugelab.cli"]
DESIGNS = ("paired", "interleaved")

EXPERIMENT = """\
name = "agree-{design}-{round}"
seed = {seed}
blocks = {blocks}
design = "{design}"
baseline = "4k"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "{size}"
duration = {duration}
window_ms = {window}
{warmup}
[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "2M"
backing = "hugetlb-2M"
"""


def experiment(design: str, rnd: int, args: argparse.Namespace) -> str:
    warmup = f"warmup_ms = {args.warmup_ms:g}\n" if args.warmup_ms is not None else ""
    return EXPERIMENT.format(design=design, round=rnd, seed=args.seed + rnd, blocks=args.blocks,
                             size=args.size, duration=args.duration, window=args.window_ms,
                             warmup=warmup if design == "interleaved" else "")


def log_ratios(db: Path) -> list[float]:
    """Per block, log(2M / 4k) of the run's ok trials."""
    with Store(db) as st:
        run = st.run(None)
        cells: dict[int, dict[str, float]] = {}
        for block, _pos, arm, _target, status, value in st.values(run["id"]):
            if status == "ok" and value:
                cells.setdefault(block, {})[arm] = float(value)
    return [math.log(c["2M"] / c["4k"]) for _, c in sorted(cells.items())
            if "2M" in c and "4k" in c]


def run_one(design: str, rnd: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    exp, db = tmp / f"{design}-{rnd}.toml", tmp / f"{design}-{rnd}.db"
    exp.write_text(experiment(design, rnd, args))
    t0 = time.time()
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", str(db), "--json",
                        "--wait-host", "1800"], capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - t0
    if r.returncode != 0:
        raise SystemExit(f"{design} round {rnd} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    comp = json.loads(r.stdout)["comparisons"][0]
    out = {"design": design, "round": rnd, "wall_s": wall, "verdict": comp["verdict"],
           "effect_pct": comp["effect_pct"], "ci_low_pct": comp["ci_low_pct"],
           "ci_high_pct": comp["ci_high_pct"], "log_ratios": log_ratios(db)}
    print(f"round {rnd} {design}: {out['effect_pct']:+.1f}% [{out['ci_low_pct']:+.1f}, "
          f"{out['ci_high_pct']:+.1f}] in {wall:.0f} s", file=sys.stderr, flush=True)
    return out


def t_interval(x: list[float], level: float = 0.95) -> tuple[float, float, float]:
    m = statistics.fmean(x)
    if len(x) < 2:
        return m, float("nan"), float("nan")
    half = stats.t.isf((1 - level) / 2, len(x) - 1) * statistics.stdev(x) / math.sqrt(len(x))
    return m, m - half, m + half


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, Any] = {}
    for d in DESIGNS:
        mine = [r for r in runs if r["design"] == d]
        eff = [r["effect_pct"] for r in mine]
        rep = repeats.combine([r["log_ratios"] for r in mine]).to_dict()
        per[d] = {"runs": len(mine), "effects_pct": eff, "mean_pct": statistics.fmean(eff),
                  "between_run_sd_pct": statistics.stdev(eff) if len(eff) > 1 else None,
                  "across_runs": {k: rep["pooled"][k] for k in
                                  ("effect_pct", "ci_low_pct", "ci_high_pct", "tau_pct")},
                  "repeats_disagree": rep["disagree"],
                  "median_wall_s": statistics.median(r["wall_s"] for r in mine)}
    rounds = sorted({r["round"] for r in runs})
    by = {(r["design"], r["round"]): r["effect_pct"] for r in runs}
    diffs = [by[("interleaved", k)] - by[("paired", k)] for k in rounds
             if ("interleaved", k) in by and ("paired", k) in by]
    m, lo, hi = t_interval(diffs)
    spread = max(v["between_run_sd_pct"] or 0.0 for v in per.values())
    return {"designs": per, "difference": {"per_round_pct": diffs, "mean_pct": m, "ci_low_pct": lo,
                                           "ci_high_pct": hi, "interval": "t over rounds, 95%"},
            "difference_within_spread": bool(abs(m) <= spread), "largest_between_run_sd_pct": spread}


def markdown(args: argparse.Namespace, runs: list[dict[str, Any]], s: dict[str, Any]) -> str:
    warm = "default (a quarter of the window)" if args.warmup_ms is None else f"{args.warmup_ms:g} ms"
    lines = [f"hugelab-mem chase over {args.size}, 4k vs hugetlb-2M, {args.blocks} blocks of "
             f"{args.duration:g} s trials, interleaved windows {args.window_ms:g} ms with warm-up "
             f"{warm}; {args.rounds} rounds, each a paired run then an interleaved run",
             "", "| round | paired: effect [95% CI] | interleaved: effect [95% CI] |",
             "|---|---|---|"]
    cell = {(r["design"], r["round"]): f"{r['effect_pct']:+.1f}% [{r['ci_low_pct']:+.1f}, "
            f"{r['ci_high_pct']:+.1f}]" for r in runs}
    for k in sorted({r["round"] for r in runs}):
        lines.append(f"| {k + 1} | {cell.get(('paired', k), '-')} | "
                     f"{cell.get(('interleaved', k), '-')} |")
    lines += ["", "| design | mean of runs | between-run SD | across runs (random effect) [95% CI]"
              " | tau | run wall time (median) |", "|---|---|---|---|---|---|"]
    for d, v in s["designs"].items():
        a = v["across_runs"]
        sd = "-" if v["between_run_sd_pct"] is None else f"{v['between_run_sd_pct']:.1f} points"
        lines.append(f"| {d} | {v['mean_pct']:+.1f}% | {sd} | {a['effect_pct']:+.1f}% "
                     f"[{a['ci_low_pct']:+.1f}, {a['ci_high_pct']:+.1f}] | {a['tau_pct']:.1f}% "
                     f"| {v['median_wall_s']:.0f} s |")
    d = s["difference"]
    lines += ["", f"Design difference (interleaved minus paired, round by round): "
              f"{d['mean_pct']:+.1f} points [{d['ci_low_pct']:+.1f}, {d['ci_high_pct']:+.1f}] "
              f"(95%, t over {len(d['per_round_pct'])} rounds; per round "
              + ", ".join(f"{x:+.1f}" for x in d["per_round_pct"]) + "); "
              + ("within" if s["difference_within_spread"] else "outside")
              + f" the larger between-run SD ({s['largest_between_run_sd_pct']:.1f} points)."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--size", default="512M")
    ap.add_argument("--window-ms", type=float, default=20.0)
    ap.add_argument("--warmup-ms", type=float, default=None)
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.rounds < 2 or args.blocks < 6:
        ap.error("at least 2 rounds and 6 blocks")
    runs = []
    with tempfile.TemporaryDirectory(prefix="hugelab-agree-") as tmp:
        for k in range(args.rounds):
            for design in DESIGNS:
                runs.append(run_one(design, k, args, Path(tmp)))
    s = summarise(runs)
    print(markdown(args, runs, s))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "runs": runs, "summary": s}, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
