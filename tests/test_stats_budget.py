"""`--until-verdict --budget`: a run that ends within a time, its looks planned from the blocks'
measured time (hugelab.planning.blockclock) and its last look moved earlier, spending the alpha
left (hugelab.stats.sequential.truncated), when the next block would end past the budget.
Error rates checked by simulation: a cut made from block times alone adds no false claim."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from hugelab.errors import UsageError
from hugelab.experiment import Arm, Experiment, default_experiment
from hugelab.planning.blockclock import RESERVE_S, BlockClock
from hugelab.planning.budget import CAP_FACTOR, until_verdict_blocks
from hugelab.planning.cost import estimate
from hugelab.stats import StatsInputError, run_sequential, sequential_plan
from hugelab.stats.sequential import look_schedule, truncated
from hugelab.stopping import SequentialStopper
from tests.helpers import PairedStore

ALPHA, MARGIN, SD = 0.005, 0.01, 0.015  # the examples: alpha 0.01 over 2 claims; ±1%
SIMS = 4000


def plan_for(n: int) -> Any:
    return sequential_plan(n, alpha=ALPHA, margin=MARGIN, look_sizes=look_schedule(n, ALPHA))


def test_a_cut_plan_keeps_its_earlier_looks_and_spends_the_alpha_left() -> None:
    full = plan_for(38)
    cut = truncated(full, 3, 30)
    assert cut.look_sizes == (*full.look_sizes[:3], 30) and cut.max_blocks == 30
    assert cut.truncated_from == 38 and cut.looks == 4
    assert cut.bounds[:3] == full.bounds[:3]
    assert cut.equivalence_bounds[:3] == full.equivalence_bounds[:3]
    assert cut.alpha_spent[-1] == pytest.approx(ALPHA)
    # the cut's last boundary is lower than the planned look's at a later block would be
    # there, and lower than a design planned for 30 blocks from the start
    assert cut.bounds[-1] < full.bounds[3] and cut.bounds[-1] < plan_for(30).bounds[-1]
    for bad in ((3, 38), (3, full.look_sizes[2]), (len(full.look_sizes), 37)):
        with pytest.raises(StatsInputError):
            truncated(full, *bad)


@pytest.mark.parametrize("cut_at", [20, 30, 33])
def test_a_cut_run_adds_no_false_claim_and_keeps_the_equivalence_error(cut_at: int) -> None:
    rng = np.random.default_rng(cut_at)
    full = plan_for(38)
    looks_done = sum(1 for n in full.look_sizes if n < cut_at)
    cut = truncated(full, looks_done, cut_at)
    null = rng.normal(0.0, SD, (SIMS, cut_at))
    decision, _ = run_sequential(null, cut)
    false_claims = float(np.isin(decision, ("faster", "slower")).mean())
    se = math.sqrt(ALPHA * (1 - ALPHA) / SIMS)
    assert false_claims <= ALPHA + 3 * se
    edge = rng.normal(math.log1p(MARGIN), SD, (SIMS, cut_at))  # a true shift at the margin
    decision, _ = run_sequential(edge, cut)
    assert float((decision == "equivalent").mean()) <= 2 * ALPHA + 3 * math.sqrt(
        2 * ALPHA / SIMS)
    # and the alpha left is spent: more `equivalent` A/A verdicts than the plan's own
    # boundaries would give at a look moved there without it
    kept = truncated(full, looks_done, cut_at)
    same = sequential_plan(38, alpha=ALPHA, margin=MARGIN, look_sizes=full.look_sizes)
    assert kept.equivalence_bounds[-1] < same.equivalence_bounds[looks_done]
    aa = rng.normal(0.0, SD / 2, (SIMS, cut_at))
    assert float((run_sequential(aa, cut)[0] == "equivalent").mean()) > 0.5


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


def budgeted(d: np.ndarray, budget_s: float, block_s: list[float], cap: int = 80
             ) -> tuple[SequentialStopper, int]:
    """A stopper on a fake clock whose blocks take `block_s` in turn (the last repeated):
    (the stopper, the blocks run when it stopped)."""
    exp = Experiment("aa", (Arm("a", "4k"), Arm("b", "4k")), {"kind": "fake"}, seed=1,
                     blocks=cap, baseline="a")
    clock = Clock()
    stop = SequentialStopper(exp, PairedStore(d), looks=None, alpha=0.01, margin=MARGIN,  # type: ignore[arg-type]
                             clock=BlockClock(budget_s, now=clock))
    for blocks in range(1, cap + 1):
        clock.t += block_s[min(blocks, len(block_s)) - 1]
        if stop(1, blocks, {}):
            return stop, blocks
        assert clock.t <= budget_s, "a block ended past the budget"
    return stop, cap


def wavering(amp: float = 0.012) -> np.ndarray:
    """An A/A that never decides early: blocks ±amp in turn (median 0, wider than ±1%)."""
    return np.array([amp if i % 2 else -amp for i in range(80)])


def test_the_budget_sets_the_most_blocks_from_the_blocks_measured_time() -> None:
    # 10 s a block after a 25 s first one (the run's start in it): 300 s hold 28 blocks, the
    # last ending at 295 s, RESERVE_S before the budget's end
    stop, ran = budgeted(wavering(), 300.0, [25.0, 10.0])
    info = stop.describe()
    most = 1 + math.floor((300 - RESERVE_S - 25) / 10)
    assert info["plan"]["max_blocks"] == most == 28
    assert info["plan"]["look_sizes"] == list(look_schedule(most, 0.01))
    assert info["budget"]["block_s"] == 10.0 and info["budget"]["cut"] is None
    assert ran in info["plan"]["look_sizes"]  # stopped at a look (here: futile, said so)
    assert stop.decided["b"]["decision"] == "inconclusive"


def test_blocks_that_slow_down_after_the_first_look_cut_the_plan_short() -> None:
    times = [10.0] * 20 + [20.0] * 60  # the host gets loaded after block 20
    stop, ran = budgeted(wavering(), 300.0, times)
    info = stop.describe()
    cut = info["budget"]["cut"]
    assert cut is not None and cut["blocks"] == ran < cut["planned_blocks"]
    assert info["plan"]["truncated_from"] == cut["planned_blocks"]
    assert info["plan"]["look_sizes"][-1] == ran
    assert info["plan"]["alpha_spent"][-1] == pytest.approx(0.01)
    assert info["stopped_at_look"] == info["plan"]["looks"]
    assert "past the budget" in cut["reason"]


def test_an_easy_aa_stops_early_under_a_budget() -> None:
    quiet = np.random.default_rng(5).normal(0, 0.002, 80)
    stop, ran = budgeted(quiet, 300.0, [10.0])
    assert stop.decided["b"]["decision"] == "equivalent"
    assert ran == stop.describe()["plan"]["look_sizes"][0] < stop.plan.max_blocks


def test_a_budget_that_ends_before_six_blocks_says_so() -> None:
    stop, ran = budgeted(np.zeros(80), 40.0, [10.0])
    assert ran == 3
    assert stop.decided["b"]["decision"] == "inconclusive"
    assert "needs 6" in stop.decided["b"]["reason"]


def test_the_run_is_given_twice_the_blocks_the_estimate_fits_and_a_preview_those() -> None:
    exp = default_experiment()
    per = estimate(exp).per_block_s
    assert per > 0
    fits = until_verdict_blocks(exp, 100 * per, preview=True)
    assert fits == math.floor((100 * per - RESERVE_S) / per)
    assert until_verdict_blocks(exp, 100 * per, preview=False) == CAP_FACTOR * fits
    with pytest.raises(UsageError, match="needs 6 or more") as err:
        until_verdict_blocks(exp, 5 * per + RESERVE_S, preview=False)
    assert err.value.hint and "--budget" in err.value.hint
