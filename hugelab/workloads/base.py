"""What every workload provides, and where it runs (a Target: native host or a guest)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class ExecResult:
    """One finished process: its output, exit code, wall time and resource usage."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    rusage: dict[str, float] = field(default_factory=dict)  # minflt, majflt, utime_s, stime_s, maxrss_kb


@dataclass
class WorkloadResult:
    """Parsed metrics of one trial. `primary` names the metric verdicts are computed on."""

    metrics: dict[str, float]
    primary: str
    unit: str
    better: Better
    evidence: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # tool version, notes, warnings

    @property
    def value(self) -> float:
        return self.metrics[self.primary]


class Target(Protocol):
    """Where a workload's processes run: the host, or inside a guest."""

    name: str  # "native" or e.g. "vm0"

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult: ...


class Workload(Protocol):
    """A workload is configured once (frozen), then run in a Target, once per trial."""

    kind: str

    def run(self, target: Target, backing: str) -> WorkloadResult: ...


class Place(enum.Enum):
    """Where a target runs a workload's processes: the host itself, one of hugelab's own
    guests (which see the host's root), or a user's libvirt domain (files of its own)."""

    NATIVE = "native"
    GUEST = "guest"
    DOMAIN = "domain"


def place_of(target: object) -> Place:
    """A target's place: the one it declares (`place`, a user's domain's way in), else the
    host for the target named "native", else hugelab's own guest."""
    declared = getattr(target, "place", None)
    if declared is not None:
        return Place(declared)
    return Place.NATIVE if getattr(target, "name", "") == "native" else Place.GUEST
