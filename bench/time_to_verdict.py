"""What a verdict costs in wall-clock time, measured as a user would run it.

    .venv/bin/python bench/time_to_verdict.py [--part native|guest|pgbench|all] [--minutes 5]
        [--blocks 120] [--looks 6] [--design paired|interleaved] [--duration 1]
        [--window-ms 20] [--aa-runs 20 --aa-blocks 12] [--pg-alpha 0.01] [--json PATH]

native: `hugelab run --until-verdict` at 99.99% (alpha 0.0001, margin ±1%) on the chase workload
(1 s trials, 512 MiB), for (a) an A/A pair (two identical 4k arms: the right verdict is
`equivalent`) and (b) a real backing difference (4k vs hugetlb-2M), per design ("paired", and
"interleaved" where this hugelab has it). Each is capped at --minutes; a run that reaches no
verdict in time is reported as such with the blocks it ran.

guest: hugelab's own guest under the machine's accelerator (TCG here), a 2 s chase workload,
one arm pair, 2 blocks, with trials_per_boot = 1 and 5: wall time per useful trial (the trial
row's started..ended divided by its repetitions) and the share of the guest's wall time spent
in the workload (provenance workload_s / guest_wall_s).

pgbench: PostgreSQL (kind "postgres", select-only, scale 5, 4 clients) `hugelab run
--until-verdict` at 1 - --pg-alpha (default 99%), margin ±1%, for an A/A pair (huge_pages off
twice) and off vs on (2 MiB pool), paired (--duration seconds of pgbench per trial) and as
interleaved servers (the same load per arm in 1 s windows); each capped at --minutes.

Prints Markdown tables for docs/benchmarks.md; --json writes the raw numbers. Root only (it
changes the host like any run, and restores it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HUGELAB = [sys.executable, "-m", "hugelab.cli"]
DURATION, WINDOW = [1.0], [20.0]  # native trials: seconds, and interleaved windows (ms)
ROOT = Path(__file__).resolve().parents[1]

NATIVE = """\
name = "ttv-{case}-{design}"
seed = {seed}
blocks = {blocks}
design = "{design}"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "512M"
duration = {duration}
window_ms = {window}

[[arms]]
name = "a"
backing = "4k"

[[arms]]
name = "b"
backing = "{other}"
"""

GUEST = """\
name = "ttv-guest-k{k}"
seed = 5
blocks = 2

[vm]
mem = "384M"
trials_per_boot = {k}

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 2.0

[[arms]]
name = "anon"
backing = "4k"
vm = {{ backing = "anon" }}

[[arms]]
name = "anon-thp"
backing = "thp"
vm = {{ backing = "anon" }}
"""


PGBENCH = """\
name = "ttv-pg-{case}-{design}"
seed = {seed}
blocks = {blocks}
design = "{design}"

[workload]
kind = "postgres"
builtin = "select-only"
scale = 5
clients = 4
threads = 2
duration_s = {duration}
window_s = 1
warmup_s = 1

[[arms]]
name = "a"
backing = "4k"
app = {{ shared_buffers = "128MB" }}

[[arms]]
name = "b"
backing = "{other}"
app = {{ shared_buffers = "128MB" }}
"""


def hugelab(*args: str, cwd: Path, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HUGELAB, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, check=False)


def designs() -> list[str]:
    """The designs this hugelab accepts (interleaved once it exists)."""
    from hugelab.experiment.parse import DESIGNS
    return [d for d in ("paired", "interleaved") if d in DESIGNS]


def native_case(case: str, design: str, minutes: float, blocks: int, looks: int,
                work: Path, seed: int = 11) -> dict[str, Any]:
    other = "4k" if case == "aa" else "hugetlb-2M"
    exp = work / f"{case}-{design}-{seed}.toml"
    exp.write_text(NATIVE.format(case=case, design=design, seed=seed, blocks=blocks,
                                 other=other, duration=DURATION[0], window=WINDOW[0]))
    t0 = time.monotonic()
    try:
        r = hugelab("run", str(exp), "--store", "s.db", "--until-verdict", "--alpha", "0.0001",
                    "--margin", "0.01", "--looks", str(looks), "--json", cwd=work,
                    timeout=minutes * 60)
        out = json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip() else {}
        timed_out = False
    except subprocess.TimeoutExpired:
        out, timed_out = {}, True
        hugelab("recover", cwd=work)
    wall = time.monotonic() - t0
    shown = json.loads(hugelab("show", "--store", "s.db", "--json", cwd=work).stdout or "[]")
    run = next((x for x in shown if x.get("name") == f"ttv-{case}-{design}"
                and x.get("id") == out.get("run")), {})
    decided = ((out.get("sequential") or {}).get("decided") or {}).get("b") or {}
    return {"case": case, "design": design, "wall_s": round(wall, 1), "timed_out": timed_out,
            "verdict": decided.get("decision", "none at the last look"),
            "look": decided.get("look"), "trials": run.get("trials"),
            "blocks_planned": blocks, "raw": out if not timed_out else None}


def pgbench_case(case: str, design: str, minutes: float, blocks: int, looks: int,
                 alpha: float, work: Path, seed: int = 11) -> dict[str, Any]:
    """One `hugelab run --until-verdict` of PostgreSQL: A/A (off, off) or off vs on."""
    other = "4k" if case == "aa" else "hugetlb-2M"
    name = f"ttv-pg-{case}-{design}"
    exp = work / f"{name}.toml"
    exp.write_text(PGBENCH.format(case=case, design=design, seed=seed, blocks=blocks,
                                  other=other, duration=max(2, round(DURATION[0]))))
    store = f"{name}.db"
    t0 = time.monotonic()
    try:
        r = hugelab("run", str(exp), "--store", store, "--until-verdict", "--alpha", str(alpha),
                    "--margin", "0.01", "--looks", str(looks), "--json", "--wait-host", "900",
                    cwd=work, timeout=minutes * 60)
        out = json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip() else {}
        if not out:
            raise SystemExit(f"{name}: hugelab run failed ({r.returncode}):\n{r.stderr}")
        timed_out = False
    except subprocess.TimeoutExpired:
        out, timed_out = {}, True
        hugelab("recover", cwd=work)
    wall = time.monotonic() - t0
    decided = ((out.get("sequential") or {}).get("decided") or {}).get("b") or {}
    report = json.loads(hugelab("report", "--store", store, "--json", cwd=work).stdout or "{}")
    comp = next((c for c in report.get("comparisons") or [] if c.get("candidate") == "b"), {})
    tl = [e for e in (report.get("tail_latency") or {}).get("entries") or []
          if e["metric"] == "p99_ms"]
    return {"case": case, "design": design, "wall_s": round(wall, 1), "timed_out": timed_out,
            "verdict": decided.get("decision", "none at the last look"),
            "look": decided.get("look"), "blocks": report.get("blocks"),
            "effect_pct": comp.get("effect_pct"), "ci": [comp.get("ci_low_pct"),
                                                         comp.get("ci_high_pct")],
            "block_sd_pct": _block_sd(work, store), "p99": tl[0] if tl else None,
            "alpha": alpha}


def pg_aa_fixed(seed: int, blocks: int, work: Path) -> dict[str, Any]:
    """One interleaved-servers PostgreSQL A/A run of a fixed number of blocks: its verdict at
    the report's defaults (alpha 0.05, ±1%) and wall time."""
    name = f"pg-aa-fixed-{seed}"
    exp = work / f"{name}.toml"
    exp.write_text(PGBENCH.format(case="aa-fixed", design="interleaved", seed=seed,
                                  blocks=blocks, other="4k", duration=max(2, round(DURATION[0]))))
    t0 = time.monotonic()
    r = hugelab("run", str(exp), "--store", f"{name}.db", "--json", "--wait-host", "900",
                cwd=work)
    wall = time.monotonic() - t0
    out = json.loads(r.stdout) if r.stdout.strip() else {}
    comp = next((c for c in out.get("comparisons") or [] if str(c.get("candidate")) == "b"), {})
    return {"case": "pg-aa", "design": "interleaved", "seed": seed, "wall_s": round(wall, 1),
            "timed_out": False, "verdict": comp.get("verdict", f"no verdict (exit "
                                                     f"{r.returncode})"),
            "effect_pct": comp.get("effect_pct")}


def _block_sd(work: Path, store: str) -> float | None:
    """Robust SD (1.4826 x MAD) of the per-block log-ratios b/a, in %."""
    import math
    shown = json.loads(hugelab("show", "1", "--store", store, "--json", cwd=work).stdout or "{}")
    by: dict[int, dict[str, float]] = {}
    for t in shown.get("trials") or []:
        if t["status"] == "ok" and t["value"]:
            by.setdefault(t["block"], {})[t["arm"]] = float(t["value"])
    d = [math.log(v["b"] / v["a"]) for v in by.values() if "a" in v and "b" in v]
    if len(d) < 3:
        return None
    med = statistics.median(d)
    return round(100 * 1.4826 * statistics.median(abs(x - med) for x in d), 2)


def aa_fixed(seed: int, blocks: int, work: Path) -> dict[str, Any]:
    """One interleaved A/A run of a fixed number of blocks: its verdict and wall time."""
    exp = work / f"aa-fixed-{seed}.toml"
    exp.write_text(NATIVE.format(case="aa-fixed", design="interleaved", seed=seed,
                                 blocks=blocks, other="4k", duration=DURATION[0],
                                 window=WINDOW[0]))
    t0 = time.monotonic()
    r = hugelab("run", str(exp), "--store", f"aa-{seed}.db", "--json", cwd=work)
    wall = time.monotonic() - t0
    out = json.loads(r.stdout) if r.stdout.strip() else {}
    comp = next((c for c in out.get("comparisons") or [] if str(c.get("candidate")) == "b"), {})
    return {"case": "aa", "design": "interleaved", "seed": seed, "wall_s": round(wall, 1),
            "timed_out": False, "verdict": comp.get("verdict", f"no verdict (exit "
                                                     f"{r.returncode})"),
            "effect_pct": comp.get("effect_pct")}


def guest_case(k: int, work: Path) -> dict[str, Any]:
    exp = work / f"guest-k{k}.toml"
    exp.write_text(GUEST.format(k=k))
    store = f"g{k}.db"
    t0 = time.monotonic()
    r = hugelab("run", str(exp), "--store", store, cwd=work)
    wall = time.monotonic() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"guest run k={k} failed:\n{r.stderr}")
    trials = json.loads(hugelab("show", "1", "--store", store, "--json", cwd=work).stdout)
    rows = trials["trials"]
    per_trial = [(t["ended"] - t["started"]) / k for t in rows if t["status"] == "ok"]
    share = [t["provenance"]["workload_s"] / t["provenance"]["guest_wall_s"] for t in rows
             if t["status"] == "ok"]
    return {"k": k, "wall_s": round(wall, 1), "boots": len(rows),
            "ok": sum(t["status"] == "ok" for t in rows),
            "wall_per_useful_trial_s": round(statistics.median(per_trial), 2) if per_trial else None,
            "workload_share": round(statistics.median(share), 3) if share else None,
            "boot_s": round(statistics.median(t["provenance"]["boot_s"] for t in rows), 2)}


def print_tables(results: dict[str, Any]) -> None:
    if results["native"]:
        print("| case | design | verdict | trials | wall time |\n|---|---|---|---|---|")
        for r in results["native"]:
            verdict = "none (cap reached)" if r["timed_out"] else r["verdict"]
            print(f"| {'A/A' if r['case'] == 'aa' else '4k vs hugetlb-2M'} | {r['design']} | "
                  f"{verdict} | {r['trials']} | {r['wall_s'] / 60:.1f} min |")
    if results.get("aa_runs"):
        runs = results["aa_runs"]
        counts: dict[str, int] = {}
        for r in runs:
            v = "none (cap reached)" if r["timed_out"] else str(r["verdict"])
            counts[v] = counts.get(v, 0) + 1
        walls = sorted(r["wall_s"] for r in runs)
        print(f"\n{len(runs)} interleaved A/A runs (fixed blocks, alpha 0.05, ±1%): "
              + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items()))
              + f"; wall time median {statistics.median(walls) / 60:.1f} min, "
              f"max {walls[-1] / 60:.1f} min")
    if results.get("pgbench"):
        print("\n| case | design | confidence | verdict | blocks | effect [CI] | per-block SD |"
              " wall time |\n|---|---|---|---|---|---|---|---|")
        for r in results["pgbench"]:
            verdict = "none (cap reached)" if r["timed_out"] else r["verdict"]
            eff = "-" if r["effect_pct"] is None else (
                f"{r['effect_pct']:+.1f}% [{r['ci'][0]:+.1f}, {r['ci'][1]:+.1f}]"
                if None not in r["ci"] else f"{r['effect_pct']:+.1f}%")
            print(f"| {'A/A' if r['case'] == 'aa' else 'off vs on (2 MiB)'} | {r['design']} | "
                  f"{100 * (1 - r['alpha']):g}% | {verdict} | {r['blocks']} | {eff} | "
                  f"{r['block_sd_pct']}% | {r['wall_s'] / 60:.1f} min |")
    if results["guest"]:
        print("\n| trials_per_boot | boots (ok) | boot s | wall per useful trial | "
              "workload share |\n|---|---|---|---|---|")
        for r in results["guest"]:
            print(f"| {r['k']} | {r['boots']} ({r['ok']}) | {r['boot_s']} | "
                  f"{r['wall_per_useful_trial_s']} s | {100 * r['workload_share']:.0f}% |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("native", "guest", "pgbench", "all"), default="all")
    ap.add_argument("--minutes", type=float, default=8.0,
                    help="native: wall-time cap per case (default 8)")
    ap.add_argument("--blocks", type=int, default=180,
                    help="native: the most blocks (--until-verdict's plan; default 180)")
    ap.add_argument("--looks", type=int, default=6, help="native: planned looks (default 6)")
    ap.add_argument("--design", choices=("paired", "interleaved"), action="append",
                    help="native: only these designs (repeatable; default: every one)")
    ap.add_argument("--aa-runs", type=int, default=0, metavar="N",
                    help="native: N more interleaved A/A runs of --aa-blocks blocks each (fresh "
                    "seeds, the report's verdict at its defaults: alpha 0.05, margin 1%%), "
                    "counting faster/slower verdicts (false positives)")
    ap.add_argument("--aa-blocks", type=int, default=12, help="blocks per A/A run (12)")
    ap.add_argument("--duration", type=float, default=1.0,
                    help="native: seconds per trial (default 1)")
    ap.add_argument("--window-ms", type=float, default=20.0,
                    help="native, interleaved: window length in ms (default 20)")
    ap.add_argument("--pg-aa-runs", type=int, default=0, metavar="N",
                    help="pgbench: N interleaved-servers A/A runs of --aa-blocks blocks each "
                    "(fresh seeds, report defaults), counting false positives")
    ap.add_argument("--pg-alpha", type=float, default=0.01,
                    help="pgbench: alpha of --until-verdict (0.01: 99%%; 0.0001: 99.99%%)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    DURATION[0], WINDOW[0] = args.duration, args.window_ms
    results: dict[str, Any] = {"native": [], "guest": []}
    with tempfile.TemporaryDirectory(prefix="hugelab-ttv-") as tmp:
        work = Path(tmp)
        if args.part in ("guest", "all"):
            for k in (1, 5):
                results["guest"].append(guest_case(k, work))
        if args.part in ("native", "all"):
            for design in args.design or designs():
                for case in ("aa", "diff"):
                    results["native"].append(native_case(case, design, args.minutes,
                                                         args.blocks, args.looks, work))
            results["aa_runs"] = [aa_fixed(100 + i, args.aa_blocks, work)
                                  for i in range(args.aa_runs)]
        if args.part in ("pgbench", "all"):
            results["pgbench"] = [
                pgbench_case(case, design, args.minutes, args.blocks, args.looks,
                             args.pg_alpha, work)
                for design in args.design or designs() for case in ("aa", "diff")
                if args.minutes > 0]
            if args.pg_aa_runs:
                results["aa_runs"] = [pg_aa_fixed(200 + i, args.aa_blocks, work)
                                      for i in range(args.pg_aa_runs)]
    print_tables(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
