"""Monte-Carlo validation of design 'interleaved': the trial (block) stays the unit.

One hugelab-mem process holds a buffer per arm and measures them in alternating windows:
rounds in a random order, each followed by its mirror (ABBA...), W windows per buffer. Each
arm's trial value is the geometric mean of its windows (``reps_geomean``), so a block's paired
log-ratio is d_b = mean_w(log B_w) - mean_w(log A_w), and hugelab's paired analysis (signed
rank, Hodges-Lehmann, TOST) runs on the d_b of the blocks.

Noise model (log scale), per simulated experiment x block x window:
- placement: one offset per buffer per trial (its physical memory), SD ``placement`` (1-4%);
  it does not cancel between buffers and is why the trial is the unit;
- drift: a random walk over the trial's window slots, shared by every buffer of the process;
  it cancels in A-B when windows alternate, not when A's trial runs before B's;
- switch cost: a window that follows the other buffer's window pays 3% (caches, TLB);
- window noise: t3 scaled to SD ``window_sd`` (10-15%) plus 0.5% of windows stalled by +50%.

Tolerances as in test_stats_validation: 3 Monte-Carlo SDs above nominal. Seeds are fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.stats import compare, signedrank
from hugelab.stats.paired import analyse, verdict_codes, verdicts
from hugelab.workloads.hugelab_mem.output import reps_geomean
from tests import simnoise

N_SIM = 4000
N_BLOCKS = 20
W = 24  # windows per buffer per trial (e.g. 20 ms windows, two buffers, ~1 s trial)
SWITCH_COST = 0.03


def _window_noise(
    rng: np.random.Generator, shape: tuple[int, ...], sd: float, stalls: float
) -> np.ndarray:
    x = rng.standard_t(3, shape) * sd / math.sqrt(3)  # SD = sd, heavy tails
    return x + (rng.random(shape) < stalls) * 0.5


def _drift(rng: np.random.Generator, shape: tuple[int, ...], step: float) -> np.ndarray:
    """Random walk over the 2W window slots of each trial (shape ... x 2W)."""
    return np.cumsum(rng.normal(0, step, (*shape, 2 * W)), axis=-1)


def simulate(
    seed: int,
    *,
    design: str = "interleaved",
    n_sim: int = N_SIM,
    n_blocks: int = N_BLOCKS,
    effect: float = 0.0,
    placement: float = 0.02,
    drift_step: float = 0.01,
    window_sd: float = 0.12,
    stalls: float = 0.005,
) -> tuple[np.ndarray, np.ndarray]:
    """Log window values of buffer A (baseline) and B (candidate): (n_sim, n_blocks, W) each.

    ``design="interleaved"``: round r occupies slots 2r, 2r+1; even rounds take a random order
    and odd rounds mirror it. ``design="paired"``: A's W windows then B's (or B's then A's, the
    order random per block), the drift walking on between the two trials.
    """
    rng = np.random.default_rng(seed)
    shape = (n_sim, n_blocks)
    drift = _drift(rng, shape, drift_step)
    a_first = rng.random((*shape, W // 2)) < 0.5
    if design == "interleaved":
        a_first = np.repeat(a_first, 2, axis=-1)
        a_first[..., 1::2] = ~a_first[..., 1::2]  # the mirror round
        r = np.arange(W)
        slot_a = 2 * r + np.where(a_first, 0, 1)
        slot_b = 2 * r + np.where(a_first, 1, 0)
        # a window pays the switch cost when the slot before it held the other buffer
        is_a = np.stack([a_first, ~a_first], axis=-1).reshape(*shape, 2 * W)
        switched = np.concatenate(
            [np.zeros((*shape, 1), bool), is_a[..., 1:] != is_a[..., :-1]], axis=-1
        )
        switch_a = np.take_along_axis(switched, slot_a, axis=-1)
        switch_b = np.take_along_axis(switched, slot_b, axis=-1)
    elif design == "paired":
        first = a_first[..., :1]
        slot_a = np.where(first, np.arange(W), W + np.arange(W))
        slot_b = np.where(first, W + np.arange(W), np.arange(W))
        switch_a = switch_b = np.zeros((*shape, W), bool)  # separate processes
    else:
        raise ValueError(design)
    place_a = rng.normal(0, placement, (*shape, 1))
    place_b = rng.normal(0, placement, (*shape, 1))
    log_a = (place_a + np.take_along_axis(drift, slot_a, axis=-1) + SWITCH_COST * switch_a
             + _window_noise(rng, (*shape, W), window_sd, stalls))
    log_b = (place_b + np.take_along_axis(drift, slot_b, axis=-1) + SWITCH_COST * switch_b
             + _window_noise(rng, (*shape, W), window_sd, stalls) + math.log1p(effect))
    return log_a + math.log(80.0), log_b + math.log(80.0)  # ~80 ns per access


def per_block(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trial values as hugelab-mem's parser makes them: geometric mean of each buffer's windows."""
    return np.exp(log_a.mean(axis=-1)), np.exp(log_b.mean(axis=-1))


def test_simulated_schedule_is_abba_and_values_match_the_parser() -> None:
    log_a, log_b = simulate(
        0, n_sim=50, n_blocks=2, placement=0, drift_step=0, window_sd=1e-9, stalls=0
    )
    # no noise: a window costs SWITCH_COST exactly when it follows the other buffer's window.
    # Rounds come in mirrored pairs XYYX: Y switches once per pair, X once, plus once more when
    # the previous pair ended with the other buffer (never in the trial's first pair)
    for log in (log_a, log_b):
        switched = np.round((log - math.log(80.0)) / SWITCH_COST).astype(int)
        assert set(np.unique(switched)) <= {0, 1}
        per_pair = switched.reshape(*switched.shape[:-1], W // 2, 2).sum(axis=-1)
        assert np.all(per_pair[..., 0] == 1) and set(np.unique(per_pair)) == {1, 2}
    a, _ = simulate(1, n_sim=2, n_blocks=3)
    values, _ = per_block(*simulate(1, n_sim=2, n_blocks=3))
    assert values[1, 2] == pytest.approx(reps_geomean(np.exp(a[1, 2]).tolist()), rel=1e-12)


@pytest.mark.parametrize("alpha", [0.05, 0.01])
@pytest.mark.parametrize("placement", [0.01, 0.04])
def test_aa_false_positive_rate_with_trial_as_unit(alpha: float, placement: float) -> None:
    seed = 100 + int(alpha * 100) + int(placement * 1000)
    base, cand = per_block(*simulate(seed, placement=placement, window_sd=0.15))
    v = verdicts(base, cand, alpha=alpha)
    fp = np.mean((v == "faster") | (v == "slower"))
    assert fp <= alpha + simnoise.mc_tol(alpha, N_SIM), f"false positives {fp:.4f} at {alpha}"
    # the batch path is the rule compare() applies to one run's trial values
    for i in range(10):
        assert compare(base[i], cand[i], alpha=alpha).verdict == v[i]


@pytest.mark.parametrize(("placement", "floor"), [(0.02, 2.0), (0.04, 5.0)])
def test_windows_as_units_are_anti_conservative_with_placement_effects(
    placement: float, floor: float
) -> None:
    """Every window pair as an independent unit ignores that a trial's placement is shared by
    all its windows: the false-positive rate blows up (Kalibera & Jones), while the per-block
    analysis of the same data keeps alpha. Only p matters here: a faster/slower verdict is
    p < alpha (with a non-zero estimate), so the naive rate is mean(p < alpha)."""
    alpha, n_sim = 0.05, 2000
    log_a, log_b = simulate(7 + int(placement * 100), n_sim=n_sim, placement=placement)
    d_windows = (log_b - log_a).reshape(n_sim, -1)  # 480 "pairs" per experiment
    naive = np.mean(signedrank.pvalue(d_windows) < alpha)
    d_blocks = log_b.mean(axis=-1) - log_a.mean(axis=-1)
    r = analyse(d_blocks, alpha=alpha, margin=0.01)
    v = verdict_codes(r["p"], r["tost_p"], r["hl"], alpha, "lower")
    honest = np.mean((v == "faster") | (v == "slower"))
    assert honest <= alpha + simnoise.mc_tol(alpha, n_sim)
    assert naive > floor * alpha, f"naive window-level false positives {naive:.3f}"


def test_interleaving_cancels_drift_that_paired_trials_pay_for() -> None:
    """Same placement (1%), window noise (12%) and measuring time per arm; drift a random walk
    of 1.5% per 20 ms slot (~10% over a trial). It cancels in alternating windows but not
    between A's trial and B's trial (design 'paired', order random per block). Common random
    numbers (one seed: the drift's step only scales the same draws) isolate what drift adds.
    """

    def var_of_d(design: str, step: float) -> float:
        log_a, log_b = simulate(
            21, design=design, n_sim=1000, placement=0.01, window_sd=0.12, drift_step=step
        )
        return float(np.var(log_b.mean(axis=-1) - log_a.mean(axis=-1)))

    floor = var_of_d("interleaved", 0.0)  # placement + window noise + switch cost
    interleaved = var_of_d("interleaved", 0.015)
    paired = var_of_d("paired", 0.015)
    added_interleaved, added_paired = interleaved - floor, paired - var_of_d("paired", 0.0)
    # ~1% of the drift variance survives interleaving (adjacent slots' steps), all of it pairing
    assert added_interleaved < 0.05 * added_paired, (added_interleaved, added_paired)
    # SD of d_b: ~3.9% interleaved vs ~7.2% paired trials; blocks needed scale with variance,
    # so paired trials need >2.5x as many blocks for the same power here
    assert math.sqrt(paired / interleaved) > 1.6, (paired, interleaved)
    assert interleaved < 1.05 * floor


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_interval_covers_a_true_effect_at_nominal_rate(alpha: float) -> None:
    true = math.log(0.85)  # candidate 15% faster
    log_a, log_b = simulate(31 + int(alpha * 100), effect=-0.15, placement=0.03, window_sd=0.15)
    d = log_b.mean(axis=-1) - log_a.mean(axis=-1)
    r = analyse(d, alpha=alpha, margin=0.01)  # lo/hi: the interval compare() reports
    coverage = np.mean((r["lo"] <= true) & (true <= r["hi"]))
    assert coverage >= 1 - alpha - simnoise.mc_tol(alpha, N_SIM), f"coverage {coverage:.4f}"
    assert coverage <= 1 - alpha + 0.02  # exact intervals are >= nominal, not uselessly wide
    assert np.median(r["hl"]) == pytest.approx(true, abs=0.003)
    v = verdict_codes(r["p"], r["tost_p"], r["hl"], alpha, "lower")
    assert np.mean(v == "faster") > 0.99
