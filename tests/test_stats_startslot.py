"""Start-slot adjustment of request-interleaved log-ratios (hugelab.stats.startslot): the fit,
the spread correction, its error rates by simulation (bench/slot_adjust_sim.py at a small
count), and its use by the stopper and the report for the same run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from bench.slot_adjust_sim import PG_SLOTS, adjusted, plain, predictive, replay, runs, slots
from hugelab.experiment import Arm, Experiment
from hugelab.report.analysis import analyse
from hugelab.report.runload import from_rows
from hugelab.stats import sequential_plan, signedrank, startslot, weighted
from hugelab.stats.reach import reach_arrays, unit_sds
from hugelab.stats.sequential import look_schedule
from hugelab.stopping import SequentialStopper

ARMS = ["off", "off-again", "on"]
EFFECTS = np.log1p(np.array(PG_SLOTS))


def one_run(blocks: int, seed: int, noise: float = 0.02, twin: float = 0.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """(blocks x 3) log values and start slots of one balanced run with PostgreSQL's slots."""
    slot = slots(1, blocks, 3, seed)
    y = runs(np.random.default_rng(seed), slot, PG_SLOTS, noise, "normal", twin)
    return y[0], slot[0]


def test_the_fit_recovers_slot_effects_and_removes_them_exactly() -> None:
    y, slot = one_run(12, 1, noise=0.0)
    found = startslot.fit(y, slot)
    assert found is not None and found.blocks.size == 12
    assert np.allclose(found.effects, EFFECTS)
    d = startslot.adjust(y, slot, 1, 0, found)
    assert np.allclose(d, 0.0)  # the twin is the baseline's copy: nothing left
    assert np.allclose(startslot.adjust(y, slot, 2, 0, found), math.log1p(0.10))
    assert "start slots 1 to 3: +0.0%, +1.2%, +5.0%" in found.sentence()


def test_no_fit_with_too_few_blocks_or_slots_tied_to_arms() -> None:
    y, slot = one_run(12, 2)
    assert startslot.fit(y[:5], slot[:5]) is None
    same = np.tile(np.arange(3), (12, 1))  # every block in one order: slot is the arm
    assert startslot.fit(y, same) is None


def test_a_block_missing_an_arm_is_left_out_of_the_fit_but_its_pair_adjusted() -> None:
    y, slot = one_run(18, 3)
    y[4, 2] = np.nan  # `on` failed in block 4: the twin's pair is still there
    found = startslot.fit(y, slot)
    assert found is not None and 4 not in found.blocks and found.blocks.size == 17
    d = startslot.adjust(y, slot, 1, 0, found)
    assert d.size == 18
    y[6, 0] = np.nan  # the baseline failed: the pair is gone
    found = startslot.fit(y, slot)
    assert found is not None and startslot.adjust(y, slot, 1, 0, found).size == 17


def test_the_adjustment_cuts_the_spread_and_keeps_a_balanced_mean() -> None:
    slot = slots(300, 30, 3, 4)
    y = runs(np.random.default_rng(4), slot, PG_SLOTS, 0.03, "normal", 0.0)
    before = y[:, :, 1] - y[:, :, 0]
    after = adjusted(y, slot)(30)
    assert before.std(axis=1).mean() > 1.4 * after.std(axis=1).mean()
    assert np.allclose(before.mean(axis=1), after.mean(axis=1), atol=0.004)


def test_the_spread_factor_is_the_variance_the_fit_takes_away() -> None:
    sims, n = 3000, 20
    slot = slots(sims, n, 3, 5)
    y = runs(np.random.default_rng(5), slot, PG_SLOTS, 0.03, "normal", 0.0)
    eff, w, cov, ok = startslot.fit_batch(y, slot, 3)
    assert ok.all()
    sa, sb = slot[:, :, 1], slot[:, :, 0]
    d = y[:, :, 1] - y[:, :, 0] - (np.take_along_axis(eff, sa, 1)
                                   - np.take_along_axis(eff, sb, 1))
    factor = startslot.spread_factor(sa, sb, w[:, :, 1] - w[:, :, 0], cov)
    seen = d.var(axis=1, ddof=1).mean() / 0.03 ** 2
    assert 0.9 < factor.mean() < 0.97 and abs(seen - factor.mean()) < 0.015
    # one run through the single-run API gives the batch's answer
    found = startslot.fit(y[0], slot[0])
    assert found is not None
    assert np.allclose(startslot.adjust(y[0], slot[0], 1, 0, found),
                       startslot.spread(d[:1], factor[:1])[0])


def test_the_simulation_keeps_the_fast_futility_equal_to_reach() -> None:
    plan = sequential_plan(30, alpha=0.005, margin=0.01, look_sizes=look_schedule(30, 0.005))
    d = np.random.default_rng(6).normal(0.002, 0.03, (8, 17))
    theta, sd = unit_sds(d)
    _, p_eq, p_diff = reach_arrays(theta, sd, 17, plan)
    mine = predictive(theta, sd, 17, plan)
    assert np.allclose(p_eq, mine[0]) and np.allclose(p_diff, mine[1])


def test_false_verdicts_and_coverage_hold_with_the_adjustment() -> None:
    """A small count of bench/slot_adjust_sim.py's A/A runs: PostgreSQL's slot effects, noise
    SD 3%, 30 blocks, the examples' plan. Alpha is 0.005 per claim: 400 runs allow a few."""
    sims, n = 400, 30
    plan = sequential_plan(n, alpha=0.005, margin=0.01, better="higher",
                           look_sizes=look_schedule(n, 0.005))
    slot = slots(sims, n, 3, 7)
    y = runs(np.random.default_rng(7), slot, PG_SLOTS, 0.03, "normal", 0.0)
    decision, _ = replay(adjusted(y, slot), sims, plan)
    assert np.mean(np.isin(decision, ["faster", "slower"])) <= 0.02
    _, lo, hi, _ = signedrank.hl_and_interval(adjusted(y, slot)(n), 0.05)
    assert 0.92 <= np.mean((lo <= 0) & (hi >= 0)) <= 0.98
    real = runs(np.random.default_rng(8), slot, PG_SLOTS, 0.03, "normal", 0.03)
    won, _ = replay(adjusted(real, slot), sims, plan)
    lost, _ = replay(plain(real, slot), sims, plan)
    assert np.mean(won == "faster") > np.mean(lost == "faster") + 0.2


# --- the stopper and the report, on the same run -------------------------------------------

def value_rows(y: np.ndarray, slot: np.ndarray) -> list[tuple[int, int, str, str, str, float]]:
    out = []
    for b in range(y.shape[0]):
        for a in np.argsort(slot[b]):
            out.append((b, int(slot[b, a]), ARMS[a], "native", "ok",
                        float(1000 * math.exp(y[b, a]))))
    return out


@dataclass
class Store:
    """The three reads SequentialStopper makes of a store (`ses`: trials' own SEs)."""
    rows: list[tuple[int, int, str, str, str, float]]
    provenance: dict[str, Any] = field(default_factory=lambda: {
        "interleaved": {"design": "requests", "servers": 3}})
    ses: dict[tuple[int, str], float] = field(default_factory=dict)

    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float]]:
        return self.rows

    def trial_metric(self, run_id: int, key: str) -> dict[tuple[int, str], float]:
        assert key == "window_hl_se_log"
        return self.ses

    def trials(self, run_id: int) -> list[dict[str, Any]]:
        return [{"better": "higher", "provenance": self.provenance}]


def stopped(store: Store, design: str) -> SequentialStopper:
    exp = Experiment("pg", tuple(Arm(a, "4k") for a in ARMS), {"kind": "fake"}, seed=1,
                     blocks=30, baseline="off", design=design)
    stop = SequentialStopper(exp, store, looks=None, alpha=0.01, margin=0.01)  # type: ignore[arg-type]
    for blocks in range(1, 31):
        if stop(1, blocks, {}):
            break
    return stop


def test_the_stopper_adjusts_request_interleaved_runs_only() -> None:
    y, slot = one_run(30, 9, noise=0.01)
    rows = value_rows(y, slot)
    info = stopped(Store(rows), "interleaved").describe()
    assert info["start_slot_adjusted"] is True
    first = info["looks"][0]
    assert np.allclose(first["start_slots_pct"], [0.0, 1.2, 5.0], atol=1.0)
    n = first["blocks"]
    found = startslot.fit(y[:n], slot[:n])
    assert found is not None
    d = startslot.adjust(y[:n], slot[:n], 1, 0, found)
    assert first["decisions"]["off-again"]["z"] == pytest.approx(
        float(signedrank.z_statistic(d[None])[0]))
    for design, prov in (("paired", {}), ("interleaved", {"interleaved": {"design": "mem"}})):
        info = stopped(Store(rows, prov), design).describe()
        assert "start_slot_adjusted" not in info and "start_slots_pct" not in info["looks"][0]


def test_trials_with_their_own_ses_are_weighted_at_every_look() -> None:
    """A request-level run whose trials carry `window_hl_se_log`: each look's z is the weighted
    one (hugelab.stats.weighted) of the slot-adjusted log-ratios with those SEs, in block
    order; its effect is the weighted mean and its interval the one at the look's bound; a
    trial without an SE sends that look back to the signed-rank test."""
    y, slot = one_run(30, 9, noise=0.01)
    rng = np.random.default_rng(4)
    ses = {(b, a): float(rng.uniform(0.004, 0.03)) for b in range(30) for a in ARMS[1:]}
    stop = stopped(Store(value_rows(y, slot), ses=ses), "interleaved")
    last = stop.describe()["looks"][-1]  # the twin's last look (30 blocks)
    n = last["blocks"]
    found = startslot.fit(y[:n], slot[:n])
    assert found is not None
    d = startslot.adjust(y[:n], slot[:n], 1, 0, found)
    se = np.array([ses[(b, "off-again")] for b in range(n)])
    dec = last["decisions"]["off-again"]
    bound = stop.plan.equivalence_bounds[-1]
    z, _ = weighted.tests(d[None], se[None] ** 2, math.log1p(0.01), bound)
    assert dec["statistic"] == "weighted" and dec["z"] == pytest.approx(float(z[0]))
    r = weighted.reading(d, se, bound)
    assert dec["effect_pct"] == pytest.approx(100 * math.expm1(r.estimate))
    assert dec["interval_pct"] == pytest.approx([100 * math.expm1(r.lo), 100 * math.expm1(r.hi)])
    del ses[(3, "off-again")]
    again = stopped(Store(value_rows(y, slot), ses=ses), "interleaved").describe()
    assert again["looks"][0]["decisions"]["off-again"]["statistic"] == "signed-rank"
    assert again["looks"][0]["decisions"]["on"]["statistic"] == "weighted"


def report_of(y: np.ndarray, slot: np.ndarray, sequential: dict[str, Any] | None
              ) -> dict[str, Any]:
    run = {"id": 1, "name": "pg", "experiment": {"design": "interleaved", "baseline": "off",
                                                 "arms": [{"name": a} for a in ARMS]},
           "sequential": sequential}
    data = from_rows(run, value_rows(y, slot))
    for d in data.details:
        d.provenance = [{"interleaved": {"design": "requests"}}]
        d.better = "higher"
    return {c["name"]: c for c in analyse(data).json()["comparisons"]}


def test_the_report_gives_the_stoppers_adjusted_interval_and_says_so() -> None:
    y, slot = one_run(20, 10, noise=0.02)
    found = startslot.fit(y, slot)
    assert found is not None
    d = startslot.adjust(y, slot, 1, 0, found)
    hl, lo, hi, _ = signedrank.hl_and_interval(d[None], 0.05)
    twin = report_of(y, slot, {"start_slot_adjusted": True})["off-again vs off"]
    assert twin["effect_pct"] == pytest.approx(100 * math.expm1(hl[0]))
    assert twin["ci_low_pct"] == pytest.approx(100 * math.expm1(lo[0]))
    assert any(n.startswith("intervals adjusted for start order") for n in twin["notes"])
    assert report_of(y, slot, None)["off-again vs off"]["ci_low_pct"] == twin["ci_low_pct"]
    # looks made without the adjustment (a run recorded before it): plain intervals kept
    old = report_of(y, slot, {"looks": []})["off-again vs off"]
    plain_d = y[:, 1] - y[:, 0]
    _, lo0, _, _ = signedrank.hl_and_interval(plain_d[None], 0.05)
    assert old["ci_low_pct"] == pytest.approx(100 * math.expm1(lo0[0]))
    assert not any("start order" in n for n in old["notes"])
