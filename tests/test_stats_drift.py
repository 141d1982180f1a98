"""Drift of the paired effect over a run: reference agreement, small n, Monte-Carlo validation.

Tolerances as in test_stats_validation: a rate from N experiments has Monte-Carlo SD
sqrt(p(1-p)/N); false-alarm rates may exceed alpha by 3 SDs. Seeds are fixed; every simulation
is one vectorised call over (experiments x pairs).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from hugelab.stats import Drift, StatsInputError, effect_drift, signedrank
from hugelab.stats.drift import MIN_PAIRS, drift_pvalues, min_pairs
from tests import simnoise

N_SIM = 4000


def mc_tol(p: float, n: int = N_SIM) -> float:
    return simnoise.mc_tol(p, n)


_noise = simnoise.noise
SIGMA = simnoise.SIGMA


def _moving(n: int) -> np.ndarray:
    """Log effect moving linearly from -6% to -2% over the run (THP gain fading)."""
    return np.log1p(np.linspace(-0.06, -0.02, n))


# --- reference and behaviour ------------------------------------------------------------------

def test_agrees_with_scipy_on_a_reference_case() -> None:
    rng = np.random.default_rng(7)
    n = 61
    d = _moving(n) + rng.standard_t(3, n) * 0.02
    order = rng.permutation(n) * 3 + 100  # block numbers, handed over shuffled
    r = effect_drift(d, order)
    sd = d[np.argsort(order)]
    ref = stats.spearmanr(np.sort(order), sd)
    assert r.rho == pytest.approx(ref.statistic, rel=1e-12)
    assert r.trend_p == pytest.approx(ref.pvalue, rel=1e-9)
    assert r.segment_sizes == (20, 20, 21)
    mw = stats.mannwhitneyu(sd[:20], sd[40:], alternative="two-sided")
    assert r.split_p == pytest.approx(mw.pvalue, rel=1e-12)
    assert r.p_value == pytest.approx(min(1.0, 2 * min(ref.pvalue, mw.pvalue)))
    assert r.drifting == (r.p_value < r.alpha)
    # segment effects: Hodges-Lehmann (median of Walsh averages) of each third, in percent
    for seg, (a, b) in zip(r.segment_pct, ((0, 20), (20, 40), (40, 61)), strict=True):
        x = sd[a:b]
        walsh = (x[:, None] + x[None, :])[np.triu_indices(x.size)] / 2
        assert seg == pytest.approx(100 * np.expm1(np.median(walsh)), rel=1e-12)
    assert (r.first_pct, r.last_pct) == (r.segment_pct[0], r.segment_pct[-1])
    assert r.change_pct == pytest.approx(r.last_pct - r.first_pct)
    # order=None means "already in run order"
    same = effect_drift(sd)
    assert same.to_dict() == r.to_dict()


def test_moving_effect_is_reported_in_plain_words() -> None:
    rng = np.random.default_rng(1)
    d = np.log1p(np.r_[np.full(60, -0.081), np.full(60, -0.023)]) + rng.normal(0, 0.01, 120)
    r = effect_drift(d)
    assert r.checked and r.drifting and r.p_value < 1e-6
    assert r.first_pct == pytest.approx(-8.1, abs=0.5)
    assert r.last_pct == pytest.approx(-2.3, abs=0.5)
    assert r.reading.startswith("the effect changed during the run: -8.")
    assert "in the first third" in r.reading and "rerun, or report the segments" in r.reading
    steady = effect_drift(np.log(0.96) + rng.normal(0, 0.01, 120))
    assert not steady.drifting
    assert steady.reading.startswith("no change of the effect during the run detected")
    halves = effect_drift(d, segments=2)
    assert halves.segment_sizes == (60, 60) and "first half" in halves.reading


def test_to_dict_is_json_safe() -> None:
    import json

    r = effect_drift(np.zeros(30))  # all equal: no evidence, no NaN p-values
    assert not r.drifting and r.trend_p == 1.0 and r.split_p == 1.0
    assert isinstance(r, Drift)
    json.dumps(r.to_dict(), allow_nan=False)
    short = effect_drift([0.1, 0.2]).to_dict()
    json.dumps(short, allow_nan=False)
    assert short["rho"] is None and short["segment_pct"] == []


@pytest.mark.parametrize("n", [0, 1, 5, MIN_PAIRS - 1])
def test_small_n_says_not_enough_pairs_never_raises(n: int) -> None:
    r = effect_drift(np.linspace(-0.1, 0.1, n))
    assert not r.checked and not r.drifting and r.n == n
    assert r.reading.startswith("not enough pairs to check drift")
    assert math.isnan(r.p_value)


def test_smallest_checked_run_and_segment_limits() -> None:
    r = effect_drift(np.linspace(-0.1, 0.1, MIN_PAIRS))  # a perfect trend in 12 pairs
    assert r.checked and r.segment_sizes == (4, 4, 4)
    assert r.rho == pytest.approx(1.0) and r.drifting
    assert min_pairs(5) == 20
    assert not effect_drift(np.linspace(0, 1, 19), segments=5).checked
    assert effect_drift(np.linspace(0, 1, 20), segments=5).checked
    with pytest.raises(StatsInputError):
        effect_drift(np.zeros(30), segments=1)
    with pytest.raises(StatsInputError):
        effect_drift(np.zeros(30), alpha=0.0)
    with pytest.raises(StatsInputError):
        effect_drift(np.r_[np.zeros(29), np.inf])
    with pytest.raises(StatsInputError):
        effect_drift(np.zeros(30), np.arange(29))


def test_nan_pairs_are_dropped() -> None:
    d = np.linspace(-0.1, 0.1, 40)
    d[[3, 17]] = np.nan
    order = np.arange(40.0)
    order[5] = np.nan
    r = effect_drift(d, order)
    assert r.n == 37 and r.checked


def test_fast_at_250k_pairs() -> None:
    rng = np.random.default_rng(0)
    d = rng.normal(-0.01, 0.03, 250_000)
    effect_drift(d[:1000])  # warm-up
    t0 = time.perf_counter()
    r = effect_drift(d, np.arange(d.size))
    elapsed = time.perf_counter() - t0
    assert r.n == 250_000 and not r.drifting
    # not a speed claim (about 0.2 s here): a guard against a quadratic rewrite, which would
    # take minutes at this size
    assert elapsed < 30.0, f"{elapsed:.2f} s"


# --- Monte-Carlo validation -------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.01, 0.05])
@pytest.mark.parametrize("n", [12, 30, 100, 1000])
def test_false_alarms_within_alpha_constant_effect_heavy_tails(n: int, alpha: float) -> None:
    rng = np.random.default_rng(1000 + n + int(100 * alpha))
    d = math.log(0.96) + _noise(rng, (N_SIM, n), "t3") - _noise(rng, (N_SIM, n), "t3")
    rate = float(np.mean(drift_pvalues(d)["p"] < alpha))
    assert rate <= alpha + mc_tol(alpha), f"false alarms {rate:.4f} at alpha {alpha}, n {n}"


def test_drift_common_to_both_arms_cancels_in_the_pairs() -> None:
    """The machine slows 20% over the run, jumps 8% at 2/3 and has shared block effects:
    all of it hits both arms of a block, so the paired log-ratio does not see it."""
    rng = np.random.default_rng(42)
    n, alpha = 150, 0.01
    shape = (N_SIM, n)
    t = np.linspace(0, 1, n)
    common = (math.log(100) + rng.uniform(0.0, 0.2, (N_SIM, 1)) * t
              + 0.08 * (t >= 2 / 3) + rng.normal(0, 0.02, shape))
    a_first = rng.random(shape) < 0.5  # random order in each block, 1% penalty for going first
    base = common + 0.01 * a_first + _noise(rng, shape, "t3")
    cand = common + math.log(0.96) + 0.01 * ~a_first + _noise(rng, shape, "t3")
    rate = float(np.mean(drift_pvalues(cand - base)["p"] < alpha))
    assert rate <= alpha + mc_tol(alpha), f"false alarms {rate:.4f}"
    # the drift is real: one arm on its own is flagged nearly always
    assert float(np.mean(drift_pvalues(cand)["p"] < alpha)) > 0.95


@pytest.mark.parametrize(
    ("noise_on", "kind", "n", "floor"),
    [
        # noise of SD 3.3% on the paired log-ratio itself. Heavy tails: ~0.97.
        ("pair", "t3", 100, 0.80),
        # Gaussian: ~0.77. Not a weakness of the rank tests: the parametric regression slope
        # t-test at the same Bonferroni level (0.005) has noncentrality 3.7 and power ~0.79;
        # 100 Gaussian pairs at this SD do not carry enough information for 0.8.
        ("pair", "normal", 100, 0.72),
        # 3.3% on every trial (as in test_stats_validation): the pair's SD is 4.7%, so more
        # pairs are needed: ~0.40 at 100, ~0.89 at 250 (Gaussian); ~0.65 / 0.99 with t3.
        ("trial", "normal", 100, 0.33),
        ("trial", "normal", 250, 0.82),
        ("trial", "t3", 250, 0.90),
    ],
)
def test_power_against_an_effect_fading_from_6_to_2_percent(
    noise_on: str, kind: str, n: int, floor: float
) -> None:
    rng = np.random.default_rng(n + len(kind) + len(noise_on))
    shape = (N_SIM // 2, n)
    noise = _noise(rng, shape, kind)
    if noise_on == "trial":
        noise = noise - _noise(rng, shape, kind)
    r = drift_pvalues(_moving(n) + noise)
    power = float(np.mean(r["p"] < 0.01))
    assert power >= floor, f"power {power:.3f} ({noise_on} noise {kind}, {n} pairs)"
    # the effect fades, so the trend is positive (towards zero) when detected
    assert np.all(r["rho"][r["p"] < 0.01] > 0)


def test_step_in_the_second_half_is_caught() -> None:
    """A compaction storm halfway: the gain drops from -5% to -1% for the second half."""
    rng = np.random.default_rng(9)
    n = 100
    step = np.log1p(np.where(np.arange(n) < n // 2, -0.05, -0.01))
    r = drift_pvalues(step + _noise(rng, (N_SIM // 2, n), "t3"))
    assert float(np.mean(r["p"] < 0.01)) >= 0.9


def test_batch_path_matches_single_calls() -> None:
    rng = np.random.default_rng(3)
    d = _moving(40) + _noise(rng, (20, 40), "t3")
    r = drift_pvalues(d)
    for i in range(20):
        one = effect_drift(d[i])
        assert one.p_value == pytest.approx(r["p"][i], rel=1e-12)
        assert one.drifting == bool(r["p"][i] < 0.01)


def test_signedrank_is_the_segment_estimator() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(0, 0.03, 3000)
    r = effect_drift(d)
    hl = signedrank.hodges_lehmann(d[None, :1000])[0]
    assert r.first_pct == pytest.approx(100 * math.expm1(hl), rel=1e-12)
