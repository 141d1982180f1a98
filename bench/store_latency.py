"""Store write latency per trial: SQLite (WAL, one file) against PostgreSQL (a real server on
127.0.0.1 over TLS, from tests/pg_server.py), through the store's own `add_trial`, which
commits every trial on its own as `hugelab run` does. Also the time to open a store (connect
and check migrations), which every `hugelab run` pays once.

Trials carry evidence, monitors and provenance of the size a hugelab-mem trial writes (~3 KB).

Run as root (the PostgreSQL cluster belongs to the postgres user):
    .venv/bin/python bench/store_latency.py [--trials 500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hugelab.store import SqlStore, Trial  # noqa: E402
from hugelab.store.locate import open_store  # noqa: E402
from tests.pg_server import running_server  # noqa: E402

EVIDENCE = {"KernelPageSize_kB": 4, "AnonHugePages_kB": 65536, "Rss_kB": 65536,
            "folios": {"available": True, "folios_kb": {"2M": 65536}, "present_kb": 65536},
            "tree": {"samples": 12, "pids": list(range(40))}, "reason": "x" * 300}
MONITORS = {"vmstat": {f"counter_{i}": i * 1000 for i in range(60)}}
PROVENANCE = {"hugelab": "0.1.0", "kernel": "6.18", "accel": "native", "note": "y" * 400}


def trials(store: SqlStore, n: int) -> list[float]:
    run_id, _ = store.get_or_create_run(f"bench-{time.time_ns()}", "bench", {}, {}, "h")
    out = []
    for i in range(n):
        t = Trial(run_id, i // 2, i % 2, "thp" if i % 2 else "4k", "ok", 100.0 + i, "ns",
                  "ns", "lower", {"ns_per_access": 100.0}, EVIDENCE, MONITORS, PROVENANCE)
        t0 = time.perf_counter()
        store.add_trial(t)
        out.append(time.perf_counter() - t0)
    return out


def opens(spec: str, n: int = 20) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        open_store(spec).close()
        out.append(time.perf_counter() - t0)
    return out


def line(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[int(0.95 * (len(xs) - 1))]
    return (f"| {name} | {len(xs)} | {1000 * statistics.median(xs):.2f} | {1000 * p95:.2f} | "
            f"{1000 * max(xs):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        lite = str(Path(d) / "s.db")
        with open_store(lite) as st:
            rows.append(line("SQLite: add_trial (commit)", trials(st, args.trials)))
        rows.append(line("SQLite: open store", opens(lite)))
    with running_server(fsync=True) as server:  # durable commits, like SQLite's WAL
        os.environ["PGPASSWORD"] = server.password
        url = server.new_database()
        with open_store(url) as st:
            tls = getattr(st, "tls", False)
            rows.append(line(f"PostgreSQL{' (TLS)' if tls else ''}: add_trial (commit)",
                             trials(st, args.trials)))
        rows.append(line("PostgreSQL: open store (connect, migrations)", opens(url)))
    print("| what | n | median ms | p95 ms | max ms |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
