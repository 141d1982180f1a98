"""What a save cost (pure): per fork Redis's own figures from INFO, the latency probe's samples
split by the save windows, their tails, and the trial's app costs (see persist's docstring)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.redis.resp import number

PROBE_INTERVAL_S = 0.001


@dataclass(frozen=True)
class Fork:
    """One save, as Redis reported it when it ended; times in s from the load's start."""

    start_s: float
    end_s: float
    fork_usec: float          # latest_fork_usec
    cow_bytes: float          # rdb_last_cow_size or aof_last_cow_size
    fragmentation_ratio: float  # mem_fragmentation_ratio
    total_forks: float        # the server's total_forks after it


def fork_of(mode: str, info: dict[str, str], start_s: float, end_s: float) -> Fork:
    """A finished save's record from INFO (pure)."""
    cow = "rdb_last_cow_size" if mode == "rdb" else "aof_last_cow_size"
    return Fork(start_s, end_s, number(info, "latest_fork_usec"), number(info, cow),
                number(info, "mem_fragmentation_ratio"), number(info, "total_forks"))


def save_done(mode: str, info: dict[str, str]) -> bool:
    """Whether the save in progress has ended (pure); WorkloadError when it failed."""
    if mode == "rdb":
        busy = info.get("rdb_bgsave_in_progress") != "0"
        status = info.get("rdb_last_bgsave_status", "ok")
    else:
        busy = info.get("aof_rewrite_in_progress") != "0" or \
            info.get("aof_rewrite_scheduled") != "0"
        status = info.get("aof_last_bgrewrite_status", "ok")
    if not busy and status != "ok":
        raise WorkloadError(f"redis-server's {'BGSAVE' if mode == 'rdb' else 'BGREWRITEAOF'} "
                            f"failed (status {status}); see its log")
    return not busy


def split(times: np.ndarray, lat: np.ndarray, forks: list[Fork]
          ) -> tuple[np.ndarray, np.ndarray]:
    """The latencies of samples sent inside a fork window [start, end], and the others
    (pure)."""
    inside = np.zeros(len(times), dtype=bool)
    for f in forks:
        inside |= (times >= f.start_s) & (times <= f.end_s)
    return lat[inside], lat[~inside]


def tails(prefix: str, lat_s: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9 and max of latencies in s, as `<prefix>_p99_9_ms`... (pure); {} for
    no samples."""
    if not len(lat_s):
        return {}
    ms = np.asarray(lat_s) * 1e3
    p50, p99, p999 = np.percentile(ms, [50, 99, 99.9])
    return {f"{prefix}_p50_ms": float(p50), f"{prefix}_p99_ms": float(p99),
            f"{prefix}_p99_9_ms": float(p999), f"{prefix}_max_ms": float(ms.max())}


def app_costs(forks: list[Fork]) -> dict[str, float]:
    """The trial's application-own costs from its forks (pure): medians and maxima."""
    fork_ms = [f.fork_usec / 1e3 for f in forks]
    cow_kb = [f.cow_bytes / 1024 for f in forks]
    return {"forks": float(len(forks)),
            "fork_ms": statistics.median(fork_ms), "fork_max_ms": max(fork_ms),
            "cow_kb": statistics.median(cow_kb), "cow_max_kb": max(cow_kb),
            "fragmentation_ratio": statistics.median(f.fragmentation_ratio for f in forks)}


@dataclass
class Outcome:
    """What the driver saw: every fork, and the probe's samples (send time, latency, in s)."""

    forks: list[Fork]
    times: np.ndarray
    latencies: np.ndarray

    def record(self, result: WorkloadResult, mode: str, fork_every_s: float) -> None:
        """Into a trial's result: the probe's tails as metrics; the forks, their costs and
        the probe's sample counts as evidence."""
        inside, outside = split(self.times, self.latencies, self.forks)
        result.metrics.update({**tails("forkwin", inside), **tails("steady", outside)})
        result.evidence.update({
            "app_costs": app_costs(self.forks), "forks": [asdict(f) for f in self.forks],
            "persistence": {"mode": mode, "fork_every_s": fork_every_s,
                            "probe_interval_ms": PROBE_INTERVAL_S * 1e3,
                            "probe_samples_forkwin": len(inside),
                            "probe_samples_steady": len(outside)}})
