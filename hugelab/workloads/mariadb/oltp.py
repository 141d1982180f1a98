"""sysbench's OLTP Lua scripts against one server: argv (pure) and output parsing (pure).
Latency percentiles come from sysbench's own histogram (--histogram), tps from its summary."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.mariadb.datadir import DATABASE
from hugelab.workloads.serverside import LOOPBACK
from hugelab.workloads.toolrun import tail

SCRIPTS = ("oltp_read_only", "oltp_point_select", "oltp_read_write", "oltp_write_only",
           "select_random_points", "select_random_ranges")
SCRIPT_DIR = Path("/usr/share/sysbench")
USER = "sbtest"
PERCENTILES = (50.0, 95.0, 99.0)


def connection(port: int, database: str = DATABASE) -> list[str]:
    return ["--db-driver=mysql", f"--mysql-host={LOOPBACK}", f"--mysql-port={port}",
            f"--mysql-user={USER}", f"--mysql-db={database}"]


def script_path(script: str) -> str:
    return str(SCRIPT_DIR / f"{script}.lua") if script in SCRIPTS else script


def argv(script: str, port: int, tables: int, table_size: int, threads: int,
         seconds: float, step: str = "run", database: str = DATABASE) -> list[str]:
    """`sysbench SCRIPT ... run` for `seconds` (or `prepare`) against `database`; sysbench 1.0
    has no warm-up option, so a warm-up is a run of its own whose output is not kept."""
    out = ["sysbench", script_path(script), *connection(port, database), f"--tables={tables}",
           f"--table-size={table_size}", f"--threads={threads}"]
    if step == "run":
        out += [f"--time={max(1, int(seconds))}", "--histogram=on", "--report-interval=0",
                "--events=0"]
    return out + [step]


def _number(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def histogram(text: str) -> list[tuple[float, int]]:
    """(latency ms, count) rows of sysbench's --histogram output."""
    rows = re.findall(r"^\s*([0-9.]+)\s+\|\**\s+(\d+)\s*$", text, re.MULTILINE)
    return [(float(v), int(c)) for v, c in rows]


def latencies_ms(text: str) -> np.ndarray:
    """Every transaction's latency in ms from sysbench's --histogram output: each bucket's
    value, as often as it counted (empty without a histogram)."""
    rows = histogram(text)
    return np.repeat([v for v, _ in rows], [c for _, c in rows]) if rows else np.empty(0)


def percentile(rows: list[tuple[float, int]], p: float) -> float | None:
    total = sum(c for _, c in rows)
    if not total:
        return None
    seen = 0
    for value, count in rows:
        seen += count
        if seen * 100.0 >= p * total:
            return value
    return rows[-1][0]


def parse(stdout: str) -> dict[str, Any]:
    """tps, qps and latency (avg, p50, p95, p99 in ms) of one `sysbench ... run` (pure)."""
    tps = _number(r"transactions:\s+\d+\s+\(([0-9.]+) per sec", stdout)
    if tps is None or tps <= 0:
        raise WorkloadError("sysbench printed no transactions per second\n  "
                            + (tail(stdout, 8) or "(no output)").replace("\n", "\n  "))
    metrics = {"tps": tps}
    for name, pattern in (("qps", r"queries:\s+\d+\s+\(([0-9.]+) per sec"),
                          ("latency_avg_ms", r"avg:\s+([0-9.]+)"),
                          ("errors_per_s", r"errors:\s+\d+\s+\(([0-9.]+) per sec")):
        if (v := _number(pattern, stdout)) is not None:
            metrics[name] = v
    rows = histogram(stdout)
    for p in PERCENTILES:
        if (v := percentile(rows, p)) is not None:
            metrics[f"p{p:g}_ms".replace(".", "_")] = v
    return metrics
