"""Repeats over time as a random effect (hugelab.stats.repeats), validated by simulation: with
run-level shifts the across-repeat interval covers the machine's effect, one run's does not."""

from __future__ import annotations

import numpy as np
import pytest

from hugelab.stats import repeats, signedrank
from hugelab.stats._util import StatsInputError

SIMS = 2000
MU = np.log(0.85)  # the machine's effect: 15% faster


def simulate(rng, *, sims=SIMS, r=5, blocks=10, tau=0.03, sd=0.02, mu=MU, t3=False):
    """Log-ratios (sims x repeats x blocks): each repeat shifted by N(0, tau^2), each block by
    noise of SD `sd` (Gaussian, or t with 3 degrees of freedom scaled to that SD)."""
    shift = rng.normal(0.0, tau, size=(sims, r, 1))
    noise = (rng.standard_t(3, size=(sims, r, blocks)) / np.sqrt(3.0) if t3
             else rng.normal(size=(sims, r, blocks)))
    return mu + shift + sd * noise


def covers(lo, hi, mu=MU):
    return float(np.mean((lo <= mu) & (mu <= hi)))


@pytest.mark.parametrize(("r", "t3"), [(5, False), (8, True)])
def test_across_repeat_interval_covers_while_one_run_and_pooled_blocks_do_not(r, t3):
    d = simulate(np.random.default_rng(20 + r), r=r, t3=t3)
    across = covers(*(repeats.combine_rows(d)[k] for k in ("lo", "hi")))
    _, lo1, hi1, _ = signedrank.hl_and_interval(d[:, 0, :], 0.05)  # one run's own interval
    single = covers(lo1, hi1)
    _, lo_all, hi_all, _ = signedrank.hl_and_interval(d.reshape(SIMS, -1), 0.05)
    pooled_blocks = covers(lo_all, hi_all)  # the repeat level ignored
    print(f"R={r} t3={t3}: across {across:.3f}, one run {single:.3f}, all blocks "
          f"{pooled_blocks:.3f}")
    assert 0.93 <= across <= 0.975
    assert single < 0.45
    assert pooled_blocks < 0.7


def test_without_between_run_shifts_no_false_verdicts_and_coverage_holds():
    d = simulate(np.random.default_rng(3), tau=0.0, mu=0.0)
    rows = repeats.combine_rows(d)
    assert covers(rows["lo"], rows["hi"], 0.0) >= 0.94
    assert float(np.mean(rows["p"] < 0.05)) <= 0.05


def test_power_for_a_real_effect_across_repeats():
    d = simulate(np.random.default_rng(4), mu=np.log(0.95), tau=0.01, sims=500)
    assert float(np.mean(repeats.combine_rows(d)["p"] < 0.05)) > 0.9


def test_combine_reports_each_repeat_tau_and_disagreement():
    rng = np.random.default_rng(7)
    shifts = [np.log(0.87), np.log(0.86), np.log(0.83), np.log(0.78)]  # issue 20's four runs
    runs = [s + rng.normal(0, 0.01, 10) for s in shifts]
    rep = repeats.combine(runs)
    assert [e.n for e in rep.repeats] == [10] * 4
    assert rep.pooled.k == 4 and rep.disagree and rep.between_dominates
    assert 3.0 < rep.tau_pct < 6.0
    assert rep.pooled.ci_low < np.mean(shifts) < rep.pooled.ci_high
    one = rep.repeats[0]
    assert one.ci_low < one.estimate < one.ci_high and one.se > 0
    d = rep.to_dict()
    assert d["verdict"] == "faster" and "repeats disagree" in d["reading"]
    assert d["repeats"][3]["effect_pct"] == pytest.approx(-22, abs=2)


def test_agreeing_repeats_say_so_and_short_repeats_are_left_out():
    rng = np.random.default_rng(8)
    rep = repeats.combine([np.log(0.9) + rng.normal(0, 0.01, 12) for _ in range(3)]
                          + [[np.log(0.9), np.log(0.91)]])
    assert rep.pooled.k == 3 and not rep.disagree
    assert any("repeat(s) 4 left out" in n for n in rep.notes)
    assert any("3 repeats" in n for n in rep.notes)
    assert "agree" in rep.reading()
    with pytest.raises(StatsInputError):
        repeats.combine([[0.1, 0.2]])
    with pytest.raises(StatsInputError):
        repeats.combine([[0.1, 0.2, 0.3]], better="sideways")


def test_repeats_needed_gives_the_power_it_promises_by_simulation():
    tau, sd, blocks, effect = 0.02, 0.02, 10, -0.03
    v = (1.1 * sd) ** 2 / blocks  # a repeat's HL variance over 10 Gaussian blocks, about
    r = repeats.repeats_needed(tau**2, v, effect, confidence=0.95, power=0.8)
    assert r is not None and 5 <= r <= 40
    d = simulate(np.random.default_rng(11), sims=1000, r=r, tau=tau, sd=sd,
                 mu=np.log1p(effect))
    rows = repeats.combine_rows(d)
    got = float(np.mean((rows["p"] < 0.05) & (rows["mu"] < 0)))
    print(f"repeats_needed = {r}: power {got:.3f} (asked 0.8)")
    assert got >= 0.75
    assert repeats.repeats_needed(tau**2, v, effect, confidence=0.95, power=0.8) < \
        repeats.repeats_needed(tau**2, v, effect, confidence=0.9999, power=0.9)
    assert repeats.repeats_needed(0.5, 0.0, 0.001, confidence=0.9999, power=0.9,
                                  max_repeats=50) is None
