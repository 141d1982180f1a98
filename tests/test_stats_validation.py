"""Monte-Carlo validation of the paired design: A/A false positives, coverage, power.

Tolerances: a rate estimated from N experiments has Monte-Carlo SD sqrt(p(1-p)/N); we allow
3 SDs above nominal (N = 2000: +0.0146 at alpha = 0.05, +0.0067 at alpha = 0.01; the one-sided
chance of a spurious failure of a correct procedure is ~0.1% per check). Seeds are fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.stats import compare, signedrank
from hugelab.stats.paired import analyse, verdict_codes, verdicts
from tests import simnoise

N_SIM = 2000


def mc_tol(p: float, n: int = N_SIM) -> float:
    return simnoise.mc_tol(p, n)


_noise = simnoise.noise
SIGMA = simnoise.SIGMA


def simulate_aa(kind: str, n_blocks: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Identical arms run as randomised blocks on a drifting, level-shifting machine.

    Log times: drift (slow trend up to 10%), a 5% level shift at a random block, a shared
    block effect (2%), a 1% penalty for whichever arm runs first in the block (order is
    randomised), plus per-trial noise of the given kind.
    """
    rng = np.random.default_rng(seed)
    shape = (N_SIM, n_blocks)
    t = np.linspace(0, 1, n_blocks)
    drift = rng.uniform(-0.1, 0.1, (N_SIM, 1)) * t
    shift_at = rng.integers(0, n_blocks, (N_SIM, 1))
    level = 0.05 * (np.arange(n_blocks) >= shift_at)
    block = rng.normal(0, 0.02, shape)
    common = math.log(100) + drift + level + block
    a_first = rng.random(shape) < 0.5
    a = common + 0.01 * a_first + _noise(rng, shape, kind)
    b = common + 0.01 * ~a_first + _noise(rng, shape, kind)
    return np.exp(a), np.exp(b)


@pytest.mark.parametrize("alpha", [0.05, 0.01])
@pytest.mark.parametrize(("kind", "n_blocks"), [("normal", 30), ("t3", 30), ("outliers", 40)])
def test_aa_false_positive_rate_within_alpha(alpha: float, kind: str, n_blocks: int) -> None:
    base, cand = simulate_aa(
        kind, n_blocks, seed={"normal": 1, "t3": 2, "outliers": 3}[kind] * 100 + int(alpha * 100)
    )
    v = verdicts(base, cand, alpha=alpha)
    fp = np.mean((v == "faster") | (v == "slower"))
    assert fp <= alpha + mc_tol(alpha), f"{kind}: false positives {fp:.4f} at alpha {alpha}"


def _boot_design(seed: int, n_boots: int = 10, per_boot: int = 6) -> tuple[np.ndarray, ...]:
    """A/A with per-arm VM boots that differ by ~1% (arm x boot effect): pairs share a boot."""
    rng = np.random.default_rng(seed)
    shape = (N_SIM, n_boots, per_boot)
    boot_a = rng.normal(0, 0.01, (N_SIM, n_boots, 1))
    boot_b = rng.normal(0, 0.01, (N_SIM, n_boots, 1))
    a = boot_a + rng.normal(0, 0.005, shape)
    b = boot_b + rng.normal(0, 0.005, shape)
    return a, b


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_aa_with_boot_effects_block_units_keep_alpha_pooling_does_not(alpha: float) -> None:
    a, b = _boot_design(seed=11 if alpha == 0.05 else 12)
    d = b - a
    # hugelab's rule with blocks=boot labels: per-boot Hodges-Lehmann shifts are the units
    per_boot = signedrank.hodges_lehmann(d.reshape(-1, d.shape[2])).reshape(d.shape[:2])
    r = analyse(per_boot, alpha=alpha, margin=0.01)
    v = verdict_codes(r["p"], r["tost_p"], r["hl"], alpha, "lower")
    fp = np.mean((v == "faster") | (v == "slower"))
    assert fp <= alpha + mc_tol(alpha)
    # pooling the pairs as if independent is badly anti-conservative (Kalibera & Jones)
    pooled = verdicts(np.exp(a.reshape(N_SIM, -1)), np.exp(b.reshape(N_SIM, -1)), alpha=alpha)
    assert np.mean((pooled == "faster") | (pooled == "slower")) > 4 * alpha
    # and compare(blocks=...) follows the same rule as the batch path above
    labels = np.repeat(np.arange(d.shape[1]), d.shape[2])
    for i in range(15):
        one = compare(np.exp(a[i].ravel()), np.exp(b[i].ravel()), blocks=labels, alpha=alpha)
        assert one.verdict == v[i] and one.unit == "block"


@pytest.mark.parametrize(("n", "kind"), [(15, "t3"), (40, "outliers"), (80, "normal")])
def test_interval_coverage_at_nominal_level(n: int, kind: str) -> None:
    rng = np.random.default_rng(n)
    true = math.log(0.976)
    d = true + _noise(rng, (N_SIM, n), kind) - _noise(rng, (N_SIM, n), kind)
    _, lo, hi, _ = signedrank.hl_and_interval(d, 0.05)
    coverage = np.mean((lo <= true) & (true <= hi))
    assert coverage >= 0.95 - mc_tol(0.05), f"coverage {coverage:.4f}"
    assert coverage <= 0.95 + 0.02  # not uselessly wide either (exact intervals are >= nominal)


def _power(effect: float, n_blocks: int, kind: str, alpha: float, seed: int, n_sim: int) -> float:
    rng = np.random.default_rng(seed)
    base = np.exp(4.6 + _noise(rng, (n_sim, n_blocks), kind))
    cand = np.exp(4.6 + math.log1p(-effect) + _noise(rng, (n_sim, n_blocks), kind))
    return float(np.mean(verdicts(base, cand, alpha=alpha) == "faster"))


@pytest.mark.parametrize(
    ("effect", "n_blocks", "kind", "floor"),
    [
        # expected powers from the signed-rank ARE: 2.4% with 50 blocks ~0.94 (normal noise)
        (0.024, 50, "normal", 0.85),
        (0.024, 50, "t3", 0.90),
        (0.024, 50, "outliers", 0.85),
        # 0.4% is six times smaller: 300 blocks give only ~0.3 power at 5% (honest floor)
        (0.004, 300, "normal", 0.22),
        (0.004, 300, "t3", 0.30),
    ],
)
@pytest.mark.slow
def test_power_against_injected_shifts(
    effect: float, n_blocks: int, kind: str, floor: float
) -> None:
    power = _power(effect, n_blocks, kind, 0.05, seed=int(effect * 1e4) + n_blocks, n_sim=1000)
    assert power >= floor, f"power {power:.3f} for {effect:.1%} with {n_blocks} blocks ({kind})"
