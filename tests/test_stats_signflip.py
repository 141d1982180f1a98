"""The sign-flip signed-rank p against scipy.stats.wilcoxon's own permutation test: the same
numbers, bit for bit, on samples with ties and zeros at every n up to 13, every alternative;
and pvalue() takes it exactly where scipy would (and only there)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hugelab.stats import signedrank, signflip


def _samples(seed: int, count: int, sizes: tuple[int, int]):
    """Tied or zero samples; scipy's reference evaluates its statistic once per flip and row,
    so its cost doubles with each n (the quick tier keeps n <= 8)."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        n, rows = int(rng.integers(*sizes)), int(rng.integers(1, 3))
        shape = i % 4
        if shape == 0:  # small counts: ties and zeros
            d = rng.integers(-3, 4, size=(rows, n)).astype(float)
        elif shape == 1:  # one zero per row
            d = rng.normal(size=(rows, n))
            d[:, 0] = 0.0
        elif shape == 2:  # rounded: ties
            d = np.round(rng.normal(size=(rows, n)), 1)
        else:  # a repeated value
            d = rng.normal(size=(rows, n)) * 1e-3
            d[:, -1] = d[:, 0]
        d = d[np.any(d != 0, axis=1)]
        if len(d):
            yield d


def _agree(samples, alternative: str) -> int:
    checked = 0
    for d in samples:
        if not signflip.applies(d):
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            ref = np.asarray(stats.wilcoxon(d, axis=1, alternative=alternative).pvalue)
        assert np.array_equal(signflip.pvalue(d, alternative), ref), d
        checked += 1
    return checked


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_equals_scipys_permutation_test_bit_for_bit(alternative):
    assert _agree(_samples(7, 60, (1, 9)), alternative) > 40


@pytest.mark.slow
def test_equals_scipy_up_to_its_bound_of_13():
    assert _agree(_samples(8, 12, (10, 14)), "two-sided") > 8


def test_applies_only_where_scipy_permutes():
    assert signflip.applies(np.array([[1.0, 2.0, 0.0]]))  # a zero
    assert signflip.applies(np.array([[1.0, -1.0, 2.0]]))  # a tie in |d|
    assert not signflip.applies(np.array([[1.0, -2.0, 3.0]]))  # scipy: exact distribution
    assert not signflip.applies(np.zeros((1, 14)) + np.arange(14))  # n > 13: scipy's normal
    # a tie in one row sends the whole batch to the permutation test, as scipy does
    batch = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 2.0]])
    assert signflip.applies(batch)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = np.asarray(stats.wilcoxon(batch, axis=1).pvalue)
    assert np.array_equal(signedrank.pvalue(batch), ref)


def test_all_zero_rows_keep_p_one_beside_tied_rows():
    d = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 2.0, 3.0]])
    p = signedrank.pvalue(d)
    assert p[0] == 1.0 and 0.0 < p[1] <= 1.0


def test_refuses_past_its_bound():
    with pytest.raises(ValueError):
        signflip.pvalue(np.ones((1, 14)))
