"""Planning: predicted blocks reach the target power in simulation; reverse question."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.stats import StatsInputError
from hugelab.stats.plan import MAD_TO_SD, detectable_effect, min_blocks, plan, simulate_power


def test_pilot_too_small_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="at least 10 blocks"):
        plan(np.ones(9) * 0.01)
    with pytest.raises(StatsInputError):
        plan(np.zeros(12))


def test_min_blocks_for_confidence() -> None:
    assert min_blocks(0.9999) == 15 and min_blocks(0.95) == 6


@pytest.mark.parametrize(
    ("kind", "effect", "confidence"),
    [("normal", 0.01, 0.95), ("normal", 0.024, 0.9999), ("t3", 0.024, 0.9999)],
)
@pytest.mark.slow
def test_planned_blocks_reach_target_power(kind: str, effect: float, confidence: float) -> None:
    rng = np.random.default_rng(5)
    sd = 0.033 * math.sqrt(2)
    if kind == "normal":
        pilot = rng.normal(0, sd, 60)
    else:
        pilot = rng.standard_t(3, 60) * sd / (MAD_TO_SD * 0.7649)
    p = plan(pilot, effect=effect, confidence=confidence, power=0.9)
    achieved = simulate_power(
        p.blocks_needed, effect, sd, confidence=confidence, noise=kind, n_sim=1500, seed=1
    )
    assert 0.85 <= achieved <= 0.995, f"{p.blocks_needed} blocks gave power {achieved:.3f}"


def test_reverse_question_round_trips() -> None:
    rng = np.random.default_rng(6)
    pilot = rng.normal(0, 0.03, 40)
    p = plan(pilot, effect=0.02, confidence=0.99, power=0.9)
    det = detectable_effect(pilot, p.blocks_needed, confidence=0.99, power=0.9)
    assert det.effect_pct == pytest.approx(2.0, rel=0.05)
    small = detectable_effect(pilot, 10, confidence=0.9999)
    assert math.isinf(small.effect_pct) and small.notes
    assert small.to_dict()["effect_pct"] is None
