"""The unpaired two-sample shift (hugelab.stats.unpaired): exact against tables, its interval's
coverage and its test's false positives by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hugelab.stats import compare_unpaired, two_sample_shift
from hugelab.stats.unpaired import interval_rank, u_null_cdf


def test_two_sample_shift_of_a_scaled_copy_is_exact():
    a = [1.0, 2.0, 3.0, 5.0, 8.0]
    r = two_sample_shift(a, [x * 1.1 for x in a], 0.05)
    assert r["hl"] == pytest.approx(math.log(1.1))
    assert r["lo"] <= r["hl"] <= r["hi"] and r["method"] == "exact"


def test_exact_interval_rank_matches_tables():
    # two-sided 5% critical value of U for m = n = 10 is 23 -> interval D(24) .. D(77)
    assert interval_rank(10, 10, 0.05) == (24, "exact")
    assert interval_rank(5, 5, 0.05) == (3, "exact")  # critical value 2
    assert interval_rank(3, 3, 0.05)[0] == 0  # 2/20 > 0.05: no bounded interval
    cdf = u_null_cdf(4, 6)
    assert cdf[-1] == pytest.approx(1.0) and cdf[0] == pytest.approx(1 / math.comb(10, 4))
    # exact and normal approximation agree where they meet
    k_exact, _ = interval_rank(50, 50, 0.05)
    z = 1.959963984540054
    k_normal = math.floor(1250 - z * math.sqrt(2500 * 101 / 12) - 0.5) + 1
    assert abs(k_exact - k_normal) <= 2
    assert interval_rank(60, 60, 0.05)[1] == "normal"


def test_interval_coverage_by_simulation():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        a = np.exp(rng.normal(0, 0.02, 12))
        b = np.exp(rng.normal(math.log(0.97), 0.02, 15))
        r = two_sample_shift(a, b, 0.1)
        hits += r["lo"] <= math.log(0.97) <= r["hi"]
    assert 0.85 <= hits / 400 <= 0.96


def test_false_positives_by_simulation():
    """Two runs of one arm with no shift: 'B faster' or 'B slower' at most about alpha of the
    time, and the interval holds zero about 1 - alpha of the time."""
    rng = np.random.default_rng(11)
    sims, alpha = 400, 0.05
    said = covered = 0
    for _ in range(sims):
        a = list(np.exp(rng.normal(0, 0.02, 10)))
        b = list(np.exp(rng.normal(0, 0.02, 14)))
        r = compare_unpaired("thp", a, b, confidence=1 - alpha, unit="s", better="lower")
        said += r.verdict != "inconclusive"
        covered += r.ci_low_pct <= 0 <= r.ci_high_pct
    assert said / sims <= 0.09
    assert 0.91 <= covered / sims <= 0.99


def test_a_known_shift_reads_as_faster_or_slower_by_better():
    a = [10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.15, 9.85]
    b = [x * 0.9 for x in a]
    lower = compare_unpaired("thp", a, b, confidence=0.95, unit="s", better="lower")
    higher = compare_unpaired("thp", a, b, confidence=0.95, unit="ops/s", better="higher")
    assert lower.effect_pct == pytest.approx(-10.0)
    assert (lower.verdict, higher.verdict) == ("B faster", "B slower")
    assert compare_unpaired("thp", a, b, confidence=0.95, unit=None, better=None).verdict == \
        "B lower"
    assert math.isfinite(lower.ci_low_pct) and lower.to_dict()["ci_method"] == "exact"
