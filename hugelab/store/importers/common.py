"""What every importer shares: records, problems, results and small parsers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hugelab.errors import HugelabError, UsageError

FORMATS = ("csv", "sysbench", "stress-ng", "iperf3")
MAX_REPORTED = 50
CSV_COLUMNS = ("arm", "value", "block", "order", "timestamp", "unit", "better")
ARM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:@-]*$")


class ImportRejected(HugelabError):
    """Input rows failed validation; nothing was imported. ``problems`` lists them all."""

    exit_code = 2

    def __init__(self, problems: list[Problem], total: int) -> None:
        shown = problems[:MAX_REPORTED]
        lines = [f"  {p}" for p in shown]
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more")
        super().__init__(
            f"{total} bad row(s); nothing was imported:\n" + "\n".join(lines),
            hint="fix the rows named above and import again")
        self.problems = problems
        self.total = total


@dataclass(frozen=True)
class Problem:
    """One bad input row (or record, for raw tool outputs)."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Record:
    """One trial to import, before it has a run id."""

    arm: str
    value: float
    source: str  # "path:line"
    block: int | None = None
    order: int | None = None
    timestamp: float | None = None
    unit: str | None = None
    better: str | None = None
    metric: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Parsed:
    """What the input files hold: records, bad rows, warnings, and where they came from."""

    records: list[Record] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    pairing: str = "block"


@dataclass(frozen=True)
class ImportResult:
    run_id: int
    store: str
    name: str
    trials: int
    arms: dict[str, int]
    blocks: int
    baseline: str
    pairing: str
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "store": self.store, "name": self.name,
                "trials": self.trials, "arms": self.arms, "blocks": self.blocks,
                "baseline": self.baseline, "pairing": self.pairing,
                "notes": list(self.notes), "warnings": list(self.warnings)}


# --- small helpers ---------------------------------------------------------------------------

def parse_fraction(text: str, name: str) -> float:
    """'1%' or '0.01' -> 0.01. Without '%', a value must lie in (0, 1)."""
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100.0 if s.endswith("%") else float(s)
    except ValueError:
        raise UsageError(f"{name} must be a percentage like 1% or a fraction like 0.01, "
                         f"got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} must be positive, got {text!r}")
    if not s.endswith("%") and value >= 1:
        raise UsageError(f"{name} {text!r} is ambiguous",
                         hint=f"write it as a percentage ({s}%) or as a fraction below 1")
    return value


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def parse_number(text: str) -> float:
    """A finite number; ValueError for anything else."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def parse_timestamp(text: str) -> float:
    """Epoch seconds, or an ISO 8601 time (`Z` for UTC), as epoch seconds."""
    try:
        return parse_number(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"timestamp {text!r} is neither epoch seconds nor ISO 8601") from None


def parse_count(text: str, name: str) -> int:
    """A non-negative integer (`3` or `3.0`); ValueError naming the column `name` otherwise."""
    if not text:
        raise ValueError(f"{name} is empty")
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not an integer") from None
    if not f.is_integer() or f < 0:
        raise ValueError(f"{name} {text!r} is not a non-negative integer")
    return int(f)


def check_value(value: float) -> str | None:
    if not math.isfinite(value):
        return f"value {value} is not finite"
    if value <= 0:
        return f"value {value:g} is not positive (comparisons work on log ratios)"
    return None


