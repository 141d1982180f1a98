"""Shared input checks and JSON clean-up for hugelab.stats (no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hugelab.errors import HugelabError

FloatArray = NDArray[np.float64]
# the fewest units (blocks, boots) any paired verdict is drawn from: fewer give `inconclusive`;
# here, not in paired, so a plan (a dry run) reads it without importing scipy (1.9 s of it)
MIN_UNITS = 6


class StatsInputError(HugelabError, ValueError):
    """Data handed to a statistics routine cannot be analysed as asked (a ValueError too)."""


def as_1d(values: ArrayLike, name: str) -> FloatArray:
    """Return `values` as a 1-D float array or raise StatsInputError."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise StatsInputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def labelled(values: ArrayLike, labels: ArrayLike, name: str, what: str) -> tuple[FloatArray, NDArray[Any]]:
    """`values` (called `name`) as a 1-D float array with their group `labels` (called
    `what`, one per value), NaN values and their labels dropped; StatsInputError otherwise."""
    x = as_1d(values, name)
    lab = np.asarray(labels)
    if lab.shape != x.shape:
        raise StatsInputError(f"{what} must label every value: {lab.shape} vs {x.shape}")
    keep = ~np.isnan(x)
    return x[keep], lab[keep]


def paired_arrays(
    baseline: ArrayLike, candidate: ArrayLike, blocks: ArrayLike | None = None
) -> tuple[FloatArray, FloatArray, NDArray[Any] | None, int]:
    """Check paired observations; drop pairs with a NaN in either arm.

    Returns (baseline, candidate, blocks, n_dropped). Infinite or non-positive values
    raise: a ratio of times or rates is meaningless there.
    """
    b = as_1d(baseline, "baseline")
    c = as_1d(candidate, "candidate")
    if b.shape != c.shape:
        raise StatsInputError(
            f"baseline and candidate must pair up: {b.size} vs {c.size} observations"
        )
    labels = None if blocks is None else np.asarray(blocks)
    if labels is not None and labels.shape != b.shape:
        raise StatsInputError(f"blocks must label every pair: {labels.shape} vs {b.shape}")
    keep = ~(np.isnan(b) | np.isnan(c))
    b, c = b[keep], c[keep]
    if labels is not None:
        labels = labels[keep]
    if np.any(np.isinf(b)) or np.any(np.isinf(c)):
        raise StatsInputError("observations must be finite (found inf)")
    if np.any(b <= 0) or np.any(c <= 0):
        raise StatsInputError(
            "observations must be positive: comparisons work on log(candidate/baseline)"
        )
    return b, c, labels, int(keep.size - keep.sum())


def finite_1d(values: ArrayLike, name: str, *, min_n: int = 1) -> FloatArray:
    """1-D array with NaNs removed; raise if fewer than min_n values remain or inf found."""
    arr = as_1d(values, name)
    arr = arr[~np.isnan(arr)]
    if np.any(np.isinf(arr)):
        raise StatsInputError(f"{name} must be finite (found inf)")
    if arr.size < min_n:
        raise StatsInputError(f"{name} needs at least {min_n} values, got {arr.size}")
    return arr


def jsonable(obj: Any) -> Any:
    """Recursively convert to JSON-safe types: non-finite floats become None."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
