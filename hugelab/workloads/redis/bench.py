"""redis-benchmark, Redis's load generator, as hugelab runs it: the tests it knows, its argv,
its CSV (rps and latencies per test), and its runs as the windows of design "interleaved"
(`BenchmarkRuns`, which RedisBenchmark takes in): a warm-up run of `requests` per server
measures its rate, and each window then sends as many requests as fill `window_s` at the rate
of the server's last run, so windows stay near their length whichever arm is faster; an arm's requests/s is the
geometric mean of its windows, its latency percentiles the median of its windows'."""

from __future__ import annotations

import csv
import io
import re
import statistics
from typing import TYPE_CHECKING, Any

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads import interleave
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.process_thp import target_for
from hugelab.workloads.serverkind import Running
from hugelab.workloads.serverside import LOOPBACK
from hugelab.workloads.toolrun import check_exit, first_version, tail

TESTS = ("ping_inline", "ping_mbulk", "set", "get", "incr", "lpush", "rpush", "lpop", "rpop",
         "sadd", "hset", "spop", "zadd", "zpopmin", "lrange", "lrange_100", "lrange_300",
         "lrange_500", "lrange_600", "mset", "xadd")
_COLUMNS = {"rps": "rps", "avg_latency_ms": "avg_ms", "min_latency_ms": "min_ms",
            "p50_latency_ms": "p50_ms", "p95_latency_ms": "p95_ms", "p99_latency_ms": "p99_ms",
            "max_latency_ms": "max_ms"}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """Per test ('set', 'get', 'lrange_100_first_100_elements', ...) its rps and latencies.

    Redis 7 prints a header row; redis 6 and older print "test","rps" rows without one."""
    rows = [r for r in csv.reader(io.StringIO(text.strip())) if r]
    if not rows:
        raise WorkloadError("redis-benchmark printed no CSV")
    header = ["test", "rps"]
    if rows[0] and rows[0][0] == "test":
        header, rows = rows[0], rows[1:]
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if len(row) != len(header):
            continue
        values: dict[str, float] = {}
        for col, cell in zip(header[1:], row[1:], strict=True):
            try:
                values[_COLUMNS.get(col, _slug(col))] = float(cell)
            except ValueError:
                continue
        if "rps" in values:
            out[_slug(row[0])] = values
    if not out:
        raise WorkloadError(f"redis-benchmark CSV has no test rows\n  {tail(text, 5)}")
    return out


def window_metrics(windows: list[dict[str, float]]) -> dict[str, float]:
    """An arm's metrics from its windows (pure): requests/s the geometric mean (so two arms'
    log-ratio is the mean of their windows'), latencies the median, wall_s the sum."""
    out: dict[str, float] = {}
    for key in windows[0]:
        values = [w[key] for w in windows if key in w]
        if key.endswith("_rps"):
            out[key] = interleave.geomean(values)
        elif key == "wall_s":
            out[key] = sum(values)
        else:
            out[key] = statistics.median(values)
    out["duration_s"] = out.get("wall_s", 0.0)
    return out


class BenchmarkRuns:
    """redis-benchmark's argv and parser for a RedisBenchmark, and its runs as windows of
    design "interleaved" (hugelab.workloads.interleave.ServerWorkload's warm, window, finish)."""

    requests: int
    clients: int
    tests: tuple[str, ...]
    data_size: int
    pipeline: int
    keyspace: int | None
    threads: int | None
    benchmark_binary: str
    timeout_s: float | None
    process_thp: str | None

    if TYPE_CHECKING:  # ServerKind's, which RedisBenchmark also takes in
        def request_result(self, srv: Running, metrics: dict[str, float], backing: str,
                           primary: str = "ops_per_s") -> WorkloadResult: ...

    @property
    def primary(self) -> str:
        return "get_rps" if "get" in self.tests else f"{self.tests[0]}_rps"

    def benchmark_argv(self, port: int, requests: int | None = None) -> list[str]:
        """redis-benchmark against 127.0.0.1:port with CSV output, `requests` per test
        (default: the workload's) (pure)."""
        argv = [self.benchmark_binary, "-h", LOOPBACK, "-p", str(port), "-q",
                "-n", str(requests or self.requests), "-c", str(self.clients), "-d", str(self.data_size),
                "-P", str(self.pipeline), "-t", ",".join(self.tests), "--csv"]
        if self.keyspace is not None:
            argv += ["-r", str(self.keyspace)]
        if self.threads is not None:
            argv += ["--threads", str(self.threads)]
        return argv

    def exec_timeout(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return 60.0 + self.requests * len(self.tests) / 2000.0

    def parse(self, res: ExecResult, server_output: str = "") -> WorkloadResult:
        """Metrics of one finished redis-benchmark run (pure); WorkloadError when it failed."""
        check_exit(res, "redis-benchmark")
        per_test = parse_csv(res.stdout)
        metrics = {f"{test}_{k}": v for test, vals in per_test.items() for k, v in vals.items()}
        if self.primary not in metrics:
            raise WorkloadError(f"redis-benchmark CSV lacks {self.primary}; "
                                f"tests seen: {', '.join(per_test)}")
        metrics["wall_s"] = res.wall_s
        info: dict[str, Any] = {
            "tool": "redis-benchmark",
            "version": first_version(server_output, r"(?:Redis version|v)=(\d+\.\d+\.\d+)"),
            "tests": list(self.tests),
            "warnings": [ln.strip() for ln in res.stderr.splitlines() if ln.strip()],
        }
        return WorkloadResult(metrics=metrics, primary=self.primary, unit="requests/s",
                              better="higher", info=info)

    def _bench(self, target: Target, srv: Running, requests: int) -> WorkloadResult:
        client = target_for(target, self.process_thp)
        res = client.exec(self.benchmark_argv(srv.port, requests), timeout=self.exec_timeout())
        return self.parse(res)

    def warm(self, target: Target, srv: Running) -> None:
        """A first run of `requests` per test: the server warms, and its rate sizes the
        windows."""
        res = self._bench(target, srv, self.requests)
        srv.rate = self.requests / max(res.metrics["wall_s"], 1e-3)  # per test's requests/s

    def window(self, target: Target, srv: Running, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]:
        """One redis-benchmark run sized to last about `seconds` at the rate of this server's
        last run (the warm-up's, then each window's: a machine whose speed moves under load
        leaves one window off its length, not all of them)."""
        n = max(self.clients, round(srv.rate * seconds)) if srv.rate else self.requests
        metrics = self._bench(target, srv, n).metrics
        if metrics.get("wall_s"):
            srv.rate = n / max(metrics["wall_s"], 1e-3)
        return metrics, np.empty(0)

    def finish(self, srv: Running, windows: list[dict[str, float]],
               latencies: np.ndarray, backing: str) -> WorkloadResult:
        """The arm's result from its windows, and its own server's evidence, read now."""
        values = [w[self.primary] for w in windows]
        result = self.request_result(srv, window_metrics(windows), backing, self.primary)
        result.info.update({"tool": "redis-benchmark", "tests": list(self.tests),
                            "reps": {"n": len(values), "values": values, "unit": "window",
                                     "wall_s": [w["wall_s"] for w in windows]}})
        return result
