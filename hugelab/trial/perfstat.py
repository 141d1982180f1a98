"""Hardware counters around a workload: a Target wrapper that runs argv under `perf stat`.

Used when `host.inspect.hardware_counters()` finds a CPU PMU; the counters of every process a
trial starts are summed until the runner takes them. Parsing is pure.
"""

from __future__ import annotations

import os
import tempfile

from hugelab.workloads.base import ExecResult, Target

HW_EVENTS = ("dTLB-load-misses", "dTLB-loads", "iTLB-load-misses", "cycles", "instructions")
SW_EVENTS = ("page-faults", "minor-faults", "major-faults")


def parse_perf_csv(text: str) -> dict[str, float | None]:
    """`perf stat -x,` output -> {event: value}; None for '<not supported>'/'<not counted>'."""
    out: dict[str, float | None] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split(",")
        if len(cells) < 3 or not cells[2]:
            continue
        try:
            out[cells[2]] = float(cells[0])
        except ValueError:
            out[cells[2]] = None
    return out


class PerfTarget:
    """Runs every argv of the wrapped Target under `perf stat -x, -e EVENTS -o FILE --`."""

    def __init__(self, inner: Target, events: tuple[str, ...] = HW_EVENTS + SW_EVENTS,
                 perf: str = "perf") -> None:
        self.inner = inner
        self.name = inner.name
        self.events = events
        self.perf = perf
        self._counters: dict[str, float | None] = {}

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        fd, out = tempfile.mkstemp(prefix="hugelab-perf-", suffix=".csv")
        os.close(fd)
        try:
            wrapped = [self.perf, "stat", "-x,", "-o", out, "-e", ",".join(self.events), "--", *argv]
            r = self.inner.exec(wrapped, timeout=timeout)
            with open(out) as f:
                for k, v in parse_perf_csv(f.read()).items():
                    old = self._counters.get(k)
                    self._counters[k] = None if v is None else (old or 0.0) + v
        finally:
            os.unlink(out)
        return ExecResult(argv, r.returncode, r.stdout, r.stderr, r.wall_s, r.rusage)

    def take_counters(self) -> dict[str, float | None]:
        """Counters since the last call (a trial's worth)."""
        c, self._counters = self._counters, {}
        return c
