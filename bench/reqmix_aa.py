"""A/A noise of request-level interleaving against today's whole-run windows, same session.

    PYTHONPATH=. .venv/bin/python bench/reqmix_aa.py --kind redis [--run-blocks 6]
        [--run-window-s 1.5] [--req-seconds 20] [--window-ops 20,200] [--seed 1]

Two identical servers of KIND (redis or memcached) are started, both pinned to the last CPU,
and hugelab-reqmix (pinned to CPU 0) alternates windows between them in ABBA blocks:
- "runs": windows of --run-window-s seconds each, as today's interleaved design alternates
  whole redis-benchmark / memcslap runs of 1-2 s (simulated with the same client, so the
  designs differ only in the window's length);
- "ops=N": request-level windows of N operations per window, for each N of --window-ops.
For each design it prints the per-block SD of the log-ratio (B over A: the noise one block
adds to a trial's estimate), the trial's A/A estimate with its 95% interval, the blocks run,
and the client's CPU share of the windows (client CPU ns over window wall ns). It takes the
host lock, so it waits behind hugelab runs and host tests, and stops its servers at the end.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from typing import Any

from hugelab.workloads.reqmix import (
    ReqmixSettings,
    effects,
    memcached_server,
    parse_output,
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
    e = effects(r)[1]
    pct, lo, hi = e.percent
    ops = sum(w.ops for w in r.windows)
    return {"design": label, "blocks": e.n_blocks, "block_sd_pct": round(100 * e.block_sd, 3),
            "aa_pct": round(pct, 3), "aa_lo_pct": round(lo, 3), "aa_hi_pct": round(hi, 3),
            "client_cpu_share": round(r.client_cpu_share(), 4),
            "mean_window_ms": round(sum(w.ns for w in r.windows) / len(r.windows) / 1e6, 3),
            "ops_per_s": round(ops / (sum(w.ns for w in r.windows) / 1e9)),
            "argv": " ".join(argv[1:])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("redis", "memcached"), default="redis")
    ap.add_argument("--run-blocks", type=int, default=6)
    ap.add_argument("--run-window-s", type=float, default=1.5)
    ap.add_argument("--req-seconds", type=float, default=20.0)
    ap.add_argument("--window-ops", default="20,200")
    ap.add_argument("--warm-ops", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = cpus[0], cpus[-1]
    binary = str(ensure_reqmix())
    ports = [rs.free_port(), rs.free_port()]
    argv_of = rs.redis_argv if args.kind == "redis" else rs.memcached_argv
    spec = redis_server if args.kind == "redis" else memcached_server
    fd = os.open(HOST_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    rows = []
    with ExitStack() as stack:
        for p in ports:
            stack.enter_context(rs.server(argv_of(p), p, cpus={server_cpu}))
        servers = tuple(spec("127.0.0.1", p) for p in ports)
        _design(binary, servers, "preload", client_cpu, windows=8, duration_s=None,
                preload=True, seed=args.seed)
        rows.append(_design(binary, servers, f"runs={args.run_window_s}s", client_cpu,
                            window_ops=None, window_ms=int(args.run_window_s * 1000),
                            windows=4 * args.run_blocks, duration_s=None, seed=args.seed))
        for n in (int(x) for x in args.window_ops.split(",")):
            rows.append(_design(binary, servers, f"ops={n}", client_cpu, window_ops=n,
                                warm_ops=args.warm_ops, duration_s=args.req_seconds,
                                seed=args.seed))
    os.close(fd)
    print(f"# {args.kind} A/A, client on CPU {client_cpu}, both servers on CPU {server_cpu}, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'design':<12}{'blocks':>7}{'block SD %':>12}{'A/A % [95%]':>26}"
          f"{'client CPU':>12}{'window ms':>11}{'ops/s':>9}")
    for r in rows:
        ci = f"{r['aa_pct']:+.2f} [{r['aa_lo_pct']:+.2f}, {r['aa_hi_pct']:+.2f}]"
        print(f"{r['design']:<12}{r['blocks']:>7}{r['block_sd_pct']:>12.2f}{ci:>26}"
              f"{100 * r['client_cpu_share']:>11.1f}%{r['mean_window_ms']:>11.2f}"
              f"{r['ops_per_s']:>9}")
    for r in rows:
        print(json.dumps(r), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
