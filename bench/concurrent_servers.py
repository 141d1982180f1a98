"""Would loading every arm's server at once lower PostgreSQL's A/A floor? A diagnosis for
issue 39, outside hugelab's own trial code: the shipped request-level design times windows of
one server after another (18 ms each at scale 5), and on the 2-core AMD EPYC VM a block's pair
of windows differs by ~11% SD, which sets the floor. Here the three servers of a trial run *at
once* on the same CPU, each under its own pgbench, so whatever slows the CPU for a moment slows
all three alike, and an arm's share of the transactions is its speed against the others'.

    .venv/bin/python bench/concurrent_servers.py --trials 30 --seconds 3 [--seed 1] \
        [--out FILE.json]

Per trial: three fresh copies of one scale-5 template (initdb, pgbench -i, made once under
the output's directory), arms `off`, `off-again` (huge_pages = off) and `on` (huge_pages = on
over the 2 MiB pool, grown for the trial by what the servers say they need and put back after),
started in a random order with their postmasters pinned to CPU 0, prewarmed with pg_prewarm,
then three `pgbench -S -M prepared -c 4 -j 1 -T SECONDS` at once pinned to CPU 1; the arm's
value is pgbench's own tps (without connection time), its CPU share the sum of its tree's
/proc/PID/schedstat run time over the load's middle (from 1 s in to 0.5 s before its end). Output: per arm against `off`, the mean and SD over
trials of the log-ratio of tps (percent), and the same for tps per CPU second. It takes the
host test lock (/run/lock/hugelab-tests-host.lock) for its whole run: never wrap it in flock.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

PG = Path("/usr/lib/postgresql/15/bin")
LOCK = Path("/run/lock/hugelab-tests-host.lock")
POOL = Path("/proc/sys/vm/nr_hugepages")
ARMS = (("off", "off"), ("off-again", "off"), ("on", "on"))
CONF = """port = {port}
listen_addresses = ''
unix_socket_directories = '{sock}'
shared_buffers = 128MB
huge_pages = {huge}
shared_preload_libraries = 'pg_prewarm'
"""
PREWARM = ("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT sum(pg_prewarm(c.oid)) "
           "FROM pg_class c WHERE relkind IN ('r', 'i') AND relnamespace = 'public'::regnamespace")


def as_pg(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                          capture_output=True, text=True, **kw)  # type: ignore[call-overload]


def template(root: Path) -> Path:
    t = root / "template"
    if not (t / "PG_VERSION").exists():
        as_pg(str(PG / "initdb"), "-D", str(t), "-A", "trust")
        (t / "postgresql.conf").write_text(CONF.format(port=55440, sock=root, huge="off"))
        as_pg(str(PG / "pg_ctl"), "-D", str(t), "-l", str(root / "t.log"), "-w", "start")
        try:
            as_pg(str(PG / "pgbench"), "-i", "-s", "5", "-h", str(root), "-p", "55440",
                  "postgres")
        finally:
            as_pg(str(PG / "pg_ctl"), "-D", str(t), "-m", "fast", "-w", "stop")
    return t


def tree(pid: int) -> list[int]:
    out = [pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p))
    return out


def cpu_ns(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/schedstat").read_text().split()[0])
        except OSError:
            pass
    return total


def one_trial(root: Path, tmpl: Path, seconds: int, rng: random.Random) -> dict[str, dict]:
    order = list(range(len(ARMS)))
    rng.shuffle(order)
    dirs = {}
    for i in order:
        _name, huge = ARMS[i]
        d = root / f"s{i}"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(tmpl, d, symlinks=True)
        (d / "postgresql.conf").write_text(CONF.format(port=55441 + i, sock=root, huge=huge))
        subprocess.run(["chown", "-R", "postgres:", str(d)], check=True)
        dirs[i] = d
    pids = {}
    try:
        for i in order:
            subprocess.run(["taskset", "-c", "0", "runuser", "-u", "postgres", "--",
                            str(PG / "pg_ctl"), "-D", str(dirs[i]), "-l",
                            str(dirs[i] / "log"), "-w", "start"], check=True,
                           capture_output=True)
            pids[i] = int((dirs[i] / "postmaster.pid").read_text().split()[0])
        warm = [subprocess.Popen(["runuser", "-u", "postgres", "--", str(PG / "psql"), "-h",
                                  str(root), "-p", str(55441 + i), "-qAtc", PREWARM,
                                  "postgres"], stdout=subprocess.DEVNULL) for i in order]
        if any(w.wait() for w in warm):
            raise SystemExit("pg_prewarm failed")
        load = {i: subprocess.Popen(["taskset", "-c", "1", "runuser", "-u", "postgres", "--",
                                     str(PG / "pgbench"), "-n", "-S", "-M", "prepared", "-c",
                                     "4", "-j", "1", "-T", str(seconds), "-h", str(root), "-p",
                                     str(55441 + i), "postgres"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in order}
        time.sleep(1.0)  # every backend connected: count their CPU over the middle
        trees = {i: tree(pids[i]) for i in order}
        c0, t0 = {i: cpu_ns(trees[i]) for i in order}, time.monotonic()
        time.sleep(max(seconds - 1.5, 0.5))
        c1, wall = {i: cpu_ns(trees[i]) for i in order}, time.monotonic() - t0
        outs = {i: p.communicate() for i, p in load.items()}
        out = {}
        for i in order:
            m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", outs[i][0])
            if load[i].returncode or m is None:
                raise SystemExit(f"pgbench failed: {outs[i][1][-300:]}")
            out[ARMS[i][0]] = {"tps": float(m.group(1)), "cpu_share": (c1[i] - c0[i]) / 1e9 / wall, "slot": order.index(i)}
        return out
    finally:
        for i in order:
            subprocess.run(["runuser", "-u", "postgres", "--", str(PG / "pg_ctl"), "-D",
                            str(dirs[i]), "-m", "immediate", "-w", "stop"],
                           capture_output=True)
            shutil.rmtree(dirs[i], ignore_errors=True)


def summary(trials: list[dict[str, dict]]) -> dict[str, dict[str, float]]:
    out = {}
    for arm, _h in ARMS[1:]:
        for key, f in (("tps", lambda r: r["tps"]),
                       ("tps_per_cpu", lambda r: r["tps"] / max(r["cpu_share"], 1e-9))):
            x = [100 * math.log(f(t[arm]) / f(t["off"])) for t in trials]
            out[f"{arm} {key}"] = {"n": len(x), "mean_pct": round(statistics.fmean(x), 3),
                                   "sd_pct": round(statistics.stdev(x), 3)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="hugelab-conc-"))
    shutil.chown(root, "postgres")
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = POOL.read_text()
        try:
            tmpl = template(root)
            POOL.write_text(str(int(before) + 80))
            trials, t0 = [], time.monotonic()
            for k in range(args.trials):
                trials.append(one_trial(root, tmpl, args.seconds, rng))
                r = trials[-1]
                print(f"trial {k}: " + ", ".join(
                    f"{a} {r[a]['tps']:.0f} tps cpu {r[a]['cpu_share']:.3f}"
                    for a, _h in ARMS), flush=True)
            minutes = (time.monotonic() - t0) / 60
        finally:
            POOL.write_text(before)
            shutil.rmtree(root, ignore_errors=True)
    result = {"trials": trials, "minutes": round(minutes, 2), "summary": summary(trials),
              "seconds": args.seconds, "seed": args.seed}
    print(json.dumps(result["summary"], indent=1), f"\n{len(trials)} trials in "
          f"{minutes:.2f} min")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
