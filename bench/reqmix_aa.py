"""A/A noise of request-level interleaving against today's whole-run windows, same session.

    PYTHONPATH=. .venv/bin/python bench/reqmix_aa.py --kind redis|memcached|pg [--run-blocks 6]
        [--run-window-s 1.5] [--req-seconds 20] [--window-ops 20,200] [--clients 1,4]
        [--seed 1]

Two identical servers of KIND (redis, memcached, or pg: PostgreSQL 15 at scale 1,
huge_pages = off, select-only) are started, both pinned to the last CPU,
and hugelab-reqmix (pinned to CPU 0) alternates windows between them in ABBA blocks:
- "runs": windows of --run-window-s seconds each, as today's interleaved design alternates
  whole redis-benchmark / memcslap runs of 1-2 s (simulated with the same client, so the
  designs differ only in the window's length);
- "redis-benchmark" / "pgbench" (Redis, PostgreSQL): today's design itself, ABBA blocks of
  real `redis-benchmark -t get -c 1` or `pgbench -S -M prepared -c 1` runs sized to
  --run-window-s each, by their own requests/s or tps;
- "ops=N": request-level windows of N operations per window, for each N of --window-ops.
For each design it prints the per-block SD of the log-ratio (B over A: the noise one block
adds to a trial's estimate), a robust SD (1.4826 x MAD, which a few preempted windows do not
inflate), the SE a trial of one minute would have (block SD x sqrt(block seconds / 60): the
designs at equal cost), the trial's A/A estimate with its 95% interval, the blocks run, and
the client's CPU share of the windows (client CPU ns over window wall ns). It takes the host
lock, so it waits behind hugelab runs and host tests, and stops its servers at the end.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.stats.windows import block_log_ratios, window_effect
from hugelab.workloads.reqmix import (
    ReqmixSettings,
    memcached_server,
    parse_output,
    pg_server,
    redis_server,
    reqmix_argv,
)
from hugelab.workloads.reqmix_build import ensure_reqmix
from tests import reqmix_servers as rs

HOST_LOCK = "/run/lock/hugelab-tests-host.lock"


def _design(binary: str, servers: tuple[str, ...], label: str, client_cpu: int,
            **kw: Any) -> dict[str, Any]:
    settings = ReqmixSettings(servers=servers, keyspace=10000, value_size=100,
                              set_ratio=0.1, **kw)
    argv = reqmix_argv(binary, settings)
    cp = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600,
                        preexec_fn=lambda: os.sched_setaffinity(0, {client_cpu}))
    r = parse_output(cp.stdout)
    arms, blocks, ops, ns = r.columns()
    row = _row(label, arms, blocks, ops, ns)
    row.update(client_cpu_share=round(r.client_cpu_share(), 4), argv=" ".join(argv[1:]))
    return row


def _row(label: str, arms: list[int], blocks: list[int], ops: list[int], ns: list[int]
         ) -> dict[str, Any]:
    e = window_effect(arms, blocks, ops, ns, arm=1)
    pct, lo, hi = e.percent
    d = block_log_ratios(arms, blocks, ops, ns, arm=1)
    robust = 1.4826 * float(np.median(np.abs(d - np.median(d))))
    block_s = sum(ns) / 1e9 / e.n_blocks
    return {"design": label, "blocks": e.n_blocks, "block_sd_pct": round(100 * e.block_sd, 3),
            "robust_sd_pct": round(100 * robust, 3),
            "se_1min_pct": round(100 * e.block_sd * (block_s / 60) ** 0.5, 3),
            "aa_pct": round(pct, 3), "aa_lo_pct": round(lo, 3), "aa_hi_pct": round(hi, 3),
            "client_cpu_share": float("nan"),
            "mean_window_ms": round(sum(ns) / len(ns) / 1e6, 3),
            "ops_per_s": round(sum(ops) / (sum(ns) / 1e9))}


def _tool_argv(kind: str, target: Any, n: int) -> list[str]:
    """Today's client for one window of n ops: redis-benchmark GETs, or pgbench -S."""
    if kind == "redis":
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(target), "-t", "get", "-n",
                str(n), "-c", "1", "-r", "10000", "-d", "100", "-q", "--csv"]
    top, port = target
    return [str(rs.PG_BIN / "pgbench"), "-h", str(top), "-p", str(port), "-U", "postgres",
            "-n", "-S", "-M", "prepared", "-c", "1", "-t", str(n), "bench"]


def _tool_window(kind: str, target: Any, n: int, client_cpu: int) -> int:
    """One run of today's client: its wall ns by its own rate (requests/s or tps)."""
    out = subprocess.run(_tool_argv(kind, target, n), capture_output=True, text=True,
                         check=True, timeout=120,
                         preexec_fn=lambda: os.sched_setaffinity(0, {client_cpu})).stdout
    if kind == "redis":
        rate = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    else:
        m = re.search(r"tps = ([0-9.]+) \(without initial", out)
        assert m, out
        rate = float(m.group(1))
    return int(n / rate * 1e9)


def tool_design(kind: str, targets: list[Any], blocks: int, window_s: float,
                client_cpu: int, seed: int) -> dict[str, Any]:
    """Today's design: ABBA blocks of whole client runs of about window_s each."""
    t0 = time.monotonic()
    n = max(1000, int(5000 * window_s * 1e9 / _tool_window(kind, targets[0], 5000, client_cpu)))
    rng = random.Random(seed)
    arms, blks, ops, ns = [], [], [], []
    for b in range(blocks):
        first = rng.randrange(2)
        for arm in (first, 1 - first, 1 - first, first):
            arms.append(arm)
            blks.append(b)
            ops.append(n)
            ns.append(_tool_window(kind, targets[arm], n, client_cpu))
    row = _row(Path(_tool_argv(kind, targets[0], n)[0]).name, arms, blks, ops, ns)
    row.update(argv=" ".join(_tool_argv(kind, targets[0], n)),
               wall_s=round(time.monotonic() - t0, 1))
    return row


def _start(kind: str, stack: ExitStack, cpu: int) -> tuple[tuple[str, ...], list[Any]]:
    """Two identical servers of `kind` pinned to `cpu`: their --server values and the
    targets today's client takes (a port, or (socket dir, port))."""
    if kind == "pg":
        clusters = [stack.enter_context(rs.pg_cluster(scale=1, cpus={cpu})) for _ in (0, 1)]
        return tuple(pg_server({"host": str(top), "port": port, "dbname": "bench",
                                "user": "postgres"}) for top, port in clusters), clusters
    ports = [rs.free_port(), rs.free_port()]
    argv_of = rs.redis_argv if kind == "redis" else rs.memcached_argv
    spec = redis_server if kind == "redis" else memcached_server
    for p in ports:
        stack.enter_context(rs.server(argv_of(p), p, cpus={cpu}))
    return tuple(spec("127.0.0.1", p) for p in ports), ports


def _print(kind: str, rows: list[dict[str, Any]], client_cpu: int, server_cpu: int) -> None:
    print(f"# {kind} A/A, client on CPU {client_cpu}, both servers on CPU {server_cpu}, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'design':<18}{'blocks':>7}{'block SD %':>11}{'robust %':>9}{'SE 1 min %':>11}"
          f"{'A/A % [95%]':>26}{'client CPU':>11}{'window ms':>10}{'ops/s':>8}")
    for r in rows:
        ci = f"{r['aa_pct']:+.2f} [{r['aa_lo_pct']:+.2f}, {r['aa_hi_pct']:+.2f}]"
        print(f"{r['design']:<18}{r['blocks']:>7}{r['block_sd_pct']:>11.2f}"
              f"{r['robust_sd_pct']:>9.2f}{r['se_1min_pct']:>11.2f}{ci:>26}"
              f"{100 * r['client_cpu_share']:>10.1f}%{r['mean_window_ms']:>10.2f}"
              f"{r['ops_per_s']:>8}")
    for r in rows:
        print(json.dumps(r), file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("redis", "memcached", "pg"), default="redis")
    ap.add_argument("--run-blocks", type=int, default=6)
    ap.add_argument("--run-window-s", type=float, default=1.5)
    ap.add_argument("--req-seconds", type=float, default=20.0)
    ap.add_argument("--window-ops", default="20,200")
    ap.add_argument("--warm-ops", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clients", default="1",
                    help="comma-separated connections per server, each a request-level row")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = cpus[0], cpus[-1]
    binary = str(ensure_reqmix())
    kw: dict[str, Any] = {"pg_builtin": "select-only"} if args.kind == "pg" else {}
    fd = os.open(HOST_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    rows = []
    with ExitStack() as stack:
        servers, targets = _start(args.kind, stack, server_cpu)
        if args.kind != "pg":
            _design(binary, servers, "preload", client_cpu, windows=8, duration_s=None,
                    preload=True, seed=args.seed)
        if args.kind != "memcached":
            rows.append(tool_design(args.kind, targets, args.run_blocks, args.run_window_s,
                                    client_cpu, args.seed))
        rows.append(_design(binary, servers, f"runs={args.run_window_s}s", client_cpu,
                            window_ops=None, window_ms=int(args.run_window_s * 1000),
                            windows=4 * args.run_blocks, duration_s=None, seed=args.seed, **kw))
        for k in (int(x) for x in args.clients.split(",")):
            for n in (int(x) for x in args.window_ops.split(",")):
                label = f"ops={n}" if k == 1 else f"ops={n} c={k}"
                rows.append(_design(binary, servers, label, client_cpu, window_ops=n,
                                    warm_ops=args.warm_ops, duration_s=args.req_seconds,
                                    seed=args.seed, clients=k, **kw))
    os.close(fd)
    _print(args.kind, rows, client_cpu, server_cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
