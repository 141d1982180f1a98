"""paired.compare and the signed-rank core: reference agreement and edge cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from hugelab.stats import StatsInputError, compare, signedrank
from hugelab.stats.paired import block_shifts, verdicts


def _walsh_brute(x: np.ndarray) -> np.ndarray:
    n = x.size
    return np.sort([(x[i] + x[j]) / 2 for i in range(n) for j in range(i, n)])


@pytest.mark.parametrize("n", [6, 11, 50, 51, 120])
def test_pvalue_matches_scipy_and_interval_is_its_dual(n: int) -> None:
    rng = np.random.default_rng(n)
    d = rng.standard_t(3, size=(200, n)) * 0.03 + 0.01
    ours = signedrank.pvalue(d)
    ref = np.array([stats.wilcoxon(row).pvalue for row in d])
    np.testing.assert_allclose(ours, ref, rtol=1e-10)
    _, lo, hi, _ = signedrank.hl_and_interval(d, 0.05)
    excludes_zero = (lo > 0) | (hi < 0)
    np.testing.assert_array_equal(excludes_zero, ours < 0.05)


def test_hodges_lehmann_and_interval_against_brute_force() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=10)
    w = _walsh_brute(x)
    hl, lo, hi, method = signedrank.hl_and_interval(x[None, :], 0.05)
    assert method == "exact"
    assert hl[0] == pytest.approx(np.median(w))
    # n=10, two-sided 5%: the critical value of T is 8 (standard tables), so k = 9
    assert lo[0] == w[8] and hi[0] == w[55 - 9]


def test_exact_selection_for_large_n_matches_materialised() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_t(3, size=2500)
    ranks = np.array([1, 17, 1_000_000, 3_126_250])
    big = signedrank.walsh_order_stats(x[None, :], ranks)[0]
    iu, ju = np.triu_indices(x.size)
    w = np.sort((x[iu] + x[ju]) / 2)
    np.testing.assert_allclose(big, w[ranks - 1], rtol=0, atol=0)


def test_exact_null_distribution_matches_enumeration() -> None:
    n = 8
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(bool)
    t = (signs * np.arange(1, n + 1)).sum(axis=1)
    counts = np.bincount(t, minlength=n * (n + 1) // 2 + 1)
    np.testing.assert_allclose(signedrank.exact_cdf(n), np.cumsum(counts) / 2**n)


def test_clear_speedup_is_faster_and_json_serialisable() -> None:
    rng = np.random.default_rng(3)
    base = 100 * np.exp(rng.normal(0, 0.033, 80))
    cand = base * np.exp(rng.normal(-0.024, 0.02, 80))
    r = compare(base, cand)
    assert r.verdict == "faster"
    assert r.ci_low_pct < r.effect_pct < r.ci_high_pct < 0
    assert r.tost_low_pct >= r.ci_low_pct and r.tost_high_pct <= r.ci_high_pct
    assert r.mean_ratio < 1 and r.median_ratio < 1 and r.ratio_of_means < 1
    assert compare(base, cand, better="higher").verdict == "slower"
    json.dumps(r.to_dict(), allow_nan=False)


def test_equivalence_within_margin() -> None:
    rng = np.random.default_rng(4)
    base = np.exp(rng.normal(0, 0.01, 200))
    cand = base * np.exp(rng.normal(0.0, 0.004, 200))
    r = compare(base, cand, margin=0.01)
    assert r.verdict == "equivalent" and r.within_margin


def test_tost_hand_checked_small_case() -> None:
    # d all inside +/-log(1.01) and 8 of them: each one-sided exact p = 1/2^8
    d = np.array([0.001, -0.002, 0.003, -0.001, 0.002, 0.0005, -0.0015, 0.0025])
    r = compare(np.ones(8), np.exp(d))
    assert r.tost_p == pytest.approx(1 / 256)
    assert r.verdict == "equivalent"


def test_agrees_with_statsmodels_paired_tost_on_clear_cases() -> None:
    sm = pytest.importorskip("statsmodels.stats.weightstats")
    rng = np.random.default_rng(5)
    for shift, expect_equiv in [(0.0, True), (0.03, False)]:
        base = np.exp(rng.normal(0, 0.01, 300))
        cand = base * np.exp(rng.normal(shift, 0.01, 300))
        delta = math.log1p(0.01)
        p_ref = sm.ttost_paired(np.log(cand), np.log(base), -delta, delta)[0]
        r = compare(base, cand)
        assert (r.tost_p < 0.05) == (p_ref < 0.05) == expect_equiv


@pytest.mark.parametrize(
    ("base", "cand"),
    [
        (np.ones(12), np.ones(12)),  # all-zero differences
        (np.array([1.0, 2, 3, 4, 5]), np.array([1.1, 2.1, 3.1, 4.1, 5.1])),  # n < 6
        (np.array([1.0, np.nan, 3, 4, 5, 6, 7]), np.array([1.1, 2, np.nan, 4, 5, 6, 7])),
        (np.array([1.0]), np.array([2.0])),
        (np.array([np.nan, np.nan]), np.array([1.0, 1.0])),
    ],
)
def test_edge_cases_never_crash(base: np.ndarray, cand: np.ndarray) -> None:
    r = compare(base, cand)
    assert r.verdict in ("inconclusive", "equivalent")
    json.dumps(r.to_dict(), allow_nan=False)


def test_all_zero_differences_are_equivalent_not_significant() -> None:
    r = compare(np.full(10, 5.0), np.full(10, 5.0))
    assert r.p_value == 1.0 and r.effect_pct == 0.0 and r.verdict == "equivalent"


def test_small_n_is_inconclusive_with_a_note() -> None:
    r = compare([1.0, 2, 3, 4, 5], [0.5, 1, 1.5, 2, 2.5])
    assert r.verdict == "inconclusive" and any("at least 6" in n for n in r.notes)
    r = compare([1.0, 2, 3, np.nan], [1.0, 2, 3, 4])
    assert r.n_dropped == 1


@pytest.mark.parametrize(
    ("base", "cand", "kwargs"),
    [
        ([1.0, 2.0], [1.0], {}),
        ([1.0, -2.0], [1.0, 2.0], {}),
        ([1.0, np.inf], [1.0, 2.0], {}),
        ([[1.0]], [[1.0]], {}),
        ([1.0, 2.0], [1.0, 2.0], {"better": "faster"}),
        ([1.0, 2.0], [1.0, 2.0], {"alpha": 0.7}),
        ([1.0, 2.0], [1.0, 2.0], {"blocks": [1]}),
    ],
)
def test_bad_input_raises_clear_value_error(base: list, cand: list, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        compare(base, cand, **kwargs)
    with pytest.raises(StatsInputError):
        compare(base, cand, **kwargs)


def test_batch_verdicts_match_single_compare() -> None:
    rng = np.random.default_rng(6)
    base = np.exp(rng.normal(0, 0.03, (40, 25)))
    cand = base * np.exp(rng.normal(-0.01, 0.03, (40, 25)))
    batch = verdicts(base, cand)
    single = [compare(b, c).verdict for b, c in zip(base, cand, strict=True)]
    assert list(batch) == single


def test_blocks_become_units_when_labels_repeat() -> None:
    rng = np.random.default_rng(7)
    labels = np.repeat(np.arange(8), 5)
    boot = np.repeat(rng.normal(0, 0.02, 8), 5)
    base = np.exp(rng.normal(0, 0.01, 40))
    cand = base * np.exp(boot + rng.normal(0, 0.01, 40))
    r = compare(base, cand, blocks=labels)
    assert r.unit == "block" and r.n_units == 8 and r.n == 40
    assert r.design_effect is not None and r.design_effect > 1.5
    assert r.pooling_warning


def _data(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "continuous":
        return rng.standard_t(3, size=n) * 0.03
    if kind == "rounded":  # many ties among values and among Walsh averages
        return np.round(rng.normal(0.01, 0.03, n), 2)
    return rng.integers(-3, 4, size=n) * 0.01  # seven distinct values only


@pytest.mark.slow
@pytest.mark.parametrize("n", [500, 1111, 2000])
@pytest.mark.parametrize("kind", ["continuous", "rounded", "coarse"])
@pytest.mark.parametrize("tiny", [False, True])
def test_fast_selection_equals_brute_force_exactly(
    n: int, kind: str, tiny: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sample-and-bracket selection (used above MATERIALISE_MAX) against every Walsh average."""
    if tiny:  # force many rounds of sampling and bracketing before anything is materialised
        monkeypatch.setattr(signedrank, "SELECT_MATERIALISE", 40)
        monkeypatch.setattr(signedrank, "SAMPLE_SIZE", 64)
    rng = np.random.default_rng(n + len(kind))
    x = _data(kind, n, rng)
    w = _walsh_brute(x)
    m = w.size
    ks = [signedrank.interval_rank(n, a)[0] for a in (0.05, 0.10)]
    ranks = np.array([1, 2, m, m // 2, m // 2 + 1, (m + 1) // 2, *ks, *(m + 1 - k for k in ks),
                      *rng.integers(1, m + 1, 10)])
    got = signedrank.select_walsh(np.sort(x), ranks, seed=int(rng.integers(1000)))
    np.testing.assert_array_equal(got, w[ranks - 1])


@pytest.mark.parametrize("kind", ["continuous", "rounded", "coarse"])
def test_fast_hl_and_intervals_equal_brute_force(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    n = 700
    x = _data(kind, n, rng)
    w = _walsh_brute(x)
    monkeypatch.setattr(signedrank, "MATERIALISE_MAX", 0)  # the large-n path, at a testable n
    hl, ((lo, hi), (tlo, thi)), method = signedrank.hl_and_intervals(x[None, :], (0.05, 0.10))
    assert method == "normal"
    assert hl[0] == np.median(w)
    k, _ = signedrank.interval_rank(n, 0.05)
    k2, _ = signedrank.interval_rank(n, 0.10)
    assert (lo[0], hi[0]) == (w[k - 1], w[w.size - k])
    assert (tlo[0], thi[0]) == (w[k2 - 1], w[w.size - k2])
    one = signedrank.hl_and_interval(x[None, :], 0.10)
    assert (one[0][0], one[1][0], one[2][0]) == (hl[0], tlo[0], thi[0])


def test_block_shifts_match_per_block_estimates() -> None:
    rng = np.random.default_rng(12)
    labels = rng.integers(0, 40, 600)
    d = np.round(rng.normal(0, 0.02, 600), 3)
    uniq, inverse = np.unique(labels, return_inverse=True)
    fast = block_shifts(d, inverse, uniq.size)
    slow = [signedrank.hodges_lehmann(d[inverse == g][None, :])[0] for g in range(uniq.size)]
    np.testing.assert_array_equal(fast, slow)
