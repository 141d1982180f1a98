"""Arrange arms into a host x guest table, and express guests as a percentage of native.

Keys are (host setting, guest setting) pairs, e.g. ("thp", "native") for a run on the host
itself and ("thp", "hugetlb-1G") for a guest on that host. "Guest as % of native" is the
guest's performance as a share of the native run on the same host setting (or of one fixed
reference cell): for times (better="lower") 100 * native / guest, for rates 100 * guest / native.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hugelab.stats._util import StatsInputError, jsonable

NATIVE = "native"


@dataclass(frozen=True)
class Grid:
    """Values laid out as rows (host settings) x columns (guest settings); None = not run."""

    hosts: tuple[str, ...]
    guests: tuple[str, ...]
    values: tuple[tuple[float | None, ...], ...]

    def get(self, host: str, guest: str) -> float | None:
        """Value of one cell (None when missing)."""
        return self.values[self.hosts.index(host)][self.guests.index(guest)]

    def to_rows(self, fmt: str = "{:.1f}", missing: str = "-") -> list[list[str]]:
        """Header row plus one row per host, as strings for a table renderer."""
        rows = [["host \\ guest", *self.guests]]
        for host, vals in zip(self.hosts, self.values, strict=True):
            rows.append([host, *(missing if v is None else fmt.format(v) for v in vals)])
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        out: dict[str, Any] = jsonable(asdict(self))
        return out


def _order(seen: list[str], preferred: Sequence[str] | None) -> tuple[str, ...]:
    if preferred is None:
        return tuple(seen)
    extra = [s for s in seen if s not in preferred]
    return tuple([p for p in preferred if p in seen] + extra)


def make_grid(
    cells: Mapping[tuple[str, str], float],
    *,
    host_order: Sequence[str] | None = None,
    guest_order: Sequence[str] | None = None,
) -> Grid:
    """Lay out {(host, guest): value} as a Grid; "native" comes first among guests."""
    hosts: list[str] = []
    guests: list[str] = []
    for host, guest in cells:
        if host not in hosts:
            hosts.append(host)
        if guest not in guests:
            guests.append(guest)
    if NATIVE in guests:
        guests.remove(NATIVE)
        guests.insert(0, NATIVE)
    h = _order(hosts, host_order)
    g = _order(guests, guest_order)
    values = tuple(
        tuple(None if (hh, gg) not in cells else float(cells[(hh, gg)]) for gg in g) for hh in h
    )
    return Grid(hosts=h, guests=g, values=values)


def _share(value: float | None, ref: float | None, better: str) -> float | None:
    if value is None or ref is None or not np.isfinite(value) or not np.isfinite(ref):
        return None
    if value <= 0 or ref <= 0:
        return None
    return 100.0 * (ref / value if better == "lower" else value / ref)


def percent_of_native(
    grid: Grid, *, better: str = "lower", reference: tuple[str, str] | None = None
) -> Grid:
    """Each cell as % of native performance (100 = as fast as native; below = slower).

    By default each row is compared with its own "native" cell; ``reference`` names one
    fixed (host, guest) cell for all rows instead.
    """
    if better not in ("lower", "higher"):
        raise StatsInputError(f"better must be 'lower' or 'higher', got {better!r}")
    if reference is None and NATIVE not in grid.guests:
        raise StatsInputError("the grid has no 'native' column to compare guests with")
    fixed = None if reference is None else grid.get(*reference)
    rows = []
    for host, vals in zip(grid.hosts, grid.values, strict=True):
        ref = fixed if reference is not None else grid.get(host, NATIVE)
        rows.append(tuple(_share(v, ref, better) for v in vals))
    return Grid(hosts=grid.hosts, guests=grid.guests, values=tuple(rows))
