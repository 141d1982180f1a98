"""Two independent samples of log values: the Hodges-Lehmann shift (median of all pairwise
differences) with a percentile-bootstrap interval. For comparisons that cannot be paired, such
as one guest's values when it runs beside another against its values when it runs alone.

Pure numpy, seeded: the same samples give the same interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from hugelab.stats._util import StatsInputError, as_1d

MIN_EACH = 3


@dataclass(frozen=True)
class Shift:
    """b - a on the log scale: `shift` and its interval (lo, hi) at `confidence`."""

    shift: float
    lo: float
    hi: float
    confidence: float
    n_a: int
    n_b: int

    def pct(self) -> tuple[float, float, float]:
        """The shift and its interval as percentages of a."""
        return tuple(100.0 * float(np.expm1(v)) for v in (self.shift, self.lo, self.hi))  # type: ignore[return-value]


def hl_shift(a: ArrayLike, b: ArrayLike) -> float:
    """Median of every pairwise difference b_j - a_i."""
    x, y = as_1d(a, "a"), as_1d(b, "b")
    return float(np.median(np.subtract.outer(y, x)))


def shift(a: ArrayLike, b: ArrayLike, *, confidence: float = 0.95, n_boot: int = 2000,
          seed: int = 0) -> Shift:
    """The shift of b against a with a percentile-bootstrap interval (each sample resampled
    on its own)."""
    x, y = as_1d(a, "a"), as_1d(b, "b")
    if x.size < MIN_EACH or y.size < MIN_EACH:
        raise StatsInputError(f"a two-sample shift needs at least {MIN_EACH} values in each "
                              f"sample (got {x.size} and {y.size})")
    if not 0.5 < confidence < 1.0:
        raise StatsInputError(f"confidence must be in (0.5, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    xi = rng.integers(0, x.size, size=(n_boot, x.size))
    yi = rng.integers(0, y.size, size=(n_boot, y.size))
    step = max(1, int(4e6 // (x.size * y.size)))  # resamples per chunk: bounded memory
    boots = np.concatenate([
        np.median(y[yi[i:i + step]][:, :, None] - x[xi[i:i + step]][:, None, :], axis=(1, 2))
        for i in range(0, n_boot, step)])
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boots, [tail, 1.0 - tail])
    return Shift(hl_shift(x, y), float(lo), float(hi), confidence, int(x.size), int(y.size))

