"""Repetitions within boots: the components estimator, Kalibera & Jones' k, and by simulation
that the recommended k buys a more precise boot mean per second of wall time than k = 1."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.stats import StatsInputError
from hugelab.stats.components import (
    K_MAX,
    BootComponents,
    RepBoot,
    boot_components,
    costs,
    from_boots,
    pooled,
    repetitions,
    scale_pair_sd,
)


def simulate(rng: np.random.Generator, sizes: np.ndarray, sd_b: float, sd_w: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """Log values of boots of the given sizes: a boot effect plus noise per trial."""
    labels = np.repeat(np.arange(sizes.size), sizes)
    x = rng.normal(0, sd_b, sizes.size)[labels] + rng.normal(0, sd_w, labels.size)
    return x, labels


def comps(var_b: float, var_w: float, boots: int = 30) -> BootComponents:
    return BootComponents(boots=boots, trials=5 * boots, mean_k=5.0, var_between=var_b,
                          var_within=var_w, notes=())


@pytest.mark.parametrize(("sd_b", "sd_w"), [(0.02, 0.05), (0.05, 0.01), (0.03, 0.03)])
def test_estimator_recovers_known_components_on_average(sd_b: float, sd_w: float) -> None:
    rng = np.random.default_rng(11)
    est_b, est_w = [], []
    for _ in range(400):
        sizes = rng.integers(3, 8, 20)  # unequal boots: n0 matters
        x, labels = simulate(rng, sizes, sd_b, sd_w)
        c = boot_components(x, labels)
        assert c.boots == 20 and c.trials == sizes.sum()
        assert 0.0 <= c.share_between <= 1.0 and c.share_between + c.share_within == \
            pytest.approx(1.0)
        est_b.append(c.var_between)
        est_w.append(c.var_within)
    # unbiased before the clip at 0; the clip adds a little upward bias when sigma_b is small
    assert np.mean(est_w) == pytest.approx(sd_w**2, rel=0.03)
    assert np.mean(est_b) == pytest.approx(sd_b**2, rel=0.08)


def test_share_between_stays_in_range_at_the_edges() -> None:
    rng = np.random.default_rng(2)
    x, labels = simulate(rng, np.full(10, 4), 0.0, 0.05)  # no boot effect at all
    shares = [boot_components(*simulate(rng, np.full(10, 4), 0.0, 0.05)).share_between
              for _ in range(50)]
    assert all(0.0 <= s <= 1.0 for s in shares) and min(shares) == 0.0
    zero = boot_components(np.zeros(8), np.repeat(np.arange(4), 2))
    assert zero.var_between == zero.var_within == zero.share_between == 0.0
    only_b = boot_components(np.repeat([0.0, 0.1, 0.2], 3), np.repeat(np.arange(3), 3))
    assert only_b.share_between == pytest.approx(1.0) and only_b.var_within < 1e-20
    assert boot_components(x, labels).to_dict()["share_between"] is not None


def test_estimator_input_errors() -> None:
    with pytest.raises(StatsInputError, match="at least 2 boots"):
        boot_components([0.1, 0.2], [0, 1])  # no boot holds two trials
    with pytest.raises(StatsInputError, match="label every"):
        boot_components([0.1, 0.2, 0.3], [0, 1])
    with pytest.raises(StatsInputError, match="positive"):
        from_boots([[1.0, -2.0], [1.0, 1.0]])
    with pytest.raises(StatsInputError, match="costs"):
        comps(1e-4, 1e-3).best_k(7.0, 0.0)


@pytest.mark.parametrize(("var_b", "var_w", "c_boot", "c_trial"),
                         [(1e-4, 2.5e-3, 7.0, 1.0), (4e-4, 4e-4, 7.0, 2.0),
                          (1e-3, 1e-5, 5.0, 1.0), (2.5e-5, 2.5e-3, 1.0, 3.0)])
def test_best_k_is_the_rounded_closed_form(var_b: float, var_w: float, c_boot: float,
                                           c_trial: float) -> None:
    c = comps(var_b, var_w)
    closed = math.sqrt(c_boot / c_trial * var_w / var_b)
    assert c.optimum_k(c_boot, c_trial) == pytest.approx(closed)
    k = c.best_k(c_boot, c_trial)
    assert k in (max(1, math.floor(closed)), max(1, math.ceil(closed)))
    # the better neighbour is the best integer: brute force over every allowed k
    brute = min(range(1, K_MAX + 1), key=lambda j: c.cost_var(j, c_boot, c_trial))
    assert k == brute
    assert c.boot_mean_var(k) == pytest.approx(var_b + var_w / k)
    assert c.choose_k(c_boot, c_trial).gain_vs_k1 >= 1.0


def test_best_k_caps_and_says_why() -> None:
    flat = comps(0.0, 1e-3)
    choice = flat.choose_k(7.0, 1.0)
    assert choice.k == K_MAX and math.isinf(choice.optimum)
    assert any("do not differ" in n for n in choice.notes)
    assert choice.to_dict()["optimum"] is None
    big = comps(1e-8, 1e-2).choose_k(10.0, 1.0)
    assert big.k == K_MAX and any("capped" in n for n in big.notes)
    assert comps(1e-3, 0.0).best_k(7.0, 1.0) == 1  # nothing varies within a boot
    assert any("rough" in n for n in comps(1e-4, 1e-3, boots=5).choose_k(7, 1).notes)


def test_scaled_pair_sd_matches_simulated_pairs() -> None:
    """Both arms with the same components: the paired SD at k follows the formula."""
    rng = np.random.default_rng(4)
    sd_b, sd_w, k0, k = 0.01, 0.04, 2, 10
    c = comps(sd_b**2, sd_w**2)

    def pair_sd(kk: int) -> float:
        n = 20000
        arm = [rng.normal(0, sd_b, n) + rng.normal(0, sd_w, (kk, n)).mean(axis=0)
               for _ in range(2)]
        return float(np.std(arm[1] - arm[0], ddof=1))

    sd0 = pair_sd(k0)
    assert scale_pair_sd(sd0, c, k0, k) == pytest.approx(pair_sd(k), rel=0.03)
    assert scale_pair_sd(sd0, c, k0, k0) == pytest.approx(sd0)
    assert scale_pair_sd(0.05, comps(0.0, 0.0), 1, 5) == 0.05


def test_pooled_weights_by_boots() -> None:
    p = pooled([comps(1e-4, 1e-3, boots=10), comps(3e-4, 3e-3, boots=30)])
    assert p.boots == 40 and p.var_between == pytest.approx(2.5e-4)
    assert p.var_within == pytest.approx(2.5e-3)


def test_costs_from_boot_rows() -> None:
    boots = [RepBoot((1.0, 1.1), (2.0, 2.2), 12.0, 4.2), RepBoot((1.0, 0.9), (1.8, 2.0), 10.0,
                                                                  None)]
    c_boot, c_trial = costs(boots)  # type: ignore[misc]
    assert c_boot == pytest.approx(((12 - 4.2) + (10 - 3.8)) / 2)
    assert c_trial == pytest.approx(2.0)
    assert costs([RepBoot((1.0, 1.0), (1.0, 1.0), None, None)]) is None
    r = repetitions(boots).to_dict()
    assert r["k_run"] == 2 and r["boots"] == 2 and r["recommended"]["k"] >= 1


def test_recommended_k_buys_precision_per_second_of_wall_time() -> None:
    """High within-boot noise and costly boots: a pilot at k0 = 3 recommends k; for the same
    wall-time budget, boots of k trials give a boot mean of smaller variance than k = 1."""
    rng = np.random.default_rng(7)
    sd_b, sd_w, c_boot, c_trial = 0.005, 0.05, 7.0, 1.0  # ~7 s to boot a TCG guest, 1 s trials
    x, labels = simulate(rng, np.full(20, 3), sd_b, sd_w)
    pilot = boot_components(x, labels)
    k = pilot.best_k(c_boot, c_trial)
    assert 5 <= k <= K_MAX
    budget_s = 900.0

    def var_of_mean(kk: int, n_sim: int = 3000) -> float:
        boots = int(budget_s // (c_boot + kk * c_trial))
        b = rng.normal(0, sd_b, (n_sim, boots))
        w = rng.normal(0, sd_w / math.sqrt(kk), (n_sim, boots))  # mean of kk trials' noise
        return float(np.var((b + w).mean(axis=1), ddof=1))

    v1, vk = var_of_mean(1), var_of_mean(k)
    assert vk < 0.5 * v1, (k, v1, vk)
    truth = BootComponents(20, 60, 3.0, sd_b**2, sd_w**2, ())
    predicted = truth.cost_var(k, c_boot, c_trial) / truth.cost_var(1, c_boot, c_trial)
    assert vk / v1 == pytest.approx(predicted, rel=0.25)  # boots are whole: budget rounds
