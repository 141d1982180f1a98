"""Do request-level interleaving and the server's own benchmark agree, in size and not only in
direction? PostgreSQL huge_pages off vs on (pgbench), Redis THP kept vs switched off
(redis-benchmark).

    PYTHONPATH=. .venv/bin/python bench/server_agreement.py [--kind postgres|redis]
        [--scale 100] [--shared-buffers 2GB] [--keyspace 100000] [--data-size 1024]
        [--blocks 10] [--duration-s 8] [--rounds 1] [--seed 31] [--only paired|requests]
        [--out results.json]

For each round, two runs of the same comparison through the real CLI (`hugelab run`, then
`hugelab report --json`), each into its own store:
- "pgbench (paired)": design "paired", every trial its own server and pgbench's own run
  (select-only, -M prepared, 4 clients, 2 threads, --duration-s seconds after a 1 s warm-up);
  the effect is on pgbench's tps;
- "requests (interleaved)": design "interleaved" with window_ops = 200, both arms' servers up
  at once and hugelab-reqmix alternating windows of the same select-only transactions between
  them; the effect is on the windows' rate, and the server's own CPU per transaction is
  reported beside it (the report's "Server CPU per operation").
PostgreSQL: both arms run select-only at --scale with --shared-buffers, each server prewarmed
(pg_prewarm) before its load; "off" is huge_pages off (4 KiB pages), "on" huge_pages on
(2 MiB hugetlb, the pool sized from the server's own need). Redis (--kind redis): GETs and
SETs of --data-size bytes over --keyspace keys with 4 clients, host THP `always`; "thp"
keeps THP (Redis's `disable-thp no`), "4k" runs the server under `hugelab-thp never` (every
page 4 KiB; Redis's own `disable-thp yes` would leave what it faulted before in THP, which
at this size is neither arm's backing); the paired design runs redis-benchmark (its SETs,
then its GETs: at least 3 x --keyspace requests each, so its SETs write about 95% of the keys,
and about --duration-s seconds in all), the interleaved one preloads every key and alternates
windows of GETs and SETs. It prints one Markdown row per run: the effect and its 95%
interval, the server-only effect where there is one, the blocks, the minutes and the median
rate per arm. Root only; it takes the host test lock, so it never runs beside the suite.
The template cluster is built once per scale and cached (minutes at scale 100).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import tempfile
from pathlib import Path
from typing import Any

from cli_runs import run_and_report

LOCK = "/run/lock/hugelab-tests-host.lock"
DESIGNS = {"postgres": ("pgbench (paired)", "requests (interleaved)"),
           "redis": ("redis-benchmark (paired)", "requests (interleaved)")}
REDIS_RATE = 40_000  # requests/s a redis-benchmark test runs at here (for --duration-s)


def workload(kind: str, args: argparse.Namespace) -> tuple[str, str, str]:
    """[workload] lines, [[arms]] tables and the baseline for `kind` (pure)."""
    if kind == "postgres":
        arms = "".join(
            f'\n[[arms]]\nname = "{name}"\nbacking = "{backing}"\n'
            f'app = {{ huge_pages = "{name}", shared_buffers = "{args.shared_buffers}" }}\n'
            for name, backing in (("off", "4k"), ("on", "hugetlb-2M")))
        return (f'kind = "postgres"\nbuiltin = "select-only"\nscale = {args.scale}\n'
                "clients = 4\nthreads = 2\nwarmup_s = 1\n", arms, "off")
    arms = ('\n[[arms]]\nname = "4k"\nbacking = "4k"\nthp = "always"\nprocess_thp = "never"\n'
            '\n[[arms]]\nname = "thp"\nbacking = "thp"\nthp = "always"\n')
    requests = max(int(REDIS_RATE * args.duration_s / 2), 3 * args.keyspace)
    return (f'kind = "redis"\ntests = ["set", "get"]\nclients = 4\nkeyspace = {args.keyspace}\n'
            f"data_size = {args.data_size}\nrequests = {requests}\n", arms, "4k")


def experiment(design: str, args: argparse.Namespace, seed: int) -> str:
    paired = "paired" in design
    lines, arms, baseline = workload(args.kind, args)
    window = "" if paired else "window_ops = 200\n"
    return (f'name = "{args.kind}-agreement"\nseed = {seed}\nblocks = {args.blocks}\n'
            f'design = "{"paired" if paired else "interleaved"}"\nbaseline = "{baseline}"\n\n'
            f"[workload]\n{lines}duration_s = {args.duration_s:g}\n{window}{arms}")


def one_run(design: str, args: argparse.Namespace, seed: int, tmp: Path) -> dict[str, Any]:
    tag = f"{args.kind}-{'paired' if 'paired' in design else 'requests'}"
    exp, store = tmp / f"{tag}-{seed}.toml", tmp / f"{tag}-{seed}.db"
    exp.write_text(experiment(design, args, seed))
    rep, error, minutes = run_and_report(exp, store, [], 7200)
    if rep is None:
        return {"design": design, "seed": seed, "error": error}
    (c,) = rep["comparisons"]
    out: dict[str, Any] = {
        "design": design, "seed": seed, "verdict": c["verdict"],
        "effect_pct": c["effect_pct"], "ci": [c["ci_low_pct"], c["ci_high_pct"]],
        "blocks": rep["blocks"], "minutes": round(minutes, 2),
        "median": {s["name"]: s.get("median") for s in rep["series"]}}
    cpu = (rep.get("server_cpu") or {}).get("entries") or []
    if cpu:
        out["server_cpu_pct"] = cpu[0]["effect_pct"]
        out["server_cpu_ci"] = [cpu[0]["ci_low_pct"], cpu[0]["ci_high_pct"]]
    return out


def as_rate(pct: float) -> float:
    """A change of time (or CPU) per operation as the change of rate it means (pure)."""
    return 100.0 * (1.0 / (1.0 + pct / 100.0) - 1.0)


def row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"| {r['design']} | error: {r['error'][-200:]!r} |"
    cpu = "-"
    if "server_cpu_pct" in r:  # less CPU per transaction as the rate it allows: 1/(1+e) - 1
        mid, lo, hi = (as_rate(r["server_cpu_pct"]), as_rate(r["server_cpu_ci"][1]),
                       as_rate(r["server_cpu_ci"][0]))
        cpu = f"{mid:+.1f}% [{lo:+.1f}, {hi:+.1f}]"
    med = ", ".join(f"{k} {v:,.0f}" for k, v in r["median"].items() if v)
    return (f"| {r['design']} | {r['effect_pct']:+.1f}% [{r['ci'][0]:+.1f}, {r['ci'][1]:+.1f}] "
            f"| {r['verdict']} | {cpu} | {r['blocks']} | {r['minutes']:.1f} | {med} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=tuple(DESIGNS), default="postgres")
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--shared-buffers", default="2GB")
    ap.add_argument("--keyspace", type=int, default=100_000)
    ap.add_argument("--data-size", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--only", choices=("paired", "requests"),
                    help="run one design only (a longer run of the noisier one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results = []
    print("| design | effect on the rate [95% CI] | verdict | server CPU per operation, as a "
          "rate [95% CI] | blocks | minutes | median rate per arm |\n|---|---|---|---|---|---|---|",
          flush=True)
    with open(LOCK, "a+") as lock, tempfile.TemporaryDirectory() as d:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for k in range(args.rounds):
            for design in DESIGNS[args.kind]:
                if args.only and (args.only == "paired") != ("paired" in design):
                    continue
                r = one_run(design, args, args.seed + k, Path(d))
                results.append(r)
                print(row(r), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
