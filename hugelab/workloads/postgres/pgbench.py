"""pgbench as the load: its argv, and its results from its own output and per-transaction log.

`pgbench -n -b select-only -c C -j J -T S -M prepared -l --log-prefix P`: TPS from its summary
line, per-transaction latencies (µs, the third column of each log line) from the log files it
writes, one per thread (`P.<pid>` and `P.<pid>.<n>`), summarised as p50..p99.9 in ms."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.base import Target
from hugelab.workloads.interleave import geomean
from hugelab.workloads.postgres.server import PORT
from hugelab.workloads.toolrun import check_exit

BUILTINS = ("select-only", "tpcb-like", "simple-update")
PERCENTILES = {"p50_ms": 50.0, "p90_ms": 90.0, "p95_ms": 95.0, "p99_ms": 99.0,
               "p99_9_ms": 99.9}
# a percentile is reported only with enough transactions beyond it to mean something
MIN_TAIL_COUNT = 10
_TPS = re.compile(r"^tps = ([0-9.]+) \((?:without|excluding) initial connection",
                  re.MULTILINE)
_TPS_ANY = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
_LAT = re.compile(r"^latency average = ([0-9.]+) ms", re.MULTILINE)
_TX = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)


# what a pgbench script's statements start with (a line may continue the one before it)
_SQL_START = re.compile(
    r"^\s*(select|insert|update|delete|merge|with|values|table|begin|start|end|commit|rollback|"
    r"abort|savepoint|release|set|reset|show|prepare|execute|deallocate|call|do|copy|lock|"
    r"create|drop|alter|truncate|vacuum|analyze|analyse|explain|refresh|reindex|cluster|"
    r"checkpoint|discard|notify|listen|unlisten|declare|fetch|move|close|grant|revoke|"
    r"comment|load|\\[a-z]+)\b", re.IGNORECASE | re.MULTILINE)
MAX_SCRIPT_BYTES = 1 << 20


def script_problem(path: str) -> str | None:
    """Why `path` is not a pgbench script (pgbench -f), or None: a readable text file with at
    least one SQL statement or meta-command (`\\set`) - checked before any trial, so a wrong
    path (/etc/hostname) is refused at once, not by every trial's pgbench."""
    p = Path(path)
    if not p.is_file():
        return "is not a file"
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if len(raw) > MAX_SCRIPT_BYTES:
        return f"is over {MAX_SCRIPT_BYTES >> 20} MiB: not a pgbench script"
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return "is not text (UTF-8)"
    if not _SQL_START.search(text):
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        return (f"has no SQL statement (its first line: {first[:60]!r})" if first
                else "is empty")
    return None


def argv(pgbench: Path, socket_dir: Path, port: int, *, builtin: str, script: str | None,
         clients: int, threads: int, seconds: float | None, transactions: int | None,
         log_prefix: Path | None) -> list[str]:
    """One pgbench run against the private socket as the postgres user (pure)."""
    out = [str(pgbench), "-h", str(socket_dir), "-p", str(port), "-U", "postgres", "-n",
           "-c", str(clients), "-j", str(threads), "-M", "prepared"]
    out += ["-f", script] if script else ["-b", builtin]
    if transactions is not None:
        out += ["-t", str(transactions)]
    else:
        out += ["-T", str(max(1, round(seconds or 1)))]
    if log_prefix is not None:
        out += ["-l", "--log-prefix", str(log_prefix)]
    return [*out, "postgres"]


def summary(stdout: str) -> dict[str, float]:
    """tps, latency_avg_ms, transactions from pgbench's summary (pure); WorkloadError when
    it printed none."""
    m = _TPS.search(stdout) or _TPS_ANY.search(stdout)
    if m is None:
        raise WorkloadError("pgbench printed no tps line:\n  "
                            + "\n  ".join(stdout.strip().splitlines()[-8:]))
    out = {"tps": float(m.group(1))}
    if (lat := _LAT.search(stdout)) is not None:
        out["latency_avg_ms"] = float(lat.group(1))
    if (tx := _TX.search(stdout)) is not None:
        out["transactions"] = float(tx.group(1))
    if (failed := _FAILED.search(stdout)) is not None:
        out["failed_transactions"] = float(failed.group(1))
    return out


def log_latencies_us(logs: list[Path] | list[str]) -> np.ndarray:
    """Every transaction's latency (µs, the third column) from pgbench's per-transaction
    logs: its files here, or their texts read from a user's domain (an empty one holds none)."""
    parts = []
    for log in logs:
        if isinstance(log, str) and not log.strip():
            continue
        try:
            cols = np.loadtxt(io.StringIO(log) if isinstance(log, str) else log, usecols=2,
                              dtype=np.float64, ndmin=1)
        except (OSError, ValueError) as exc:
            name = log.name if isinstance(log, Path) else "text"
            raise WorkloadError(f"pgbench's log {name} is unreadable: {exc}") from exc
        parts.append(cols)
    return np.concatenate(parts) if parts else np.empty(0)


def percentiles_ms(latencies_us: np.ndarray) -> dict[str, float]:
    """p50..p99.9 in ms of the latencies, each only where at least MIN_TAIL_COUNT
    transactions lie beyond it (p99.9 needs 10,000) (pure)."""
    n = latencies_us.size
    out: dict[str, float] = {}
    for name, q in PERCENTILES.items():
        if n * (100.0 - q) / 100.0 >= MIN_TAIL_COUNT or q == 50.0 and n:
            out[name] = float(np.percentile(latencies_us, q)) / 1000.0
    return out


def window_metrics(windows: list[dict[str, float]], latencies_us: np.ndarray
                   ) -> dict[str, float]:
    """A trial's metrics from its windows' summaries (one, in a paired trial; their tps's
    geometric mean in an interleaved one) and every transaction's latency in µs (pure)."""
    tps = [w["tps"] for w in windows]
    metrics = {"tps": geomean(tps) if len(tps) > 1 else tps[0],
               "transactions": sum(w.get("transactions", 0.0) for w in windows),
               "failed_transactions": sum(w.get("failed_transactions", 0.0) for w in windows)}
    if latencies_us.size:
        metrics["latency_avg_ms"] = float(latencies_us.mean()) / 1000.0
    elif "latency_avg_ms" in windows[0]:
        metrics["latency_avg_ms"] = windows[0]["latency_avg_ms"]
    metrics.update(percentiles_ms(latencies_us))
    return metrics


def log_files(prefix: Path) -> list[Path]:
    return sorted(prefix.parent.glob(prefix.name + ".*"))


def run_once(w: Any, target: Target, top: Path, seconds: float | None, log: bool = True
             ) -> tuple[dict[str, float], np.ndarray]:
    """One pgbench run of Postgres workload `w` against the server of `top` (`seconds`, or
    None: `transactions` per client): its summary and, with `log`, every transaction's
    latency in µs."""
    prefix = top / "pgbench"
    for f in log_files(prefix):
        f.unlink()
    res = target.exec(argv(w._bin() / "pgbench", top, PORT, builtin=w.builtin, script=w.script,
                           clients=w.clients, threads=w.threads, seconds=seconds,
                           transactions=w.transactions if seconds is None else None,
                           log_prefix=prefix if log else None),
                      timeout=w.exec_timeout(seconds or w.duration_s))
    check_exit(res, "pgbench")
    lat = log_latencies_us(log_files(prefix)) if log else np.empty(0)
    return summary(res.stdout), lat


def measured(w: Any, target: Target, top: Path) -> tuple[dict[str, float], np.ndarray]:
    """Postgres workload `w`'s warm-up (`warmup_s`, untimed), then its measured run
    (`duration_s`, or `transactions` per client) against the server of `top`."""
    if w.warmup_s >= 1:
        run_once(w, target, top, w.warmup_s, log=False)
    return run_once(w, target, top, None if w.transactions is not None else w.duration_s)


def request_load(w: Any) -> dict[str, Any]:
    """Postgres workload `w`'s script (built-in or the user's file) as ReqmixSettings fields,
    each op one run of it."""
    if w.script is not None:
        return {"pg_file": Path(w.script), "pg_scale": w.scale}
    return {"pg_builtin": w.builtin, "pg_scale": w.scale}
