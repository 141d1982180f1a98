"""Noise models and Monte-Carlo tolerance shared by the statistics simulations."""

from __future__ import annotations

import math

import numpy as np

SIGMA = 0.033  # per-trial noise, 3.3% of the mean as in the Red Hat sysbench table (004)


def mc_tol(p: float, n: int) -> float:
    """Three Monte-Carlo standard errors of a rate p estimated from n simulated experiments."""
    return 3.0 * math.sqrt(p * (1 - p) / n)


def noise(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.normal(0, SIGMA, shape)
    if kind == "t3":
        return rng.standard_t(3, shape) * SIGMA / math.sqrt(3)  # SD = SIGMA
    if kind == "outliers":  # normal with 1% of trials 20 sigma slow (compaction stalls)
        x = rng.normal(0, SIGMA, shape)
        return x + (rng.random(shape) < 0.01) * 20 * SIGMA
    raise ValueError(kind)
