"""Real A/A runs of request-level interleaved servers: does one ever decide faster or slower?

    PYTHONPATH=. .venv/bin/python bench/requests_aa_runs.py [--kinds postgres,redis,memcached]
        [--runs 10] [--blocks 8] [--duration-s 3] [--window-ops 200] [--out results.json]
        [--until-verdict [--alpha 0.01] [--looks 2]]

For each kind, --runs runs of an experiment with two identical arms ("a" and its twin "b",
design "interleaved" with window_ops: every trial starts both servers, one hugelab-reqmix
client alternates windows of requests between them), each with its own seed, through the real
CLI (`hugelab run`, then `hugelab report --json`). It prints, per kind, how many runs decided
`equivalent`, `inconclusive`, `faster` or `slower` at the default margin (1%) and alpha
(0.05), the effects and intervals, and the minutes each run took. A design whose A/A runs decide
`faster` or `slower` more than alpha allows has a false-positive problem. It waits for the host
test lock, so it never runs beside the suite.

With --until-verdict each run is the command a user runs for a verdict, `hugelab run
--until-verdict --alpha A --margin 0.01 --max-blocks BLOCKS --looks L`, and the run's own
sequential decision for the twin is what counts (`sequential`), beside the report's.
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
WORKLOADS = {
    "postgres": 'kind = "postgres"\nbuiltin = "select-only"\nscale = 5\nclients = 4\n'
                'warmup_s = 0\n',
    "redis": 'kind = "redis"\ntests = ["get", "set"]\nclients = 4\nkeyspace = 100000\n'
             'data_size = 64\n',
    "memcached": 'kind = "memcached"\nmemory_mb = 64\nconcurrency = 4\nkeyspace = 50000\n'
                 'value_size = 512\n',
}
APP = {"postgres": 'app = { huge_pages = "off", shared_buffers = "128MB" }\n'}


def experiment(kind: str, seed: int, blocks: int, duration_s: float, window_ops: int) -> str:
    arms = "".join(f'\n[[arms]]\nname = "{n}"\nbacking = "4k"\n{APP.get(kind, "")}'
                   for n in ("a", "b"))
    return (f'name = "aa-{kind}"\nseed = {seed}\nblocks = {blocks}\ndesign = "interleaved"\n'
            f'baseline = "a"\n\n[workload]\n{WORKLOADS[kind]}duration_s = {duration_s:g}\n'
            f"window_ops = {window_ops}\n{arms}")


def one_run(kind: str, seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    exp, store = tmp / f"{kind}-{seed}.toml", tmp / f"{kind}-{seed}.db"
    exp.write_text(experiment(kind, seed, args.blocks, args.duration_s, args.window_ops))
    seq = (["--until-verdict", "--alpha", str(args.alpha), "--margin", "0.01", "--max-blocks",
            str(args.blocks), "--looks", str(args.looks)] if args.until_verdict else [])
    rep, error, minutes = run_and_report(exp, store, seq, 3600)
    if rep is None:
        return {"kind": kind, "seed": seed, "error": error}
    (c,) = rep["comparisons"]
    out = {"kind": kind, "seed": seed, "verdict": c["verdict"], "effect_pct": c["effect_pct"],
           "ci": [c["ci_low_pct"], c["ci_high_pct"]], "blocks": rep["blocks"],
           "minutes": round(minutes, 2)}
    if args.until_verdict:
        last = rep["run"]["sequential"]["looks"][-1]
        out.update(sequential=last["decisions"]["b"]["decision"], look=last["look"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="postgres,redis,memcached")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=3.0)
    ap.add_argument("--window-ops", type=int, default=200)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--until-verdict", action="store_true",
                    help="each run stops at its own sequential verdict (see above)")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--looks", type=int, default=2)
    args = ap.parse_args()
    results = []
    with open(LOCK, "a+") as lock, tempfile.TemporaryDirectory() as d:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for kind in args.kinds.split(","):
            for seed in range(1, args.runs + 1):
                r = one_run(kind, seed, args, Path(d))
                results.append(r)
                print(json.dumps(r), flush=True)
    for kind in args.kinds.split(","):
        rs = [r for r in results if r["kind"] == kind]
        key = "sequential" if args.until_verdict else "verdict"
        verdicts = [r.get(key, "error") for r in rs]
        print(f"{kind}: " + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
              + f"; minutes per run {sorted(r.get('minutes', 0) for r in rs)}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    key = "sequential" if args.until_verdict else "verdict"
    bad = any(r.get(key) in ("faster", "slower") or "error" in r for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
