"""A titled table of strings and the cell formatters every report table uses.

Nothing here escapes: every renderer escapes every cell for its own format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Table:
    """A titled table of strings with notes underneath."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    right: set[int] = field(default_factory=set)  # right-aligned column indexes (numbers)
    full: bool = False  # shown in the terminal only with `hugelab report --full`


def confidence(alpha: float) -> float:
    """The confidence level, in percent, of intervals at `alpha` (95 for 0.05)."""
    return 100 * (1 - alpha)


def ci_column(alpha: float, what: str = "effect") -> str:
    """The head of a column of estimates with their intervals at `alpha`: 'effect [95% CI]'."""
    return f"{what} [{confidence(alpha):g}% CI]"


def num(v: float | None, spec: str = ".4g") -> str:
    """`v` to `spec`'s digits; a large one whole, with thousands separators (17,670 rather
    than 1.767e+04 transactions/s)."""
    if v is None:
        return "-"
    if spec == ".4g" and math.isfinite(v) and 1e4 <= abs(float(f"{v:.4g}")) and abs(v) < 1e15:
        return f"{v:,.0f}"  # 9999.6 too, which four digits round up to 1e+04
    return format(v, spec)


def pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:+.{digits}f}%"


def pval(p: float | None) -> str:
    if p is None:
        return "-"
    if p == 0:
        return "<1e-300"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
