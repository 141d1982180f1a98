"""Does a different client setting quiet PostgreSQL's request windows? A diagnosis for issue 39:
three `huge_pages = off` servers of one scale-5 template, started once and pinned to CPU 0
(filled at once, as hugelab fills them), then hugelab-reqmix on CPU 1 for `--seconds` per
setting, each setting `--reps` times in a seeded random order against the same servers.

    .venv/bin/python bench/reqmix_settings.py --specs 4o200w5,4m18w5,2o200w5 \
        [--seconds 6] [--reps 4] [--seed 5] [--out FILE.json]

A spec is CLIENTS, then `o` (windows of N transactions per client) or `m` (windows of N ms),
then `w` and the untimed transactions at each window's start: `4o200w5` is the shipped
example's (clients = 4, window_ops = 200, warm_ops = 5). Per run: the client's blocks, the SD
of a block's log-ratio of server 2 against server 1 (`block_sd`), its batch-means SE scaled to
one second of load, and the A/A estimate; the same servers throughout, so the spread of one
spec's estimates over its repeats is its noise at that length, with no instance part. It takes
the host test lock for its whole run: never wrap it in flock.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import random
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from concurrent_servers import CONF, LOCK, PG, PREWARM, template

from hugelab.workloads.reqmix import ReqmixSettings, effects, parse_output, pg_server, reqmix_argv
from hugelab.workloads.reqmix_build import ensure_reqmix

SPEC = re.compile(r"(\d+)([om])(\d+)w(\d+)")


def settings(spec: str, servers: tuple[str, ...], seconds: float, seed: int) -> ReqmixSettings:
    m = SPEC.fullmatch(spec)
    if m is None:
        raise SystemExit(f"--specs: {spec!r} is not CLIENTS(o|m)SIZEwWARM, e.g. 4o200w5")
    clients, kind, size, warm = int(m[1]), m[2], int(m[3]), int(m[4])
    return ReqmixSettings(servers=servers, clients=clients,
                          window_ops=size if kind == "o" else None,
                          window_ms=size if kind == "m" else None, warm_ops=warm,
                          duration_s=seconds, seed=seed, pg_scale=5, pg_builtin="select-only")


def servers_up(root: Path, tmpl: Path) -> list[Path]:
    dirs = []
    for i in range(3):
        d = root / f"r{i}"
        shutil.copytree(tmpl, d, symlinks=True)
        (d / "postgresql.conf").write_text(CONF.format(port=55451 + i, sock=root, huge="off"))
        subprocess.run(["chown", "-R", "postgres:", str(d)], check=True)
        subprocess.run(["taskset", "-c", "0", "runuser", "-u", "postgres", "--",
                        str(PG / "pg_ctl"), "-D", str(d), "-l", str(d / "log"), "-w", "start"],
                       check=True, capture_output=True)
        dirs.append(d)
    warm = [subprocess.Popen(["runuser", "-u", "postgres", "--", str(PG / "psql"), "-h",
                              str(root), "-p", str(55451 + i), "-qAtc", PREWARM, "postgres"],
                             stdout=subprocess.DEVNULL) for i in range(3)]
    if any(w.wait() for w in warm):
        raise SystemExit("pg_prewarm failed")
    return dirs


def one(spec: str, servers: tuple[str, ...], seconds: float, seed: int) -> dict[str, float]:
    st = settings(spec, servers, seconds, seed)
    cp = subprocess.run(["taskset", "-c", "1", *reqmix_argv(ensure_reqmix(), st)],
                        capture_output=True, text=True, check=True)
    e = effects(parse_output(cp.stdout), 0)[1]
    return {"blocks": e.n_blocks, "block_sd_pct": 100 * e.block_sd,
            "se_1s_pct": 100 * e.se * math.sqrt(seconds), "aa_pct": 100 * e.log_ratio}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", required=True)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    specs = args.specs.split(",")
    for s in specs:
        settings(s, ("x",), 1.0, 1)  # a bad spec fails before anything starts
    rng = random.Random(args.seed)
    order = [s for s in specs for _ in range(args.reps)]
    rng.shuffle(order)
    root = Path(tempfile.mkdtemp(prefix="hugelab-reqset-"))
    shutil.chown(root, "postgres")
    rows: list[dict[str, object]] = []
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dirs: list[Path] = []
        try:
            dirs = servers_up(root, template(root))
            servers = tuple(pg_server({"host": str(root), "port": 55451 + i, "user": "postgres",
                                       "dbname": "postgres"}) for i in range(3))
            for spec in order:
                rows.append({"spec": spec, **one(spec, servers, args.seconds,
                                                 rng.randrange(1 << 30))})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            for d in dirs:
                subprocess.run(["runuser", "-u", "postgres", "--", str(PG / "pg_ctl"), "-D",
                                str(d), "-m", "fast", "-w", "stop"], capture_output=True)
            shutil.rmtree(root, ignore_errors=True)
    for spec in specs:
        mine = [r for r in rows if r["spec"] == spec]
        aa = [float(r["aa_pct"]) for r in mine]  # type: ignore[arg-type]
        mean, sd = statistics.fmean(aa), statistics.stdev(aa) if len(aa) > 1 else 0.0
        med = statistics.median(float(r["block_sd_pct"]) for r in mine)  # type: ignore[arg-type]
        print(f"{spec}: {len(mine)} runs, block SD median {med:.1f}%, A/A {mean:+.2f}% "
              f"(SD over repeats {sd:.2f})")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
