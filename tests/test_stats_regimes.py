"""Two regimes in one run's per-block effects (hugelab.stats.regimes), validated by simulation:
false positives under one Gaussian regime, power against two."""

from __future__ import annotations

import numpy as np
import pytest

from hugelab.stats import regimes
from hugelab.stats._util import StatsInputError


def two_regimes(rng, sims, n, share, gap_sd):
    high = rng.random((sims, n)) < share
    return rng.normal(size=(sims, n)) + gap_sd * high


@pytest.mark.parametrize("n", [10, 30, 200])
def test_false_positives_under_one_gaussian_regime(n):
    x = np.random.default_rng(n).normal(0.1, 0.03, size=(2000, n))
    p = regimes.pvalues(x)
    print(f"Gaussian, {n} blocks: false positives {np.mean(p < 0.05):.3f} at 0.05, "
          f"{np.mean(p < 0.01):.3f} at 0.01")
    assert float(np.mean(p < 0.05)) <= 0.055
    assert float(np.mean(p < 0.01)) <= 0.015


def test_false_positives_under_heavy_tails_are_recorded():
    """t3 blocks are heavier-tailed than the null, but a regime must hold 20% of the blocks (an
    outlier or two cannot be one) and outliers widen the within-group SD: no more false
    positives than alpha."""
    x = np.random.default_rng(5).standard_t(3, size=(2000, 30))
    rate = float(np.mean(regimes.pvalues(x) < 0.01))
    print(f"t3, 30 blocks: false positives at 0.01 = {rate:.3f}")
    assert rate <= 0.015


@pytest.mark.parametrize(("n", "share", "gap", "power"), [(20, 0.5, 5.0, 0.7),
                                                         (30, 0.3, 5.0, 0.85),
                                                         (100, 0.3, 4.0, 0.9)])
def test_power_against_two_regimes(n, share, gap, power):
    x = two_regimes(np.random.default_rng(n), 1000, n, share, gap)
    got = float(np.mean(regimes.flags(x, 0.01)))
    print(f"n={n} share={share} gap={gap} SD: power {got:.3f}")
    assert got >= power


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["exponential", "gamma", "lognormal", "uniform"])
def test_a_large_run_with_a_skewed_or_flat_spread_is_not_two_regimes(shape):
    """Thousands of blocks reject the Gaussian null for any other unimodal shape; the
    separation floor keeps them from being called regimes."""
    rng = np.random.default_rng(1)
    x = {"exponential": lambda: rng.exponential(size=5000),
         "gamma": lambda: rng.gamma(2.0, size=5000),
         "lognormal": lambda: rng.lognormal(0.0, 0.5, 5000),
         "uniform": lambda: rng.random(5000)}[shape]()
    r = regimes.detect(0.01 * x)
    assert r.p_value < 0.01 and r.separation < regimes.MIN_SEPARATION and not r.split
    mixed = regimes.detect(rng.normal(size=5000) + 5.0 * (rng.random(5000) < 0.4))
    assert mixed.split and mixed.separation > 4.5


def test_detect_reports_the_regimes_of_issue_20():
    """Blocks at about -13% and about -22% with a switch half-way through the run."""
    rng = np.random.default_rng(9)
    d = np.concatenate([np.log(0.87) + rng.normal(0, 0.01, 12),
                        np.log(0.78) + rng.normal(0, 0.01, 8)])
    r = regimes.detect(d)
    assert r.split and r.p_value < 0.01 and r.switches == 1
    assert (r.low.blocks, r.high.blocks) == (8, 12) and r.low.share == pytest.approx(0.4)
    assert r.low.effect == pytest.approx(np.log(0.78), abs=0.01)
    out = r.to_dict()
    assert out["high"]["effect_pct"] == pytest.approx(-13, abs=1.5)
    assert "two regimes" in out["reading"] and "--repeats" in out["reading"]
    calm = regimes.detect(np.log(0.87) + rng.normal(0, 0.01, 20))
    assert not calm.split and "no sign" in calm.reading()


def test_bad_input():
    with pytest.raises(StatsInputError, match="at least 10 blocks"):
        regimes.detect([0.1] * 5)
    with pytest.raises(StatsInputError, match="alpha"):
        regimes.detect(np.arange(12.0), alpha=0.7)
    assert not regimes.detect(np.zeros(12)).split  # identical blocks: nothing to split
