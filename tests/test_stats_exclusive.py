"""The report's correction across comparisons (hugelab.stats.multiple.exclusive): both claims of
every comparison in one step-down, each step's multiplier the comparisons with a claim left
(a comparison's "no effect" and "an effect of at least the margin" cannot both be true).

Checked against closed testing by brute force, against Bonferroni per comparison (what
`--until-verdict` spends), and by simulation of the configuration where two separate Holm
families (the old adjustment) let the family-wise error exceed alpha."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hugelab.stats import paired
from hugelab.stats._util import StatsInputError
from hugelab.stats.multiple import adjust, exclusive, holm


def test_a_hand_case_step_by_step():
    # sorted: D_a 0.001 (2 comparisons left) -> 0.002; E_b 0.01 (still both: D_b and E_a are
    # left) -> 0.02; D_b 0.5 -> 1; E_a 0.9 (only a left) -> max(0.9, 1) = 1
    p, t = exclusive([0.001, 0.5], [0.9, 0.01])
    np.testing.assert_allclose(p, [0.002, 1.0])
    np.testing.assert_allclose(t, [1.0, 0.02])
    # one comparison: its two claims are never both true, so nothing is adjusted
    np.testing.assert_allclose(exclusive([0.01], [0.02]), [[0.01], [0.02]])
    # every difference tiny, every equivalence not: each comparison's equivalence null may
    # still be true, so all k count at every step (Holm on the three alone: 0.003, 0.004, 0.004)
    np.testing.assert_allclose(exclusive([0.001, 0.002, 0.003], [0.9] * 3)[0],
                               [0.003, 0.006, 0.009])
    p, t = exclusive([0.001, np.nan], [0.9, 0.01])  # NaN stays NaN and counts
    assert np.isnan(p[1]) and p[0] == pytest.approx(0.002) and t[1] == pytest.approx(0.02)
    rows = exclusive([[0.001, 0.5], [0.5, 0.001]], [[0.9, 0.01], [0.01, 0.9]])
    np.testing.assert_allclose(rows[0], [[0.002, 1.0], [1.0, 0.002]])  # rows are families


def test_a_comparison_without_an_equivalence_claim_counts_only_while_its_difference_is_left():
    # a (difference only) 0.001 -> x2 = 0.002, then a is done; b's claims alone after it:
    # its equivalence 0.01 -> x1, its difference 0.5 -> x1
    p, t = exclusive([0.001, 0.5], [0.3, 0.01], [False, True])
    np.testing.assert_allclose(p, [0.002, 0.5])
    assert np.isnan(t[0]) and t[1] == pytest.approx(0.01)
    # a p of 1 standing in for the missing claim (the old way) kept a in the count: 0.02
    assert exclusive([0.001, 0.5], [1.0, 0.01])[1][1] == pytest.approx(0.02)
    # every comparison a difference claim only: plain Holm
    d = [0.01, 0.04, 0.03]
    np.testing.assert_allclose(exclusive(d, [0.0] * 3, [False] * 3)[0], holm(d))
    with pytest.raises(StatsInputError, match="one equivalence flag per comparison"):
        exclusive([0.1, 0.2], [0.1, 0.2], [True, False, True])
    # all marked: the same as no mask
    np.testing.assert_allclose(exclusive([0.001, 0.5], [0.9, 0.01], [True, True]),
                               exclusive([0.001, 0.5], [0.9, 0.01]))


def _closure_rejects(p: np.ndarray, t: np.ndarray, alpha: float,
                     has_t: np.ndarray | None = None) -> set[tuple[int, int]]:
    """Closed testing with Bonferroni local tests over every intersection that can be true
    (at most one claim of each comparison): claim (j, kind) is rejected when every such
    intersection holding it has a p-value at or below alpha / its size. A comparison whose
    `has_t` is False has its difference claim only."""
    k = len(p)
    has_t = np.ones(k, dtype=bool) if has_t is None else has_t
    pv = {(j, 0): p[j] for j in range(k)} | {(j, 1): t[j] for j in range(k) if has_t[j]}
    out = set()
    for claim in pv:
        ok = True
        others = [j for j in range(k) if j != claim[0]]
        for r in range(len(others) + 1):
            for comps in itertools.combinations(others, r):
                for kinds in itertools.product((0, 1), repeat=r):
                    inter = [claim, *zip(comps, kinds, strict=True)]
                    if any(c not in pv for c in inter):
                        continue  # a claim that is not made
                    if min(pv[c] for c in inter) > alpha / len(inter):
                        ok = False
        if ok:
            out.add(claim)
    return out


def test_it_rejects_only_what_closed_testing_rejects_and_at_least_bonferroni():
    rng = np.random.default_rng(5)
    alpha, wins = 0.05, 0
    for _ in range(300):
        k = int(rng.integers(1, 5))
        p = np.where(rng.random(k) < 0.5, rng.random(k) * 0.05, rng.random(k))
        t = np.where(rng.random(k) < 0.5, rng.random(k) * 0.05, rng.random(k))
        has_t = rng.random(k) < 0.7  # some comparisons make a difference claim only
        pa, ta = exclusive(p, t, has_t)
        mine = {(j, 0) for j in range(k) if pa[j] <= alpha} | \
            {(j, 1) for j in range(k) if has_t[j] and ta[j] <= alpha}
        assert mine <= _closure_rejects(p, t, alpha, has_t), (p, t, has_t)  # a valid shortcut
        bonf = {(j, 0) for j in range(k) if p[j] * k <= alpha} | \
            {(j, 1) for j in range(k) if has_t[j] and t[j] * k <= alpha}
        assert bonf <= mine, (p, t)  # never weaker than --until-verdict's alpha / k
        wins += len(mine - bonf)
    assert wins > 0  # the step-down gains over Bonferroni somewhere


def _fwer(adjusting, sd: float, reps: int = 20000, alpha: float = 0.05,
          margin: float = 0.01) -> float:
    """One comparison with no effect beside one exactly at the margin, 30 pairs each: the
    share of runs with any false claim (a difference for the first, equivalence for the
    second)."""
    rng = np.random.default_rng(17)
    same = paired.analyse(rng.normal(0, sd, (reps, 30)), alpha=alpha, margin=margin)
    edge = paired.analyse(np.log1p(margin) + rng.normal(0, sd, (reps, 30)), alpha=alpha,
                          margin=margin)
    p = np.stack([same["p"], edge["p"]], axis=-1)
    t = np.stack([same["tost_p"], edge["tost_p"]], axis=-1)
    pa, ta = adjusting(p, t)
    v_same = paired.verdict_codes(pa[:, 0], ta[:, 0], same["hl"], alpha, "lower")
    v_edge = paired.verdict_codes(pa[:, 1], ta[:, 1], edge["hl"], alpha, "lower")
    return float(np.mean(np.isin(v_same, ["faster", "slower"]) | (v_edge == "equivalent")))


@pytest.mark.slow  # a simulation: the Python lane
def test_simulated_familywise_error_within_alpha_where_two_holm_families_exceed_it():
    def two_families(p, t):
        return np.apply_along_axis(holm, 1, p), np.apply_along_axis(holm, 1, t)

    se = (0.05 * 0.95 / 20000) ** 0.5
    for sd in (0.015, 0.02):
        assert _fwer(exclusive, sd) <= 0.05 + 3 * se, sd
    assert _fwer(two_families, 0.015) > 0.05 + 10 * se  # 0.084 here (0.044 above): what it replaced


def test_adjust_rederives_the_verdicts_from_the_adjusted_claims():
    rng = np.random.default_rng(4)
    base = np.exp(rng.normal(0, 0.03, 30))
    twin = paired.compare(base, base * np.exp(rng.normal(0, 0.003, 30)))
    real = paired.compare(base, base * np.exp(rng.normal(-0.05, 0.01, 30)))
    out = adjust({"twin": twin, "real": real})
    p, t = exclusive([twin.p_value, real.p_value], [twin.tost_p, real.tost_p])
    assert out["twin"].p_adjusted == p[0] and out["twin"].tost_p_adjusted == t[0]
    assert out["real"].verdict == "faster" and out["twin"].verdict == "equivalent"
